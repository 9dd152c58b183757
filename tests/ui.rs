//! Diagnostics snapshots: every fixture under tests/ui/<area>/ checked through the library,
//! its human rendering (no colour) and its JSON snapshotted. Files under tests/ui/*/lib/ are
//! imported by fixtures, not checked on their own.

mod common;

use std::collections::BTreeSet;

use mpipe::Depth;
use mpipe::diagnostics::Code;

#[test]
fn fixtures() {
    let loader = common::ui_loader();
    let ui = common::root().join("tests/ui");
    insta::glob!("ui/*/*.mpipe", |path| {
        let key = path.strip_prefix(&ui).unwrap().to_string_lossy().into_owned();
        let (checked, human, json) = common::check_rendered(&key, std::fs::read(path).unwrap(), &loader);
        assert!(
            !mpipe::diagnose(&checked, Depth::Build).is_empty(),
            "{key} is a fixture for a diagnostic but produced none"
        );
        insta::assert_snapshot!("human", human);
        insta::assert_snapshot!("json", json);
    });
}

/// A file past the size limit cannot sit in the repository; it is made here.
#[test]
fn generated_too_large() {
    let mut text = String::from("cut llm;\n");
    while text.len() <= mpipe::parse::MAX_FILE_BYTES {
        text.push_str("// padding padding padding padding padding padding padding padding\n");
    }
    let (_, human, json) =
        common::check_rendered("too_large.mpipe", text.into_bytes(), &mpipe::resolve::loader::MemoryLoader::new());
    insta::assert_snapshot!("too_large_human", human);
    insta::assert_snapshot!("too_large_json", json);
}

#[test]
fn every_code_has_a_fixture() {
    let loader = common::ui_loader();
    let mut seen: BTreeSet<Code> = BTreeSet::from([Code::E0004]); // generated_too_large
    for common::Fixture { key, path, bytes, set } in common::ui_fixtures() {
        let checked = mpipe::driver::load(&key, &key, bytes, &loader).check(&loader, &set);
        let all = mpipe::diagnose(&checked, Depth::Build);
        seen.extend(all.iter().map(|d| d.code));
        let header = std::fs::read_to_string(&path).unwrap_or_default();
        if let Some(code) = header.strip_prefix("// ").and_then(|h| h.split(':').next()).and_then(Code::parse) {
            assert!(all.iter().any(|d| d.code == code), "{key} says it shows {code:?} but does not");
        }
    }
    let missing: Vec<&str> = Code::ALL.iter().filter(|c| !seen.contains(c)).map(|c| c.as_str()).collect();
    assert!(missing.is_empty(), "codes without a fixture under tests/ui: {missing:?}");
}

#[test]
fn diagnostics_are_sorted_by_position() {
    let loader = common::ui_loader();
    let checked = mpipe::driver::compile(
        "syntax/several_errors.mpipe",
        "syntax/several_errors.mpipe",
        std::fs::read(common::root().join("tests/ui/syntax/several_errors.mpipe")).unwrap(),
        &loader,
    );
    let positions: Vec<_> = checked.diagnostics.iter().map(|d| d.position()).collect();
    let mut sorted = positions.clone();
    sorted.sort();
    assert_eq!(positions, sorted);
    assert!(checked.diagnostics.len() >= 4, "all independent errors are reported in one run");
}

/// A fix-it is a promise: applied, it removes its diagnostic without causing another. Every
/// fixture's every fix is applied to the file it points into and the result checked again.
#[test]
fn fixes_leave_plans_that_check() {
    let loader = common::ui_loader();
    let mut fixes = 0;
    for common::Fixture { key, bytes, set, .. } in common::ui_fixtures() {
        let before = mpipe::diagnose(
            &mpipe::driver::load(&key, &key, bytes.clone(), &loader).check(&loader, &set),
            Depth::Build,
        );
        let errors = |all: &[mpipe::diagnostics::Diagnostic]| -> BTreeSet<Code> {
            all.iter().filter(|d| d.is_error()).map(|d| d.code).collect()
        };
        for diagnostic in before.iter().filter(|d| d.fix.is_some()) {
            let fix = diagnostic.fix.as_ref().unwrap();
            let checked = mpipe::driver::load(&key, &key, bytes.clone(), &loader).check(&loader, &set);
            if checked.program.sources.get(fix.span.file).name != key {
                continue; // a fix inside an override or an imported file
            }
            let mut text = String::from_utf8(bytes.clone()).unwrap();
            text.replace_range(fix.span.range(), &fix.replacement);
            let after = mpipe::diagnose(
                &mpipe::driver::load(&key, &key, text.clone().into_bytes(), &loader).check(&loader, &set),
                Depth::Build,
            );
            let (was, now) = (errors(&before), errors(&after));
            // A fixture may show one code twice (two invalid choices); the fixed one is gone.
            let still = after.iter().any(|d| d.code == diagnostic.code && d.message == diagnostic.message);
            assert!(
                !still && now.is_subset(&was),
                "{key}: the fix of {:?} leaves {now:?} (before: {was:?}):\n{text}",
                diagnostic.code
            );
            fixes += 1;
        }
    }
    assert!(fixes >= 3, "the fixtures show fewer fixes than they did ({fixes})");
}
