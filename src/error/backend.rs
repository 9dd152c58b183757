//! What a target makes of the plan: not its native form, not runnable, or its nearest plan.

use crate::diagnostics::{Code, Diagnostic};
use crate::span::Span;

use super::d;

#[derive(Clone, Debug, PartialEq)]
pub enum BackendError {
    /// A skeleton or placement the target has no native form of, without `nearest`.
    NotNative { span: Span, target: Option<Span>, name: &'static str, changes: Vec<String> },
    /// The target cannot run the plan, not even its nearest native equivalent.
    TargetCannotRun { span: Span, target: Option<Span>, name: &'static str, reason: String, help: String },
    /// With `nearest`: the nearest native plan is what the target gets.
    NearestEmitted {
        span: Span,
        target: Option<Span>,
        name: &'static str,
        changes: Vec<String>,
        /// Simulated step time as written and as emitted, in seconds.
        step: (f64, f64),
    },
}

impl BackendError {
    pub fn to_diagnostic(&self) -> Diagnostic {
        use BackendError::*;
        match self {
            NotNative { span, target, name, changes } => {
                let mut diag = d(Code::E0401, format!("`{name}` cannot run this schedule as written"))
                    .primary(*span, format!("`{name}` has no native form of this"));
                if let Some(t) = target {
                    diag = diag.secondary(*t, "target requested here");
                }
                for change in changes {
                    diag = diag.note(format!("its nearest native plan: {change}"));
                }
                diag.help(format!(
                    "emit that plan with `--nearest` (or `target {name}(nearest);`), or build for `torch`, which runs every plan as written"
                ))
            }
            TargetCannotRun { span, target, name, reason, help } => {
                let mut diag = d(Code::E0402, format!("`{name}` cannot run this plan")).primary(*span, reason.clone());
                if let Some(t) = target {
                    diag = diag.secondary(*t, "target requested here");
                }
                diag.help(help.clone())
            }
            NearestEmitted { span, target, name, changes, step: (before, after) } => {
                let mut diag =
                    d(Code::W0004, format!("`{name}` gets the nearest native plan, not the plan as written"))
                        .primary(*span, "replaced for this target");
                if let Some(t) = target {
                    diag = diag.secondary(*t, "`nearest` asked for here");
                }
                for change in changes {
                    diag = diag.note(change.clone());
                }
                diag.note(format!(
                    "simulated step: {before:.3} s as written, {after:.3} s as emitted ({:+.1}%)",
                    100.0 * (after / before - 1.0)
                ))
                .help("build for `torch` to run the plan as written")
            }
        }
    }
}
