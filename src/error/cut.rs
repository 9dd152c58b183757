//! The `cut`: the model's parts and layers, split into regions in depth order.

use crate::diagnostics::{Code, Diagnostic};
use crate::span::Span;

use super::{d, suggest};

#[derive(Clone, Debug, PartialEq)]
pub enum CutError {
    UnknownPart {
        span: Span,
        name: String,
        model: Span,
        suggestion: Option<String>,
    },
    CutOutOfOrder {
        span: Span,
        previous: Span,
        detail: String,
    },
    CutIncomplete {
        span: Span,
        missing: String,
        /// The whole `cut …;` statement, and what it should say.
        fix: Option<(Span, String)>,
    },
    BadLayerRange {
        span: Span,
        part: String,
        layers: u64,
        detail: String,
    },
}

impl CutError {
    pub fn to_diagnostic(&self) -> Diagnostic {
        use CutError::*;
        match self {
            UnknownPart { span, name, model, suggestion } => suggest(
                d(Code::E0301, format!("the model has no part `{name}`"))
                    .primary(*span, "not a part of the model")
                    .secondary(*model, "parts are defined here"),
                *span,
                suggestion,
                || "a cut names the model's parts in depth order".into(),
            ),
            CutOutOfOrder { span, previous, detail } => d(Code::E0302, "cut regions are out of order or overlap")
                .primary(*span, detail.clone())
                .secondary(*previous, "after this")
                .help("a cut lists the model's layers once each, in depth order"),
            CutIncomplete { span, missing, fix } => {
                let diag = d(Code::E0303, "the cut does not cover the model")
                    .primary(*span, format!("{missing} not in any region"));
                match fix {
                    Some((stmt, text)) => {
                        diag.help(format!("extend the last region: `{text}`")).fix(*stmt, text.clone())
                    }
                    None => diag.help("add the missing layers to a region"),
                }
            }
            BadLayerRange { span, part, layers, detail } => d(Code::E0304, format!("invalid layer range of `{part}`"))
                .primary(*span, detail.clone())
                .note(format!("`{part}` has {layers} layers, numbered 0..{layers}"))
                .help("write `part[start..end]` with start < end <= the part's layer count"),
        }
    }
}
