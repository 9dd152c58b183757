//! `--message-format json`: one object per diagnostic and line, rustc-style. Field names are a
//! contract; add fields freely, rename none.

use serde::Serialize;

use super::render::{Style, render};
use super::{Diagnostic, Severity};
use crate::diagnostics::Code;
use crate::span::SourceMap;

#[derive(Serialize)]
struct JsonLabel<'a> {
    file: &'a str,
    byte_start: u32,
    byte_end: u32,
    line_start: usize,
    column_start: usize,
    line_end: usize,
    column_end: usize,
    message: &'a str,
    primary: bool,
}

#[derive(Serialize)]
struct JsonFix<'a> {
    file: &'a str,
    byte_start: u32,
    byte_end: u32,
    replacement: &'a str,
}

#[derive(Serialize)]
struct JsonDiagnostic<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    code: Code,
    severity: Severity,
    message: &'a str,
    labels: Vec<JsonLabel<'a>>,
    notes: &'a [String],
    help: Option<&'a str>,
    fix: Option<JsonFix<'a>>,
    rendered: String,
}

pub fn to_json(d: &Diagnostic, sources: &SourceMap) -> String {
    let labels = d
        .labels
        .iter()
        .map(|l| {
            let file = sources.get(l.span.file);
            let (line_start, column_start) = file.line_col(l.span.start as usize);
            let (line_end, column_end) = file.line_col(l.span.end as usize);
            JsonLabel {
                file: &file.name,
                byte_start: l.span.start,
                byte_end: l.span.end,
                line_start,
                column_start,
                line_end,
                column_end,
                message: &l.message,
                primary: l.primary,
            }
        })
        .collect();
    let fix = d.fix.as_ref().map(|f| JsonFix {
        file: &sources.get(f.span.file).name,
        byte_start: f.span.start,
        byte_end: f.span.end,
        replacement: &f.replacement,
    });
    let json = JsonDiagnostic {
        kind: "diagnostic",
        code: d.code,
        severity: d.severity,
        message: &d.message,
        labels,
        notes: &d.notes,
        help: d.help.as_deref(),
        fix,
        rendered: render(d, sources, Style::Human, false),
    };
    serde_json::to_string(&json).expect("diagnostics serialise")
}

/// The closing object of a JSON run; `rendered` is the closing line the human format prints.
pub fn summary_json(errors: usize, warnings: usize) -> String {
    let rendered = super::render::summary(errors, warnings).map(|line| line + "\n");
    serde_json::json!({ "type": "summary", "errors": errors, "warnings": warnings, "rendered": rendered }).to_string()
}

/// A problem outside any source file (a file that cannot be read, say): its JSON object, with
/// `rendered` as the human format prints it.
pub fn plain_error_json(message: &str) -> String {
    serde_json::json!({ "type": "error", "message": message, "rendered": super::render::plain_error(message) })
        .to_string()
}
