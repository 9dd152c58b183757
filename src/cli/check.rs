//! `mpipec check FILE…`: every diagnostic `build` would give each file ([`mpipe::diagnose`] at
//! [`Depth::Build`]), with nothing written.

use std::path::{Path, PathBuf};

use mpipe::Depth;
use mpipe::driver::{Compiled, Loaded};
use mpipe::plan::Plan;

use super::loader::{FsLoader, io_reason};
use super::report::Reporter;
use super::{EXIT_INPUT, EXIT_USAGE, Global};

/// One plan file read from disk and loaded, not yet checked, with the loader that reads its
/// imports and data files: what a sweep or a search checks under each of its overrides.
pub struct Source {
    loaded: Loaded,
    loader: FsLoader,
}

impl Source {
    /// Reads and loads `path` (`-`: standard input, whose `use "…"` paths resolve against the
    /// working directory); `Err` is an I/O problem with the plan file itself.
    pub fn read(global: &Global, path: &Path) -> Result<Source, String> {
        let shown = path.display();
        let cannot = |e| format!("cannot read `{shown}`: {}", io_reason(e));
        let (bytes, (loader, key), name) = if path == Path::new(STDIN) {
            let loader = FsLoader::for_stdin(STDIN_NAME, global.allow_outside).map_err(cannot)?;
            (stdin_bytes().map_err(cannot)?, loader, STDIN_NAME.into())
        } else {
            let bytes = std::fs::read(path).map_err(cannot)?;
            (bytes, FsLoader::for_plan(path, global.allow_outside).map_err(cannot)?, path.to_string_lossy())
        };
        let mut loader = loader;
        if let Some(profile) = &global.profile {
            loader.allow(profile);
        }
        Ok(Source { loaded: mpipe::driver::load(&key, &name, bytes, &loader), loader })
    }

    /// The plan checked with the global `--set`s and `--profile`, and then `extra`.
    pub fn check(&self, global: &Global, extra: &[(String, String)]) -> Compiled {
        self.loaded.clone().check(&self.loader, &overrides(global, extra))
    }
}

/// The global `--set`s, `--profile` as the `cluster.profile` it stands for, then `extra`.
fn overrides(global: &Global, extra: &[(String, String)]) -> Vec<(String, String)> {
    let profile = global.profile.as_ref().map(|p| {
        let absolute = std::path::absolute(p).unwrap_or_else(|_| p.clone());
        ("cluster.profile".to_string(), format!("{:?}", absolute.to_string_lossy()))
    });
    global.set.iter().cloned().chain(profile).chain(extra.iter().cloned()).collect()
}

/// The plan path that means standard input, and the name its diagnostics show.
const STDIN: &str = "-";
const STDIN_NAME: &str = "<stdin>";

/// Standard input, read once: `verify` loads its plan twice.
fn stdin_bytes() -> std::io::Result<Vec<u8>> {
    static TEXT: std::sync::OnceLock<Result<Vec<u8>, std::io::ErrorKind>> = std::sync::OnceLock::new();
    TEXT.get_or_init(|| {
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut bytes).map(|_| bytes).map_err(|e| e.kind())
    })
    .clone()
    .map_err(std::io::Error::from)
}

/// Reads, loads and checks one plan from disk; `Err` is an I/O problem with the plan file itself.
pub fn load(global: &Global, path: &Path) -> Result<Compiled, String> {
    let Source { loaded, loader } = Source::read(global, path)?;
    Ok(loaded.check(&loader, &overrides(global, &[])))
}

/// [`Source::read`], with an I/O problem reported; `Err` is the exit status.
pub fn read_source(global: &Global, path: &Path, reporter: &mut Reporter) -> Result<Source, u8> {
    Source::read(global, path).map_err(|message| {
        reporter.plain_error(&message);
        reporter.finish();
        EXIT_USAGE
    })
}

/// Loads the plan, reports its diagnostics, and hands back the checked plan; `Err` is the exit
/// status when there is none (an I/O problem, errors, or a file of definitions only).
pub fn load_plan(global: &Global, path: &Path, reporter: &mut Reporter) -> Result<(Compiled, Plan), u8> {
    let Source { loaded, loader } = read_source(global, path, reporter)?;
    plan_of(loaded.check(&loader, &overrides(global, &[])), path, reporter)
}

/// Reports the diagnostics of the plan checked from `path` and takes the plan out of it; `Err`
/// is the exit status when there is none (errors, or a file of definitions only).
pub fn plan_of(mut checked: Compiled, path: &Path, reporter: &mut Reporter) -> Result<(Compiled, Plan), u8> {
    reporter.emit(&checked.diagnostics, &checked.program.sources);
    match checked.plan.take() {
        Some(plan) => Ok((checked, plan)),
        None => {
            if !checked.has_errors() {
                reporter.plain_error(&no_plan(path));
            }
            reporter.finish();
            Err(EXIT_INPUT)
        }
    }
}

fn no_plan(path: &Path) -> String {
    format!("`{}` defines no plan: a plan needs model, cluster, batch, cut and schedule", path.display())
}

pub fn run(global: &Global, files: &[PathBuf]) -> u8 {
    let mut reporter = Reporter::new(global);
    let mut io_failed = false;
    for path in files {
        match load(global, path) {
            Ok(checked) => {
                reporter.emit(&mpipe::diagnose(&checked, Depth::Build), &checked.program.sources);
                // A file of definitions checks; one that defines nothing is no plan, as `build` says.
                let empty = checked.program.modules[0].ast.as_ref().is_some_and(|m| m.items.is_empty());
                if empty && !checked.has_errors() {
                    reporter.plain_error(&no_plan(path));
                }
            }
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
