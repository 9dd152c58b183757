//! mpipe: the compiler core of mpipec. Pure: no file system, no printing. The pipeline is
//! `parse` → `ast` → `resolve` → `check` → (`derive` → `ir` → `sim` → `backend`), driven one way
//! by [`driver`], with every problem reported as an [`error::Error`] and rendered by
//! [`diagnostics`].

pub mod algebra;
pub mod ast;
pub mod backend;
pub mod bench;
pub mod built;
pub mod catalog;
pub mod check;
pub mod cost;
pub mod derive;
pub mod diagnostics;
pub mod driver;
pub mod edit;
pub mod error;
pub mod explore;
pub mod fmt;
pub mod fuzzing;
pub mod ide;
pub mod ir;
pub mod outputs;
pub mod overrides;
pub mod parse;
pub mod plan;
pub mod resolve;
pub mod sim;
pub mod span;
pub mod suggest;
pub mod units;

use diagnostics::Diagnostic;
use driver::Compiled;

pub use backend::VERSION;

/// Everything `build` would report of a compiled source: the check's diagnostics and, for a
/// valid plan, what building and simulating it adds (a rank over its device memory) and what
/// its `target`s say of it.
pub fn all_diagnostics(compiled: &Compiled) -> Vec<Diagnostic> {
    let mut all = compiled.diagnostics.clone();
    all.extend(build_diagnostics(compiled, &|| true).into_iter().flatten());
    diagnostics::sort(&mut all);
    all
}

/// What building a compiled plan adds to its check's diagnostics: derive and simulate, then
/// each target's verdict. `wanted` is asked before each of those passes; `None` as soon as it
/// says no, so a caller whose input has changed (the language server) stops paying for an
/// answer it would throw away.
pub fn build_diagnostics(compiled: &Compiled, wanted: &dyn Fn() -> bool) -> Option<Vec<Diagnostic>> {
    let Some(plan) = &compiled.plan else { return Some(Vec::new()) };
    let requests = backend::requests(plan, &[], false).unwrap_or_default();
    match driver::produce(plan, &requests, driver::Make::Diagnostics, wanted) {
        Ok(products) => Some(products?.diagnostics()),
        Err(_) => Some(Vec::new()),
    }
}
