//! Backends: a derived plan as what a training stack runs. `torch` executes any plan with the
//! mpipe runtime. The launch-configuration backends (Megatron-LM, MindFormers, MindSpeed-MM,
//! HyperParallel) write what their users write by hand. A skeleton such a stack cannot run is
//! refused (E0401), or with `nearest` replaced by its nearest native plan, which is built and
//! emitted with a warning (W0004) that says what changed. A backend takes the [`Built`] plan.

pub mod hyperparallel;
pub mod layout;
pub mod megatron;
pub mod mindformers;
pub mod mindspeed_mm;
pub mod native;
mod shell;
pub mod torch;
mod yaml;

use crate::diagnostics::Diagnostic;
use crate::driver::{self, Built};
use crate::error::{BackendError, Error};
use crate::outputs::Artifact;
use crate::plan::Plan;
use crate::span::Span;
use native::{Refusal, Verdict};

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

/// What a backend writes, with the warnings that go with it.
pub struct Emitted {
    pub artifacts: Vec<Artifact>,
    pub diagnostics: Vec<Diagnostic>,
}

/// The files of `request.target` for the built plan, or of its nearest native plan (built
/// here, with warning W0004 saying what changed), or the diagnostics that refuse the plan.
pub fn emit(request: Request, built: &Built) -> Result<Emitted, Vec<Diagnostic>> {
    answer(request, built, artifacts)
}

/// What [`emit`] would report for `request`, without writing the files.
pub fn diagnostics(request: Request, built: &Built) -> Vec<Diagnostic> {
    match answer(request, built, |_, _| Vec::new()) {
        Ok(emitted) => emitted.diagnostics,
        Err(diagnostics) => diagnostics,
    }
}

fn answer(
    request: Request,
    built: &Built,
    files: impl Fn(Target, &Built) -> Vec<Artifact>,
) -> Result<Emitted, Vec<Diagnostic>> {
    let (plan, changes) = match native::verdict(request, built) {
        Verdict::AsWritten => {
            return Ok(Emitted { artifacts: files(request.target, built), diagnostics: Vec::new() });
        }
        Verdict::Impossible(diagnostic) => return Err(vec![diagnostic]),
        Verdict::Nearest { plan, changes } => (plan, changes),
    };
    let span = changes[0].span;
    let nearest = driver::build(&plan).map_err(|invalid| {
        let reason = format!("internal error: its nearest plan fails validation: {}", invalid.problems.join("; "));
        let help = format!("this is a bug in mpipec {VERSION}; build for `torch` meanwhile");
        vec![Refusal { span, reason, help }.diagnostic(request)]
    })?;
    let step = (built.evaluate().report.step_time_s, nearest.evaluate().report.step_time_s);
    let changes = changes.into_iter().map(|c| c.what).collect();
    let name = request.target.name();
    let warning = Error::Backend(BackendError::NearestEmitted { span, target: request.span, name, changes, step })
        .to_diagnostic();
    Ok(Emitted { artifacts: files(request.target, &nearest), diagnostics: vec![warning] })
}

/// The files of `target` for a plan it runs as written.
pub fn artifacts(target: Target, built: &Built) -> Vec<Artifact> {
    let (plan, derived) = (built.plan, &built.derived);
    match target {
        Target::Torch => torch::artifacts(plan, &derived.ir),
        Target::Megatron => megatron::artifacts(plan, derived),
        Target::MindFormers => mindformers::artifacts(plan, derived),
        Target::MindSpeedMm => mindspeed_mm::artifacts(plan, derived),
        Target::HyperParallel => hyperparallel::artifacts(plan, derived),
    }
}
