//! mpipe: the compiler core of mpipec. Pure: no file system, no printing. The pipeline is
//! `parse` → `ast` → `resolve` → `check` → (`derive` → `ir` → `sim` → `backend`), with every
//! problem reported as an [`error::Error`] and rendered by [`diagnostics`].

pub mod algebra;
pub mod ast;
pub mod backend;
pub mod bench;
pub mod build;
pub mod catalog;
pub mod check;
pub mod cost;
pub mod derive;
pub mod diagnostics;
pub mod edit;
pub mod error;
pub mod explore;
pub mod fmt;
pub mod fuzzing;
pub mod ide;
pub mod ir;
pub mod overrides;
pub mod parse;
pub mod plan;
pub mod resolve;
pub mod sim;
pub mod span;
pub mod suggest;
pub mod units;

use diagnostics::Diagnostic;
use plan::Plan;
use resolve::Program;
use resolve::loader::Loader;

pub use backend::VERSION;

/// A plan and everything learnt about it: the files read, the checked plan (when it is one
/// and has no errors) and every diagnostic, sorted by position.
pub struct Checked {
    pub program: Program,
    pub plan: Option<Plan>,
    pub diagnostics: Vec<Diagnostic>,
}

impl Checked {
    pub fn has_errors(&self) -> bool {
        self.diagnostics.iter().any(Diagnostic::is_error)
    }

    /// The check's diagnostics and, for a valid plan, what deriving and simulating it adds
    /// (a rank over its device memory) and what its `target`s say of it: everything `build`
    /// would report.
    pub fn all_diagnostics(&self) -> Vec<Diagnostic> {
        let mut all = self.diagnostics.clone();
        if let Some(plan) = &self.plan
            && let Ok(derived) = build::derive_checked(plan)
        {
            let simulation = build::simulate(plan, &derived);
            all.extend(build::diagnostics(plan, &simulation));
            for request in backend::requests(plan, &[], false).unwrap_or_default() {
                all.extend(backend::diagnostics(request, plan, &derived, simulation.report.step_time_s));
            }
        }
        diagnostics::sort(&mut all);
        all
    }
}

/// Loads, resolves and checks the file `key` (shown as `display`) whose bytes are given.
pub fn check(key: &str, display: &str, bytes: Vec<u8>, loader: &dyn Loader) -> Checked {
    check_with(key, display, bytes, loader, &[])
}

/// [`check`] with `--set KEY=VALUE` overrides applied to the plan first.
pub fn check_with(
    key: &str,
    display: &str,
    bytes: Vec<u8>,
    loader: &dyn Loader,
    overrides: &[(String, String)],
) -> Checked {
    let (mut program, mut errors) = resolve::load(key, display, bytes, loader);
    if !overrides.is_empty() && program.modules[0].ast.is_some() {
        errors.extend(overrides::apply(&mut program, overrides));
    }
    let (plan, check_errors) = check::check(&program, Some(loader));
    errors.extend(check_errors);
    let mut diagnostics: Vec<Diagnostic> = errors.iter().map(error::Error::to_diagnostic).collect();
    diagnostics::sort(&mut diagnostics);
    let plan = plan.filter(|_| !diagnostics.iter().any(Diagnostic::is_error));
    Checked { program, plan, diagnostics }
}
