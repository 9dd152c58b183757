//! Human and short rendering through codespan-reporting. The only module that knows it.

use codespan_reporting::diagnostic::{
    Diagnostic as CsDiagnostic, Label as CsLabel, LabelStyle, Severity as CsSeverity,
};
use codespan_reporting::files::{Error as FilesError, Files};
use codespan_reporting::term::{self, Config, DisplayStyle};

use super::{Diagnostic, Severity};
use crate::span::{FileId, SourceMap};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Style {
    Human,
    Short,
}

struct Sources<'a>(&'a SourceMap);

impl<'a> Files<'a> for Sources<'a> {
    type FileId = FileId;
    type Name = &'a str;
    type Source = &'a str;

    fn name(&'a self, id: FileId) -> Result<&'a str, FilesError> {
        Ok(&self.0.get(id).name)
    }

    fn source(&'a self, id: FileId) -> Result<&'a str, FilesError> {
        Ok(&self.0.get(id).text)
    }

    fn line_index(&'a self, id: FileId, byte_index: usize) -> Result<usize, FilesError> {
        Ok(self.0.get(id).line_index(byte_index))
    }

    fn line_range(&'a self, id: FileId, line_index: usize) -> Result<std::ops::Range<usize>, FilesError> {
        let file = self.0.get(id);
        let starts = file.line_starts();
        let start =
            *starts.get(line_index).ok_or(FilesError::LineTooLarge { given: line_index, max: starts.len() - 1 })?;
        let end = starts.get(line_index + 1).copied().unwrap_or(file.text.len());
        Ok(start..end)
    }
}

fn to_codespan(d: &Diagnostic) -> CsDiagnostic<FileId> {
    let severity = match d.severity {
        Severity::Error => CsSeverity::Error,
        Severity::Warning => CsSeverity::Warning,
    };
    let labels = d
        .labels
        .iter()
        .map(|l| {
            let style = if l.primary { LabelStyle::Primary } else { LabelStyle::Secondary };
            CsLabel::new(style, l.span.file, l.span.range()).with_message(&l.message)
        })
        .collect();
    let mut notes: Vec<String> = d.notes.iter().map(|n| format!("note: {n}")).collect();
    if let Some(h) = &d.help {
        notes.push(format!("help: {h}"));
    }
    CsDiagnostic::new(severity)
        .with_code(d.code.as_str())
        .with_message(&d.message)
        .with_labels(labels)
        .with_notes(notes)
}

/// Renders one diagnostic; `color` selects ANSI escapes.
pub fn render(d: &Diagnostic, sources: &SourceMap, style: Style, color: bool) -> String {
    let config = Config {
        display_style: match style {
            Style::Human => DisplayStyle::Rich,
            Style::Short => DisplayStyle::Short,
        },
        ..Config::default()
    };
    let diagnostic = to_codespan(d);
    let files = Sources(sources);
    let mut out = String::new();
    let result = if color {
        let mut buffer = termcolor::Buffer::ansi();
        let r = term::emit_to_write_style(&mut buffer, &config, &files, &diagnostic);
        out = String::from_utf8_lossy(buffer.as_slice()).into_owned();
        r
    } else {
        term::emit_into_string(&config, &files, &diagnostic).map(|s| out = s)
    };
    if result.is_err() {
        // A label outside its file would be a compiler bug; fall back to the bare message.
        out = format!("{}[{}]: {}\n", if d.is_error() { "error" } else { "warning" }, d.code.as_str(), d.message);
    }
    out
}

/// A problem outside any source file, as the human format prints it.
pub fn plain_error(message: &str) -> String {
    format!("error: {message}\n")
}

/// "error: 2 errors, 1 warning" — the closing line of a run.
pub fn summary(errors: usize, warnings: usize) -> Option<String> {
    let plural = |n: usize, word: &str| format!("{n} {word}{}", if n == 1 { "" } else { "s" });
    match (errors, warnings) {
        (0, 0) => None,
        (0, w) => Some(format!("warning: {} emitted", plural(w, "warning"))),
        (e, 0) => Some(format!("error: {} emitted", plural(e, "error"))),
        (e, w) => Some(format!("error: {} and {} emitted", plural(e, "error"), plural(w, "warning"))),
    }
}
