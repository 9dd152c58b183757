//! Imports and names: a module, file or name that `use` or a reference cannot reach.

use crate::diagnostics::{Code, Diagnostic};
use crate::span::Span;

use super::{d, suggest};

#[derive(Clone, Debug, PartialEq)]
pub enum ImportError {
    ModuleNotFound {
        span: Span,
        path: String,
        suggestion: Option<String>,
    },
    FileNotFound {
        span: Span,
        path: String,
        reason: String,
    },
    /// A data file a field names (`image_histogram`), not found or unreadable; `span` is the
    /// field's value.
    DataFileNotFound {
        span: Span,
        field: &'static str,
        path: String,
        reason: String,
    },
    /// A data file whose bytes are not text (not UTF-8, or with NUL bytes).
    DataFileNotText {
        span: Span,
        field: &'static str,
        path: String,
    },
    ImportCycle {
        span: Span,
        chain: Vec<String>,
    },
    ItemNotInModule {
        span: Span,
        item: String,
        module: String,
        suggestion: Option<String>,
    },
    UnknownName {
        span: Span,
        name: String,
        expected: &'static str,
        suggestion: Option<String>,
        /// The standard library's module and name: this name, or the closest one.
        import_from: Option<(&'static str, String)>,
    },
    DuplicateDefinition {
        span: Span,
        name: String,
        first: Span,
    },
    ImportOutsideRoot {
        span: Span,
        path: String,
    },
    BadOverride {
        span: Span,
        key: String,
        /// The key forms `--set` knows, for the help.
        keys: &'static [&'static str],
    },
    PlanInLibrary {
        span: Span,
        what: &'static str,
    },
    /// A `--set` value with more text after what its key takes (`cluster.pp=4; dp = 2`).
    OverrideTrailing {
        span: Span,
        key: String,
        takes: &'static str,
        found: String,
        /// The flag that sets what follows, when it reads as `FIELD = VALUE`.
        next: Option<String>,
    },
}

impl ImportError {
    pub fn to_diagnostic(&self) -> Diagnostic {
        use ImportError::*;
        match self {
            ModuleNotFound { span, path, suggestion } => suggest(
                d(Code::E0101, format!("unknown module `{path}`")).primary(*span, "no such module"),
                *span,
                suggestion,
                || {
                    "the standard library has `std::hardware` and `std::models`; files are imported as `use \"file.mpipe\"::{name};`".into()
                },
            ),
            FileNotFound { span, path, reason } => d(Code::E0102, format!("cannot read imported file `{path}`"))
                .primary(*span, reason.clone())
                .help("paths in `use \"…\"` are relative to the file that contains the `use`"),
            DataFileNotFound { span, field, path, reason } => {
                d(Code::E0102, format!("cannot read `{path}`, the `{field}` of this plan"))
                    .primary(*span, reason.clone())
                    .help(format!(
                        "`{field}` names a file relative to the file that names it; check the path, or remove `{field}`"
                    ))
            }
            DataFileNotText { span, field, path } => d(Code::E0002, format!("`{path}` is not a text file"))
                .primary(*span, "this file holds bytes that are not UTF-8 text")
                .help(format!("`{field}` names a text file of `tokens,weight` lines, such as `1024,0.5`")),
            ImportCycle { span, chain } => d(Code::E0103, "import cycle")
                .primary(*span, "this import closes the cycle")
                .note(format!("cycle: {}", chain.join(" -> ")))
                .help("move the shared definitions into a file that neither imports"),
            ItemNotInModule { span, item, module, suggestion } => suggest(
                d(Code::E0104, format!("`{item}` is not defined in `{module}`"))
                    .primary(*span, "not found in this module"),
                *span,
                suggestion,
                || format!("see the definitions of `{module}` for the names it provides"),
            ),
            UnknownName { span, name, expected, suggestion, import_from } => {
                let diag = d(Code::E0105, format!("cannot find {expected} `{name}`"))
                    .primary(*span, "not defined or imported");
                match (import_from, suggestion) {
                    (Some((module, found)), _) if found == name => {
                        diag.help(format!("import it: `use {module}::{name};`"))
                    }
                    (_, Some(_)) => suggest(diag, *span, suggestion, String::new),
                    (Some((module, found)), None) => diag.help(format!(
                        "did you mean `{module}::{found}`? import it, `use {module}::{found};`, and write `{found}`"
                    )),
                    (None, None) => diag.help(format!("define `{name}` in this file or import it with `use`")),
                }
            }
            DuplicateDefinition { span, name, first } => d(Code::E0106, format!("`{name}` is defined more than once"))
                .primary(*span, "defined again here")
                .secondary(*first, "first defined here")
                .help("give one of them another name"),
            ImportOutsideRoot { span, path } => d(Code::E0107, format!("import `{path}` leaves the project directory"))
                .primary(*span, "resolves outside the directory of the plan")
                .help("copy the file into the project, or pass `--allow-outside` to permit it"),
            BadOverride { span, key, keys } => d(Code::E0109, format!("`--set {key}` names nothing in the plan"))
                .primary(*span, "not a key `--set` knows, or the plan has no such part")
                .help(format!("keys are {}", keys.join(", "))),
            OverrideTrailing { span, key, takes, found, next } => {
                d(Code::E0110, format!("`--set {key}` takes {takes}, but its value goes on"))
                    .primary(*span, format!("{found} follows the value"))
                    .help(match next {
                        Some(flag) => format!("each `--set` changes one thing: give the next its own flag, `{flag}`"),
                        None => "each `--set` changes one thing: give each further change its own flag".into(),
                    })
            }
            PlanInLibrary { span, what } => d(Code::E0108, format!("`{what}` in an imported file"))
                .primary(*span, "only the plan given on the command line may say this")
                .help("imported files hold definitions (`hardware`, `encoder`, `decoder`); move this into the plan"),
        }
    }
}
