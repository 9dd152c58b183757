//! `mpipec build PLAN -o OUT/`

use std::path::{Path, PathBuf};

use super::report::Reporter;
use super::{EXIT_INPUT, EXIT_USAGE, Global, output};

pub const EXIT_INTERNAL: u8 = 101;

pub fn run(global: &Global, plan: &Path, out: &Path, force: bool, targets: &[String], nearest: bool) -> u8 {
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
    let requests = match mpipe::backend::requests(&plan_spec, targets, nearest) {
        Ok(r) => r,
        Err(unknown) => {
            reporter.plain_error(&format!(
                "unknown target `{unknown}`: targets are {}",
                mpipe::check::spec::TARGETS.join(", ")
            ));
            reporter.finish();
            return EXIT_USAGE;
        }
    };
    // Every target is emitted (or refused) before anything is written: one that cannot run
    // the plan leaves the output directory as it was.
    let mut failed = false;
    for request in requests {
        match mpipe::backend::emit(request, &plan_spec, &derived, simulation.report.step_time_s) {
            Ok(emitted) => {
                reporter.emit(&emitted.diagnostics, &checked.program.sources);
                files.extend(emitted.artifacts);
            }
            Err(diagnostics) => {
                reporter.emit(&diagnostics, &checked.program.sources);
                failed = true;
            }
        }
    }
    if failed {
        reporter.finish();
        eprintln!("nothing was written to {}", out.display());
        return EXIT_INPUT;
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
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
