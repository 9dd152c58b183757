//! `mpipec check FILE…`

use std::path::{Path, PathBuf};

use super::loader::{FsLoader, io_reason};
use super::report::Reporter;
use super::{EXIT_INPUT, EXIT_USAGE, Global};

/// Loads and checks one plan from disk; `Err` is an I/O problem with the plan file itself.
pub fn load(global: &Global, path: &Path) -> Result<mpipe::Checked, String> {
    load_with(global, path, &[])
}

/// [`load`] with more overrides after the global `--set`s.
pub fn load_with(global: &Global, path: &Path, extra: &[(String, String)]) -> Result<mpipe::Checked, String> {
    let shown = path.display();
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read `{shown}`: {}", io_reason(e)))?;
    let (loader, key) = FsLoader::for_plan(path, global.allow_outside)
        .map_err(|e| format!("cannot read `{shown}`: {}", io_reason(e)))?;
    let overrides: Vec<(String, String)> = global.set.iter().chain(extra).cloned().collect();
    Ok(mpipe::check_with(&key, &path.to_string_lossy(), bytes, &loader, &overrides))
}

/// Loads the plan, reports its diagnostics, and hands back the checked plan; `Err` is the exit
/// status when there is none (an I/O problem, errors, or a file of definitions only).
pub fn load_plan(
    global: &Global,
    path: &Path,
    reporter: &mut Reporter,
) -> Result<(mpipe::Checked, mpipe::plan::Plan), u8> {
    let checked = match load(global, path) {
        Ok(c) => c,
        Err(message) => {
            reporter.plain_error(&message);
            reporter.finish();
            return Err(EXIT_USAGE);
        }
    };
    reporter.emit(&checked.diagnostics, &checked.program.sources);
    match checked.plan.clone() {
        Some(plan) => Ok((checked, plan)),
        None => {
            if !checked.has_errors() {
                reporter.plain_error(&format!(
                    "`{}` defines no plan: a plan needs model, cluster, batch, cut and schedule",
                    path.display()
                ));
            }
            reporter.finish();
            Err(EXIT_INPUT)
        }
    }
}

pub fn run(global: &Global, files: &[PathBuf]) -> u8 {
    let mut reporter = Reporter::new(global);
    let mut io_failed = false;
    for path in files {
        match load(global, path) {
            Ok(checked) => reporter.emit(&checked.diagnostics, &checked.program.sources),
            Err(message) => {
                reporter.plain_error(&message);
                io_failed = true;
            }
        }
    }
    reporter.finish();
    if io_failed {
        EXIT_USAGE
    } else if reporter.errors() > 0 {
        EXIT_INPUT
    } else {
        0
    }
}
