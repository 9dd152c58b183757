//! Backends: a derived plan as what a training stack runs. `torch` executes any plan with the
//! mpipe runtime. The launch-configuration backends (Megatron-LM, MindFormers, MindSpeed-MM,
//! HyperParallel) write what their users write by hand. A skeleton such a stack cannot run is
//! refused (E0401), or with `nearest` run in the target's nearest form ([`native::verdict`], a
//! choice of the resolved plan: `derive::nearest`), which the driver builds and emits with a
//! warning (W0004) that says what changed. A backend takes the [`Built`] plan, the plan as
//! written or in that form, and reads its resolved plan and lists.

pub mod hyperparallel;
pub mod layout;
pub mod megatron;
pub mod mindformers;
pub mod mindspeed_mm;
pub mod native;
mod shell;
pub mod torch;
mod yaml;

use crate::built::Built;
use crate::outputs::Artifact;
use crate::plan::Plan;
use crate::span::Span;

/// mpipec's version, stamped into every file a backend writes. It lives here, below the crate's
/// front door (`lib.rs`, which runs the backends), so that naming it is no cycle.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

pub use crate::plan::Target;

/// One backend asked for: by the plan's `target` statement (with its span) or by `--target`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Request {
    pub target: Target,
    pub nearest: bool,
    pub span: Option<Span>,
}

/// The backends to build: those named on the command line (with `--nearest` for all of them),
/// else the plan's `target` statement. An unknown name is returned as the error.
pub fn requests(plan: &Plan, names: &[String], nearest: bool) -> Result<Vec<Request>, String> {
    if names.is_empty() {
        return Ok(plan
            .targets
            .iter()
            .map(|t| Request { target: t.target, nearest: nearest || t.nearest, span: t.span })
            .collect());
    }
    let mut out: Vec<Request> = Vec::new();
    for name in names {
        let target = Target::parse(name).ok_or_else(|| name.clone())?;
        if out.iter().any(|r| r.target == target) {
            continue;
        }
        let in_plan = plan.targets.iter().find(|t| t.target == target);
        out.push(Request {
            target,
            nearest: nearest || in_plan.is_some_and(|t| t.nearest),
            span: in_plan.and_then(|t| t.span),
        });
    }
    Ok(out)
}

/// The files of `target` for a plan it runs as written.
pub fn artifacts(target: Target, built: &Built) -> Vec<Artifact> {
    let (resolved, ir) = (&built.resolved, &built.derived.ir);
    match target {
        Target::Torch => torch::artifacts(resolved.plan, ir),
        Target::Megatron => megatron::artifacts(resolved, ir),
        Target::MindFormers => mindformers::artifacts(resolved, ir),
        Target::MindSpeedMm => mindspeed_mm::artifacts(resolved, ir),
        Target::HyperParallel => hyperparallel::artifacts(resolved, ir),
    }
}
