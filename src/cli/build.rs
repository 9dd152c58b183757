//! `mpipec build PLAN -o OUT/`

use std::path::{Path, PathBuf};

use super::report::Reporter;
use super::{EXIT_USAGE, Global, output};

pub const EXIT_INTERNAL: u8 = 101;

pub fn run(global: &Global, plan: &Path, out: &Path, force: bool, targets: &[String]) -> u8 {
    let mut reporter = Reporter::new(global);
    let (checked, plan_spec) = match super::check::load_plan(global, plan, &mut reporter) {
        Ok(loaded) => loaded,
        Err(status) => return status,
    };
    let derived = match mpipe::build::derive_checked(&plan_spec) {
        Ok(d) => d,
        Err(invalid) => return internal_error(&invalid),
    };
    let simulation = mpipe::build::simulate(&plan_spec, &derived);
    reporter.emit(&mpipe::build::diagnostics(&plan_spec, &simulation), &checked.program.sources);
    let mut files = mpipe::build::artifacts(&derived, &simulation);
    if !mpipe::build::pictured(&derived.ir) {
        eprintln!(
            "note: timeline.svg and timeline.json are left out: the plan has more than {} instructions",
            mpipe::build::PICTURE_INSTRUCTIONS
        );
    }
    let targets: Vec<String> = if targets.is_empty() { plan_spec.targets.clone() } else { targets.to_vec() };
    for t in &targets {
        match t.as_str() {
            "torch" => files.extend(mpipe::backend::torch::artifacts(&plan_spec, &derived.ir)),
            other if mpipe::check::spec::TARGETS.contains(&other) => {
                eprintln!("warning: the `{other}` backend is not part of this version; nothing is written for it");
            }
            other => {
                reporter.plain_error(&format!(
                    "unknown target `{other}`: targets are {}",
                    mpipe::check::spec::TARGETS.join(", ")
                ));
                reporter.finish();
                return EXIT_USAGE;
            }
        }
    }
    if let Err(message) = output::write_atomically(out, &files, force) {
        reporter.plain_error(&message);
        reporter.finish();
        return EXIT_USAGE;
    }
    reporter.finish();
    let names: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
    eprintln!("wrote {} ({})", out.display(), names.join(", "));
    0
}

/// A derived plan the validator rejected: a compiler bug, reported with a dump.
pub fn internal_error(invalid: &mpipe::build::InvalidPlan) -> u8 {
    eprintln!(
        "error: internal compiler error: the derived plan failed validation ({} problems)",
        invalid.problems.len()
    );
    for p in invalid.problems.iter().take(20) {
        eprintln!("  - {p}");
    }
    eprintln!(
        "note: this is a bug in mpipec {}; nothing was written. The derived lists follow:\n{}",
        mpipe::VERSION,
        invalid.dump
    );
    EXIT_INTERNAL
}

pub fn default_out() -> PathBuf {
    PathBuf::from("out")
}
