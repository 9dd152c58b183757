//! What a launch-configuration target makes of a built plan: runs it as written, runs its
//! nearest form (a choice derive makes: `derive::nearest`, which holds the skeleton × target
//! table of the README), or cannot run it. This file says it as diagnostics.

use crate::built::Built;
use crate::derive::nearest::{self, Refusal, TargetForm};
use crate::diagnostics::Diagnostic;
use crate::error::{BackendError, Error};
use crate::span::Span;

use super::Request;

/// What a target makes of a built plan: runs it as written, runs its nearest form (which the
/// caller builds, with the changes to report), or cannot run it (the diagnostic says why).
pub enum Verdict {
    AsWritten,
    Nearest(Box<TargetForm>),
    Impossible(Diagnostic),
}

/// The diagnostic refusing `request` when its nearest plan fails validation: a compiler bug.
pub fn invalid_nearest(request: Request, span: Span, problems: &[String]) -> Diagnostic {
    let reason = format!("internal error: its nearest plan fails validation: {}", problems.join("; "));
    let help = format!("this is a bug in mpipec {}; build for `torch` meanwhile", super::VERSION);
    refusal(Refusal { span, reason, help }, request)
}

/// Why `request.target` cannot run a plan, as its diagnostic (E0402).
fn refusal(refusal: Refusal, request: Request) -> Diagnostic {
    let Refusal { span, reason, help } = refusal;
    Error::Backend(BackendError::TargetCannotRun {
        span,
        target: request.span,
        name: request.target.name(),
        reason,
        help,
    })
    .to_diagnostic()
}

/// What `request.target` runs of the built plan. Without `nearest` in the request, a plan the
/// target runs only in another form is refused with what would change.
pub fn verdict(request: Request, built: &Built) -> Verdict {
    match nearest::form(request.target, &built.resolved, &built.derived.ir) {
        Ok(None) => Verdict::AsWritten,
        Ok(Some(form)) if request.nearest => Verdict::Nearest(Box::new(form)),
        Ok(Some(form)) => {
            let span = form.changes[0].span;
            let changes = form.changes.into_iter().map(|c| c.what).collect();
            let name = request.target.name();
            Verdict::Impossible(
                Error::Backend(BackendError::NotNative { span, target: request.span, name, changes }).to_diagnostic(),
            )
        }
        Err(why) => Verdict::Impossible(refusal(why, request)),
    }
}
