//! Backends: a derived plan as what a training stack runs. `torch` executes any plan with the
//! mpipe runtime. The launch-configuration backends (Megatron-LM, MindFormers, MindSpeed-MM,
//! HyperParallel) write what their users write by hand. A skeleton such a stack cannot run is
//! refused (E0401), or with `nearest` replaced by its nearest native plan, which is derived and
//! emitted with a warning (W0004) that says what changed.

pub mod hyperparallel;
pub mod layout;
pub mod megatron;
pub mod mindformers;
pub mod mindspeed_mm;
pub mod native;
mod shell;
pub mod torch;
mod yaml;

use crate::build::Artifact;
use crate::derive::Derived;
use crate::diagnostics::Diagnostic;
use crate::error::BackendError;
use crate::plan::{Plan, TARGETS};
use crate::span::Span;
use native::Verdict;

/// mpipec's version, stamped into every file a backend writes. It lives here, below the crate's
/// front door (`lib.rs`, which runs the backends), so that naming it is no cycle.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    Torch,
    Megatron,
    MindFormers,
    MindSpeedMm,
    HyperParallel,
}

impl Target {
    pub const ALL: [Target; 5] =
        [Target::Torch, Target::Megatron, Target::MindFormers, Target::MindSpeedMm, Target::HyperParallel];

    pub fn parse(name: &str) -> Option<Target> {
        TARGETS.iter().position(|t| *t == name).map(|i| Target::ALL[i])
    }

    /// The name the language and `--target` use: `TARGETS`, in the order of `ALL`.
    pub fn name(self) -> &'static str {
        TARGETS[self as usize]
    }
}

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
            .filter_map(|t| {
                Some(Request { target: Target::parse(&t.name)?, nearest: nearest || t.nearest, span: t.span })
            })
            .collect());
    }
    let mut out: Vec<Request> = Vec::new();
    for name in names {
        let target = Target::parse(name).ok_or_else(|| name.clone())?;
        if out.iter().any(|r| r.target == target) {
            continue;
        }
        let in_plan = plan.targets.iter().find(|t| t.name == *name);
        out.push(Request {
            target,
            nearest: nearest || in_plan.is_some_and(|t| t.nearest),
            span: in_plan.and_then(|t| t.span),
        });
    }
    Ok(out)
}

/// What `emit` would report for `request`, without writing the files.
pub fn diagnostics(request: Request, plan: &Plan, derived: &Derived, written_step: f64) -> Vec<Diagnostic> {
    match resolve(request, plan, derived, written_step) {
        Ok(Resolved::AsWritten) => Vec::new(),
        Ok(Resolved::Nearest { warning, .. }) => vec![warning],
        Err(diagnostics) => diagnostics,
    }
}

/// What a backend writes, with the warnings that go with it.
pub struct Emitted {
    pub artifacts: Vec<Artifact>,
    pub diagnostics: Vec<Diagnostic>,
}

/// The plan a target runs: the plan as written, or its nearest native plan (derived, with
/// the warning that says what changed).
pub enum Resolved {
    AsWritten,
    Nearest { plan: Box<Plan>, derived: Box<Derived>, warning: Diagnostic },
}

/// What `request.target` runs of the checked and derived `plan`, or the diagnostics that say
/// why it cannot. `written_step` is the plan's simulated step, which every caller has already
/// simulated; the warning compares the nearest plan's with it.
pub fn resolve(
    request: Request,
    plan: &Plan,
    derived: &Derived,
    written_step: f64,
) -> Result<Resolved, Vec<Diagnostic>> {
    let name = request.target.name();
    match native::verdict(request.target, plan, derived) {
        Verdict::Native => Ok(Resolved::AsWritten),
        Verdict::Impossible { span, reason, help } => {
            Err(vec![BackendError::TargetCannotRun { span, target: request.span, name, reason, help }.to_diagnostic()])
        }
        Verdict::Nearest { changes, plan: nearest } => {
            let span = changes[0].span;
            let changes: Vec<String> = changes.into_iter().map(|c| c.what).collect();
            if !request.nearest {
                return Err(vec![
                    BackendError::NotNative { span, target: request.span, name, changes }.to_diagnostic(),
                ]);
            }
            let nearest_derived = crate::build::derive_checked(&nearest).map_err(|invalid| {
                let reason =
                    format!("internal error: its nearest plan fails validation: {}", invalid.problems.join("; "));
                let help = format!("this is a bug in mpipec {VERSION}; build for `torch` meanwhile");
                vec![BackendError::TargetCannotRun { span, target: request.span, name, reason, help }.to_diagnostic()]
            })?;
            let after = crate::build::simulate(&nearest, &nearest_derived).report.step_time_s;
            let step = (written_step, after);
            let warning =
                BackendError::NearestEmitted { span, target: request.span, name, changes, step }.to_diagnostic();
            Ok(Resolved::Nearest { plan: nearest, derived: Box::new(nearest_derived), warning })
        }
    }
}

/// The files of `request.target` for the checked and derived `plan`, or the diagnostics that
/// say why the target cannot run it.
pub fn emit(request: Request, plan: &Plan, derived: &Derived, written_step: f64) -> Result<Emitted, Vec<Diagnostic>> {
    Ok(match resolve(request, plan, derived, written_step)? {
        Resolved::AsWritten => Emitted { artifacts: artifacts(request.target, plan, derived), diagnostics: Vec::new() },
        Resolved::Nearest { plan, derived, warning } => {
            Emitted { artifacts: artifacts(request.target, &plan, &derived), diagnostics: vec![warning] }
        }
    })
}

/// The files of `target` for a plan it runs as written.
pub fn artifacts(target: Target, plan: &Plan, derived: &Derived) -> Vec<Artifact> {
    match target {
        Target::Torch => torch::artifacts(plan, &derived.ir),
        Target::Megatron => megatron::artifacts(plan, derived),
        Target::MindFormers => mindformers::artifacts(plan, derived),
        Target::MindSpeedMm => mindspeed_mm::artifacts(plan, derived),
        Target::HyperParallel => hyperparallel::artifacts(plan, derived),
    }
}
