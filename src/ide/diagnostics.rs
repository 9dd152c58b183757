//! Which diagnostics an editor gets, and when. Parsing and checking take milliseconds and run on
//! every change. Deriving, simulating and asking each target take longer on a large plan, so
//! the language server runs them when the file is saved or the typing pauses, and drops the
//! run when another change comes first.

use crate::diagnostics::Diagnostic;
use crate::driver::Compiled;

pub use crate::Depth;

use super::Placements;

/// The diagnostics of the open file at `depth`. Those placed in other files (an imported
/// library) are left out: the editor shows them when that file is open. A build stops between
/// its passes, with `None`, once `wanted` says a newer text has replaced this one; a build
/// that got as far as placing the plan hands `placed` what hover shows of each part.
pub fn diagnostics(
    checked: &Compiled,
    depth: Depth,
    wanted: &dyn Fn() -> bool,
    placed: &mut dyn FnMut(Placements),
) -> Option<Vec<Diagnostic>> {
    let all = crate::diagnose_while(checked, depth, wanted, &mut |built| placed(Placements::of(built)))?;
    let root = checked.program.root().file;
    Some(all.into_iter().filter(|d| d.position().is_none_or(|s| s.file == root)).collect())
}

/// Whether the build diagnostics can add to the check's: only a plan that checks is derived.
pub fn builds(checked: &Compiled) -> bool {
    checked.plan.is_some()
}
