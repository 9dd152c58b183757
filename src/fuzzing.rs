//! The properties the fuzz targets (fuzz/) hold the compiler to, as functions, so the same
//! checks run under libFuzzer for minutes and in `cargo test` as a smoke run: any input gives
//! diagnostics with a code and a label inside the text, never a panic; a plan that checks
//! clean derives to lists the validator accepts and that simulate to a finite step, and every
//! backend, allowed its nearest plan, emits files under its own directory or refuses with E0402;
//! fmt is idempotent on what it accepts; a `--set` flag is applied whole or refused with a code.

use crate::backend::{Request, Target};
use crate::driver;
use crate::resolve::loader::MemoryLoader;

fn text_of(data: &[u8]) -> Option<&str> {
    std::str::from_utf8(data).ok()
}

/// Parsing and formatting.
pub fn parse(data: &[u8]) {
    let Some(text) = text_of(data) else { return };
    match crate::parse::parse(crate::span::FileId(0), text) {
        Ok(_) => {
            let once = crate::fmt::format(text).expect("what parses, formats");
            let twice = crate::fmt::format(&once).expect("formatted text parses");
            assert_eq!(once, twice, "fmt is idempotent");
        }
        Err(e) => {
            let d = e.to_diagnostic();
            for l in &d.labels {
                assert!(l.span.end as usize <= text.len(), "labels stay inside the text");
            }
        }
    }
}

/// Loading, resolving and checking, standard library included.
pub fn check(data: &[u8]) -> crate::driver::Compiled {
    let checked = crate::driver::compile("fuzz.mpipe", "fuzz.mpipe", data.to_vec(), &MemoryLoader::new());
    labels_inside(&checked);
    checked
}

/// The plan `--set` flags are fuzzed against: two regions, every section written.
const OVERRIDDEN: &str = include_str!("../examples/paper_small.mpipe");

/// `--set KEY=VALUE` with any flag text: diagnostics with a code and labels inside their files,
/// never a panic; and a flag with no diagnostic of its own was applied whole, so writing it into
/// the file (as `tune -o` does) checks to the same diagnostics. An override that dropped part
/// of its text (`cluster.pp=4; } schedule gpipe; …`) fails here.
pub fn overrides(data: &[u8]) {
    let Some((key, value)) = text_of(data).and_then(crate::overrides::split) else { return };
    let set = [(key.to_string(), value.to_string())];
    let checked = checked_with(OVERRIDDEN, &set);
    labels_inside(&checked);
    let sources = &checked.program.sources;
    let own = |d: &crate::diagnostics::Diagnostic| {
        d.labels.iter().any(|l| sources.get(l.span.file).name.starts_with("--set "))
    };
    if checked.diagnostics.iter().any(own) {
        return;
    }
    let Ok(written) = crate::edit::apply(OVERRIDDEN, &set) else { return };
    let said = |c: &crate::driver::Compiled| -> Vec<(crate::diagnostics::Code, String)> {
        c.diagnostics.iter().map(|d| (d.code, d.message.clone())).collect()
    };
    assert_eq!(
        said(&checked),
        said(&checked_with(&written, &[])),
        "`--set {key}={value}` and the same text in the file"
    );
}

fn checked_with(text: &str, set: &[(String, String)]) -> crate::driver::Compiled {
    let loader = MemoryLoader::new();
    crate::driver::load("fuzz.mpipe", "fuzz.mpipe", text.as_bytes().to_vec(), &loader).check(&loader, set)
}

fn labels_inside(checked: &crate::driver::Compiled) {
    for d in &checked.diagnostics {
        let _ = crate::diagnostics::json::to_json(d, &checked.program.sources);
        for l in &d.labels {
            let file = checked.program.sources.get(l.span.file);
            assert!(
                l.span.start <= l.span.end && l.span.end as usize <= file.text.len(),
                "labels stay inside their file"
            );
        }
    }
}

/// Plans above this many stage-microbatches (pp × M) are not derived here: the fuzzer looks
/// for shapes that break the compiler, and a 500 000-microbatch plan spends minutes in the
/// instrumented build on nothing new. Size is the benches' and tests/robustness.rs' concern.
pub const PIPELINE_FUZZ_SIZE: u64 = 20_000;

/// Check, then for a valid plan derive, validate and simulate.
pub fn pipeline(data: &[u8]) {
    let checked = check(data);
    let Some(plan) = &checked.plan else { return };
    if plan.cluster.pp.saturating_mul(plan.batch.microbatches) > PIPELINE_FUZZ_SIZE {
        return;
    }
    let requests: Vec<Request> =
        Target::ALL.iter().map(|&target| Request { target, nearest: true, span: None }).collect();
    let products = match driver::produce(plan, &requests, driver::Make::Files, &|| true) {
        Ok(products) => products.expect("nothing cancels this build"),
        Err(e) => panic!("a checked plan failed validation: {:?}", e.problems),
    };
    let sim = products.built.evaluate();
    assert!(sim.report.step_time_s.is_finite() && sim.report.step_time_s >= 0.0);
    assert!(sim.report.step_time_s + 1e-9 >= sim.report.lower_bound_s * (1.0 - 1e-9));
    for answer in &products.answers {
        let name = answer.target.name();
        if answer.refused {
            assert!(
                answer.diagnostics.iter().all(|d| d.code == crate::diagnostics::Code::E0402),
                "with nearest, {name} can only refuse with E0402: {:?}",
                answer.diagnostics
            );
        } else {
            assert!(
                !answer.artifacts.is_empty() && answer.artifacts.iter().all(|a| a.path.starts_with(name)),
                "{name} wrote outside its directory"
            );
        }
    }
}
