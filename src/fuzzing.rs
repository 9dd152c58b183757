//! The properties the fuzz targets (fuzz/) hold the compiler to, as functions, so the same
//! checks run under libFuzzer for minutes and in `cargo test` as a smoke run: any input gives
//! diagnostics with a code and a label inside the text, never a panic; a plan that checks
//! clean derives to lists the validator accepts and that simulate to a finite step, and every
//! backend, allowed its nearest plan, emits files under its own directory or refuses with E0402;
//! fmt is idempotent on what it accepts.

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
    checked
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
        Target::ALL.into_iter().map(|target| Request { target, nearest: true, span: None }).collect();
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
