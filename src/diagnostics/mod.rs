//! The one diagnostic type of mpipec. Every phase reports through `error::Error`,
//! which becomes a [`Diagnostic`] in one place; rendering (human, short, JSON) lives in
//! `render` and `json` only, so the rest of the compiler never formats text for a terminal.

pub mod codes;
pub mod json;
pub mod render;

use serde::Serialize;

pub use codes::Code;

use crate::span::Span;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Error,
    Warning,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Label {
    pub span: Span,
    pub message: String,
    pub primary: bool,
}

/// A mechanical fix: replace `span` with `replacement`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Fix {
    pub span: Span,
    pub replacement: String,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Diagnostic {
    pub severity: Severity,
    pub code: Code,
    pub message: String,
    pub labels: Vec<Label>,
    pub notes: Vec<String>,
    pub help: Option<String>,
    pub fix: Option<Fix>,
}

impl Diagnostic {
    pub fn error(code: Code, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            severity: if code.is_warning() { Severity::Warning } else { Severity::Error },
            code,
            message: message.into(),
            labels: Vec::new(),
            notes: Vec::new(),
            help: None,
            fix: None,
        }
    }

    pub fn primary(mut self, span: Span, message: impl Into<String>) -> Diagnostic {
        self.labels.push(Label { span, message: message.into(), primary: true });
        self
    }

    pub fn secondary(mut self, span: Span, message: impl Into<String>) -> Diagnostic {
        self.labels.push(Label { span, message: message.into(), primary: false });
        self
    }

    pub fn note(mut self, note: impl Into<String>) -> Diagnostic {
        self.notes.push(note.into());
        self
    }

    pub fn help(mut self, help: impl Into<String>) -> Diagnostic {
        self.help = Some(help.into());
        self
    }

    pub fn maybe_help(self, help: Option<String>) -> Diagnostic {
        match help {
            Some(h) => self.help(h),
            None => self,
        }
    }

    pub fn fix(mut self, span: Span, replacement: impl Into<String>) -> Diagnostic {
        self.fix = Some(Fix { span, replacement: replacement.into() });
        self
    }

    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }

    /// Where the diagnostic sorts: its primary label, else its first.
    pub fn position(&self) -> Option<Span> {
        self.labels.iter().find(|l| l.primary).or(self.labels.first()).map(|l| l.span)
    }
}

/// Orders diagnostics by file and position, errors of one spot before warnings, and drops
/// exact repeats (one mistake reached by two rules).
pub fn sort(diagnostics: &mut Vec<Diagnostic>) {
    diagnostics
        .sort_by(|a, b| (a.position(), a.severity, a.code.as_str()).cmp(&(b.position(), b.severity, b.code.as_str())));
    diagnostics.dedup();
}
