//! Writing `--set`-style overrides back into a plan's source: what `tune -o` saves. The text
//! keeps everything else, comments included, and comes out in canonical form.

use crate::ast::{Entry, Item, SectionKind};
use crate::error::Error;
use crate::overrides::bad_key;
use crate::span::{FileId, Span};

pub fn apply(text: &str, overrides: &[(String, String)]) -> Result<String, Error> {
    let module = crate::parse::parse(FileId(0), text)?;
    // (start, end, replacement), applied back to front.
    let mut edits: Vec<(usize, usize, String)> = Vec::new();
    let mut appended = String::new();
    for (key, value) in overrides {
        let path: Vec<&str> = key.split('.').collect();
        match path.as_slice() {
            [section @ ("cluster" | "batch"), field] => {
                let kind = if *section == "cluster" { SectionKind::Cluster } else { SectionKind::Batch };
                let found = module.items.iter().find_map(|i| match i {
                    Item::Section(s) if s.kind == kind => Some(s),
                    _ => None,
                });
                let line = format!("{field} = {value};");
                match found {
                    Some(s) => match s.body.entries.iter().find(|e| e.key().name == *field) {
                        Some(Entry::Field(f)) => edits.push((f.span.start as usize, f.span.end as usize, line)),
                        _ => {
                            let close = s.body.span.end as usize - 1;
                            edits.push((close, close, format!("{line}\n")));
                        }
                    },
                    None => appended.push_str(&format!("\n{section} {{ {line} }}\n")),
                }
            }
            [statement @ ("cut" | "schedule" | "owner" | "target")] => {
                let line = format!("{statement} {value};");
                let found = module.items.iter().find(|i| {
                    matches!(
                        (i, *statement),
                        (Item::Cut(_), "cut")
                            | (Item::Schedule(_), "schedule")
                            | (Item::Owner(_), "owner")
                            | (Item::Target(_), "target")
                    )
                });
                match found {
                    Some(i) => edits.push((i.span().start as usize, i.span().end as usize, line)),
                    None => appended.push_str(&format!("{line}\n")),
                }
            }
            _ => return Err(bad_key(Span::new(FileId(0), 0, 0), key)),
        }
    }
    edits.sort_by(|a, b| b.0.cmp(&a.0).then(b.1.cmp(&a.1)));
    let mut out = text.to_string();
    for (start, end, replacement) in edits {
        out.replace_range(start..end, &replacement);
    }
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(&appended);
    crate::fmt::format(&out)
}
