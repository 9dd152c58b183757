//! mpipe: the compiler core of mpipec. Pure: no file system, no printing. The pipeline is
//! `parse` → `ast` → `resolve` → `check` → (`derive` → `ir` → `sim` → `backend`), driven one way
//! by [`driver`], with every problem reported as an [`error::Error`] and rendered by
//! [`diagnostics`].

pub mod adaptive;
pub mod algebra;
pub mod ast;
pub mod backend;
pub mod bench;
pub mod built;
pub mod catalog;
pub mod check;
pub mod cost;
pub mod data;
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
pub mod picture;
pub mod plan;
pub mod plot;
pub mod profile;
pub mod random;
pub mod resolve;
pub mod sim;
pub mod skeletons;
pub mod span;
pub mod suggest;
pub mod units;

use diagnostics::Diagnostic;
use driver::{Built, Compiled};

pub use backend::VERSION;

/// How far through the compiler a source's diagnostics go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Depth {
    /// Parse, resolve and check: milliseconds, what an editor gets on every change.
    Check,
    /// Everything `build` reports: also derive, the simulation and each of the plan's targets.
    Build,
}

/// The diagnostics of a compiled source at `depth`, sorted by position: the one answer that
/// `mpipec check`, `mpipec build`, the language server and the UI snapshots all give, so a file
/// gets the same diagnostics everywhere.
pub fn diagnose(compiled: &Compiled, depth: Depth) -> Vec<Diagnostic> {
    diagnose_while(compiled, depth, &|| true, &mut |_| {}).unwrap_or_default()
}

/// [`diagnose`], asking `wanted` before each pass of the build (derive, the simulation, each
/// target) and giving `None` as soon as it says no, so a caller whose input has changed (the
/// language server) stops paying for an answer it would throw away. `seen` gets the build, for
/// a caller that keeps what it placed where.
pub fn diagnose_while(
    compiled: &Compiled,
    depth: Depth,
    wanted: &dyn Fn() -> bool,
    seen: &mut dyn FnMut(&Built),
) -> Option<Vec<Diagnostic>> {
    let mut all = compiled.diagnostics.clone();
    if depth == Depth::Build {
        all.extend(build_passes(compiled, wanted, seen)?);
        diagnostics::sort(&mut all);
    }
    Some(all)
}

/// What building a compiled plan adds to its check's diagnostics.
fn build_passes(
    compiled: &Compiled,
    wanted: &dyn Fn() -> bool,
    seen: &mut dyn FnMut(&Built),
) -> Option<Vec<Diagnostic>> {
    let Some(plan) = &compiled.plan else { return Some(Vec::new()) };
    let requests = backend::requests(plan, &[], false).unwrap_or_default();
    match driver::produce(plan, &requests, driver::Make::Diagnostics, wanted) {
        Ok(products) => {
            let products = products?;
            seen(&products.built);
            Some(products.diagnostics())
        }
        Err(_) => Some(Vec::new()),
    }
}
