//! A block's fields: their types, units, ranges and choices, and the plan's sections.

use crate::diagnostics::{Code, Diagnostic};
use crate::span::Span;
use crate::units::Dimension;

use super::{d, grouped, list, suggest};

#[derive(Clone, Debug, PartialEq)]
pub enum FieldError {
    WrongType {
        span: Span,
        expected: String,
        found: String,
        defined_at: Option<Span>,
    },
    UnknownField {
        span: Span,
        field: String,
        context: String,
        suggestion: Option<String>,
    },
    MissingField {
        span: Span,
        field: String,
        context: String,
        hint: String,
    },
    EmptyModel {
        span: Span,
        name: String,
    },
    DuplicateField {
        span: Span,
        field: String,
        first: Span,
    },
    UnitMismatch {
        span: Span,
        expected: Option<Dimension>,
        found: Option<Dimension>,
    },
    UnknownUnit {
        span: Span,
        unit: String,
        suggestion: Option<String>,
    },
    /// A count written with a suffix that is no unit (`8k`): said how to write it in full.
    CountSuffix {
        span: Span,
        written: String,
        /// The decimal and the binary reading, for a magnitude suffix (`k`, `M`, `Ki`, …).
        readings: Option<(u64, u64)>,
    },
    OutOfRange {
        span: Span,
        what: String,
        requirement: String,
    },
    /// A count written with a fraction (`pp = 2.5`): the wrong kind of number, not too large.
    NotWhole {
        span: Span,
        written: String,
        /// The whole numbers either side that the field allows.
        near: (u64, u64),
    },
    /// A count that must divide another (`kv_heads` of `heads`, `ep` of `dp`, `images` of
    /// `image_tokens`): the fix writes the nearest divisor.
    NotADivisor {
        span: Span,
        /// `span` is the whole `field = value;` entry (not the section, for a value set
        /// elsewhere), so the fix may rewrite it.
        entry: bool,
        field: &'static str,
        /// What it must divide, with its value: "`image_tokens` (4096)".
        of: String,
        nearest: u64,
    },
    MissingSection {
        span: Span,
        section: &'static str,
        example: &'static str,
    },
    DuplicateSection {
        span: Span,
        section: &'static str,
        first: Span,
    },
    InvalidChoice {
        span: Span,
        what: String,
        found: String,
        choices: Vec<&'static str>,
        suggestion: Option<String>,
    },
}

impl FieldError {
    pub fn to_diagnostic(&self) -> Diagnostic {
        use FieldError::*;
        match self {
            WrongType { span, expected, found, defined_at } => {
                let diag = d(Code::E0201, format!("expected {expected}, found {found}"))
                    .primary(*span, format!("expected {expected}"))
                    .help(format!("write {expected} here"));
                match defined_at {
                    Some(def) => diag.secondary(*def, "defined here"),
                    None => diag,
                }
            }
            UnknownField { span, field, context, suggestion } => suggest(
                d(Code::E0202, format!("unknown field `{field}` in {context}")).primary(*span, "unknown field"),
                *span,
                suggestion,
                || format!("remove it; `mpipec explain E0202` lists the fields of {context}"),
            ),
            MissingField { span, field, context, hint } => {
                d(Code::E0203, format!("missing field `{field}` in {context}"))
                    .primary(*span, format!("`{field}` is required here"))
                    .help(format!("add `{field} = {hint}`"))
            }
            EmptyModel { span, name } => d(Code::E0203, format!("model `{name}` has no parts"))
                .primary(*span, "a model needs at least one part")
                .help("add one `name = architecture;` per part, in depth order, such as `llm = llama3_8b;`"),
            DuplicateField { span, field, first } => d(Code::E0204, format!("field `{field}` is set twice"))
                .primary(*span, "set again here")
                .secondary(*first, "first set here")
                .help("keep one of them"),
            UnitMismatch { span, expected, found } => unit_mismatch(*span, *expected, *found),
            UnknownUnit { span, unit, suggestion } => suggest(
                d(Code::E0206, format!("unknown unit `{unit}`")).primary(*span, "not a unit mpipec knows"),
                *span,
                suggestion,
                || "units: B, KB, MB, GB, TB, KiB…TiB, GB/s, Gbit/s, ns, us, ms, s, TFLOP/s, FLOP".into(),
            ),
            CountSuffix { span, written, readings } => count_suffix(*span, written, *readings),
            NotWhole { span, written, near: (below, above) } => {
                d(Code::E0201, format!("`{written}` is not a whole number"))
                    .primary(*span, "a count has no fraction")
                    .help(if below == above {
                        format!("write a whole number, such as `{below}`")
                    } else {
                        format!("write a whole number, such as `{below}` or `{above}`")
                    })
            }
            OutOfRange { span, what, requirement } => d(Code::E0207, format!("{what} is out of range"))
                .primary(*span, format!("must be {requirement}"))
                .help(format!("change {what} to {requirement}")),
            NotADivisor { span, entry, field, of, nearest } => {
                let diag = d(Code::E0207, format!("`{field}` is out of range"))
                    .primary(*span, format!("must be a divisor of {of}"))
                    .help(format!("change `{field}` to {nearest}, the nearest divisor"));
                if *entry { diag.fix(*span, format!("{field} = {nearest};")) } else { diag }
            }
            MissingSection { span, section, example } => d(Code::E0208, format!("the plan has no `{section}`"))
                .primary(*span, format!("`{section}` is missing from this plan"))
                .help(format!("add `{example}`")),
            DuplicateSection { span, section, first } => d(Code::E0209, format!("`{section}` appears more than once"))
                .primary(*span, "again here")
                .secondary(*first, "first here")
                .help(format!("a plan has one `{section}`; merge them")),
            InvalidChoice { span, what, found, choices, suggestion } => suggest(
                d(Code::E0210, format!("`{found}` is not a valid {what}"))
                    .primary(*span, format!("expected {}", list(choices))),
                *span,
                suggestion,
                || format!("write one of {}", list(choices)),
            ),
        }
    }
}

/// A quantity with the wrong unit, or a unit where none belongs, or none where one does.
fn unit_mismatch(span: Span, expected: Option<Dimension>, found: Option<Dimension>) -> Diagnostic {
    let (message, label, help) = match (expected, found) {
        (Some(e), None) => (
            format!("missing unit: expected {e}"),
            "a bare number".to_string(),
            format!("add a unit such as {}", e.examples()),
        ),
        (Some(e), Some(f)) => (
            format!("unit mismatch: expected {e}, found {f}"),
            format!("this is {f}"),
            format!("use a unit such as {}", e.examples()),
        ),
        // A suffix that is no unit at all is `CountSuffix`; here the unit is known.
        (None, f) => (
            format!(
                "unexpected unit: expected a plain number{}",
                f.map(|f| format!(", found {f}")).unwrap_or_default()
            ),
            "a count takes no unit".to_string(),
            "remove the unit".to_string(),
        ),
    };
    d(Code::E0205, message).primary(span, label).help(help)
}

/// A count written with a suffix (`8k`): its readings in full, when it has them.
fn count_suffix(span: Span, written: &str, readings: Option<(u64, u64)>) -> Diagnostic {
    let help = match readings {
        Some((decimal, binary)) if decimal != binary => format!(
            "write the number in full, `{binary}` or `{decimal}`; `_` may group digits, as in `{}`",
            grouped(binary)
        ),
        Some((n, _)) => format!("write the number in full: `{n}`"),
        None => "a count is a plain number: remove the suffix".to_string(),
    };
    d(Code::E0205, format!("`{written}` is not a number mpipec reads"))
        .primary(span, "a count takes no suffix")
        .help(help)
}
