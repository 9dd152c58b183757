//! The file could not be read as a plan: its bytes, size, nesting or syntax.

use crate::diagnostics::{Code, Diagnostic};
use crate::span::Span;

use super::{d, list, suggest};

#[derive(Clone, Debug, PartialEq)]
pub enum InputError {
    Syntax {
        span: Span,
        expected: Vec<&'static str>,
        found: String,
        unclosed: Option<Span>,
        /// The statement keyword a misspelled first word is close to (`schedul`).
        suggestion: Option<String>,
    },
    /// `12 GB`: a number and its unit apart; `span` is the space between them.
    SpacedUnit {
        span: Span,
        number: String,
        unit: String,
    },
    /// A name with a letter outside ASCII (`vlmé`); `span` is the whole name.
    NonAsciiName {
        span: Span,
        name: String,
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
            Syntax { span, expected, found, unclosed, suggestion } => {
                let label = if expected.is_empty() {
                    "unexpected here".to_string()
                } else {
                    format!("expected {}", list(expected))
                };
                let diag = d(Code::E0001, format!("syntax error: unexpected {found}")).primary(*span, label);
                match (unclosed, suggestion) {
                    (Some(open), _) => diag
                        .secondary(*open, "this bracket is never closed")
                        .help("close the block before the next statement"),
                    (None, Some(_)) => suggest(diag, *span, suggestion, String::new),
                    (None, None) if expected.as_slice() == ["`::`"] => {
                        diag.help("a `use` names what it imports: `use \"file.mpipe\"::{name};`")
                    }
                    (None, None) => diag.help(
                        "statements end with `;`, blocks are `name { key = value; }`; see `mpipec explain E0001`",
                    ),
                }
            }
            MissingSemicolon { span } => d(Code::E0001, "syntax error: expected `;`")
                .primary(*span, "expected `;` at the end of this line")
                .help("end the statement with `;`")
                .fix(*span, ";"),
            SpacedUnit { span, number, unit } => {
                d(Code::E0001, format!("syntax error: a space between `{number}` and its unit `{unit}`"))
                    .primary(*span, "no space goes here")
                    .help(format!("write the unit right after the number: `{number}{unit}`"))
                    .fix(*span, "")
            }
            NonAsciiName { span, name } => d(Code::E0001, format!("syntax error: `{name}` is not a name mpipec reads"))
                .primary(*span, "a letter outside ASCII")
                .help("names are ASCII: a letter or `_`, then letters, digits and `_`; rename it"),
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
