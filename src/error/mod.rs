//! Every error and warning mpipec reports, as data, in families: input, imports, fields, the
//! cut, the schedule, the cluster, the backends and the warnings. Each family is an enum in its
//! own file with its own `to_diagnostic`, where its message, labels, help and code are
//! decided; [`Error`] is one of them. A variant carries the limits and the lists its message
//! quotes, so this module sits under the passes that report through it and imports nothing
//! from them.

use crate::diagnostics::{Code, Diagnostic};
use crate::span::Span;

mod backend;
mod cluster;
mod cut;
mod field;
mod import;
mod input;
mod schedule;
mod warning;

pub use backend::BackendError;
pub use cluster::ClusterError;
pub use cut::CutError;
pub use field::FieldError;
pub use import::ImportError;
pub use input::InputError;
pub use schedule::ScheduleError;
pub use warning::Warning;

/// Every problem a pass reports, by family.
#[derive(Clone, Debug, PartialEq)]
pub enum Error {
    Input(InputError),
    Import(ImportError),
    Field(FieldError),
    Cut(CutError),
    Schedule(ScheduleError),
    Cluster(ClusterError),
    Backend(BackendError),
    Warning(Warning),
}

/// A diagnostic of `code`, an error or a warning as the code says.
fn d(code: Code, message: impl Into<String>) -> Diagnostic {
    Diagnostic::error(code, message)
}

/// "Did you mean" as help, with the fix that writes the suggestion over `span`; without a
/// suggestion, the help `otherwise` gives.
fn suggest(
    diag: Diagnostic,
    span: Span,
    suggestion: &Option<String>,
    otherwise: impl FnOnce() -> String,
) -> Diagnostic {
    match suggestion {
        Some(s) => diag.help(format!("did you mean `{s}`?")).fix(span, s.clone()),
        None => diag.help(otherwise()),
    }
}

/// `8192` as `8_192`: the digit grouping the language accepts.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push('_');
        }
        out.push(c);
    }
    out
}

/// "1 region", "2 regions", "3 microbatches".
pub fn count(n: impl TryInto<u64>, word: &str) -> String {
    let n: u64 = n.try_into().unwrap_or(u64::MAX);
    match (n, word.ends_with("ch")) {
        (1, _) => format!("1 {word}"),
        (_, true) => format!("{n} {word}es"),
        _ => format!("{n} {word}s"),
    }
}

fn list(words: &[&str]) -> String {
    match words {
        [] => String::new(),
        [one] => one.to_string(),
        [init @ .., last] => format!("{} or {}", init.join(", "), last),
    }
}

impl Error {
    /// Whether this lets the plan through: the warnings, and a backend's nearest plan.
    pub fn is_warning(&self) -> bool {
        matches!(self, Error::Warning(_) | Error::Backend(BackendError::NearestEmitted { .. }))
    }

    pub fn to_diagnostic(&self) -> Diagnostic {
        match self {
            Error::Input(e) => e.to_diagnostic(),
            Error::Import(e) => e.to_diagnostic(),
            Error::Field(e) => e.to_diagnostic(),
            Error::Cut(e) => e.to_diagnostic(),
            Error::Schedule(e) => e.to_diagnostic(),
            Error::Cluster(e) => e.to_diagnostic(),
            Error::Backend(e) => e.to_diagnostic(),
            Error::Warning(e) => e.to_diagnostic(),
        }
    }
}

impl From<InputError> for Error {
    fn from(e: InputError) -> Error {
        Error::Input(e)
    }
}

impl From<ImportError> for Error {
    fn from(e: ImportError) -> Error {
        Error::Import(e)
    }
}

impl From<FieldError> for Error {
    fn from(e: FieldError) -> Error {
        Error::Field(e)
    }
}

impl From<CutError> for Error {
    fn from(e: CutError) -> Error {
        Error::Cut(e)
    }
}

impl From<ScheduleError> for Error {
    fn from(e: ScheduleError) -> Error {
        Error::Schedule(e)
    }
}

impl From<ClusterError> for Error {
    fn from(e: ClusterError) -> Error {
        Error::Cluster(e)
    }
}

impl From<BackendError> for Error {
    fn from(e: BackendError) -> Error {
        Error::Backend(e)
    }
}

impl From<Warning> for Error {
    fn from(e: Warning) -> Error {
        Error::Warning(e)
    }
}
