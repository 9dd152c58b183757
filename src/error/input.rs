//! The file could not be read as a plan: its bytes, size, nesting or syntax.

use crate::diagnostics::{Code, Diagnostic};
use crate::span::Span;

use super::{d, list};

#[derive(Clone, Debug, PartialEq)]
pub enum InputError {
    Syntax {
        span: Span,
        expected: Vec<&'static str>,
        found: String,
        unclosed: Option<Span>,
    },
    /// A statement's `;` missing at the end of its line; `span` is empty, where it goes.
    MissingSemicolon {
        span: Span,
    },
    NotUtf8 {
        span: Span,
    },
    NestingTooDeep {
        span: Span,
        limit: usize,
    },
    FileTooLarge {
        span: Span,
        bytes: usize,
        limit: usize,
    },
}

impl InputError {
    pub fn to_diagnostic(&self) -> Diagnostic {
        use InputError::*;
        match self {
            Syntax { span, expected, found, unclosed } => {
                let label = if expected.is_empty() {
                    "unexpected here".to_string()
                } else {
                    format!("expected {}", list(expected))
                };
                let diag = d(Code::E0001, format!("syntax error: unexpected {found}")).primary(*span, label);
                match unclosed {
                    Some(open) => diag
                        .secondary(*open, "this bracket is never closed")
                        .help("close the block before the next statement"),
                    None => diag.help(
                        "statements end with `;`, blocks are `name { key = value; }`; see `mpipec explain E0001`",
                    ),
                }
            }
            MissingSemicolon { span } => d(Code::E0001, "syntax error: expected `;`")
                .primary(*span, "expected `;` at the end of this line")
                .help("end the statement with `;`")
                .fix(*span, ";"),
            NotUtf8 { span } => d(Code::E0002, "file is not valid UTF-8")
                .primary(*span, "invalid byte sequence here")
                .help("save the plan as UTF-8 text; .mpipe files are text, not binary"),
            NestingTooDeep { span, limit } => d(Code::E0003, "brackets nested too deeply")
                .primary(*span, format!("more than {limit} levels open here"))
                .help("no plan needs this much nesting; check for unclosed `[`, `{` or `(`"),
            FileTooLarge { span, bytes, limit } => d(Code::E0004, format!("file is too large ({bytes} bytes)"))
                .primary(*span, "file starts here")
                .note(format!("mpipec reads plans of at most {limit} bytes"))
                .help("split definitions into files joined with `use \"file.mpipe\"::{…};`"),
        }
    }
}
