//! Writing `--set` changes back into a plan's source: what `tune -o` saves. Each value is read
//! as `--set` reads it (a value of its key's type, or a statement's body: `overrides::typed`)
//! and the text written is printed from that value, never pasted, so a comment or a second
//! statement inside a value cannot reach the file, and a value `--set` refuses is refused
//! here too. The text keeps everything else, comments included, and comes out in canonical
//! form.

use crate::ast::{Entry, Item};
use crate::error::Error;
use crate::overrides::{Path, bad_key, typed};
use crate::parse::Setting;
use crate::span::{FileId, Span};

/// The file of each flag's text: the plan's own text is file 0.
const FLAG: FileId = FileId(1);

pub fn apply(text: &str, overrides: &[(String, String)]) -> Result<String, Error> {
    let module = crate::parse::parse(FileId(0), text)?;
    // (start, end, replacement), applied back to front.
    let mut edits: Vec<(usize, usize, String)> = Vec::new();
    let mut appended = String::new();
    for (key, value) in overrides {
        let flag = format!("{key}={value}");
        match typed(FLAG, key, &flag)? {
            (Path::Field(kind, field), Setting::Value(value)) => {
                let line = crate::fmt::field(&flag, field, &value);
                let found = module.items.iter().find_map(|i| match i {
                    Item::Section(s) if s.kind == kind => Some(s),
                    _ => None,
                });
                match found {
                    Some(s) => match s.body.entries.iter().find(|e| e.key().name == field) {
                        Some(Entry::Field(f)) => edits.push((f.span.start as usize, f.span.end as usize, line)),
                        _ => {
                            let close = s.body.span.end as usize - 1;
                            edits.push((close, close, format!("{line}\n")));
                        }
                    },
                    None => appended.push_str(&format!("\n{} {{ {line} }}\n", kind.keyword())),
                }
            }
            (Path::Statement(_), Setting::Item(item)) => {
                let line = crate::fmt::statement(&flag, &item).expect("a `--set` statement is one line");
                let same = |i: &&Item| std::mem::discriminant(*i) == std::mem::discriminant(&item);
                match module.items.iter().find(same) {
                    Some(i) => edits.push((i.span().start as usize, i.span().end as usize, line)),
                    None => appended.push_str(&format!("{line}\n")),
                }
            }
            _ => return Err(bad_key(Span::new(FLAG, 0, key.len()), key)),
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

#[cfg(test)]
mod tests {
    use super::apply;

    const PLAN: &str = "cluster {\n    pp = 2; // ranks\n}\n\nschedule 1f1b;\n";

    fn set(key: &str, value: &str) -> Vec<(String, String)> {
        vec![(key.to_string(), value.to_string())]
    }

    #[test]
    fn writes_the_value_not_the_text_it_was_given() {
        // A comment in the value was pasted before the `;`, commenting it out.
        let written = apply(PLAN, &set("cluster.pp", "4 // four")).unwrap();
        assert_eq!(written, "cluster {\n    pp = 4; // ranks\n}\n\nschedule 1f1b;\n");
        let written = apply(PLAN, &set("schedule", "interleaved( 2 ) /* v */")).unwrap();
        assert!(written.ends_with("schedule interleaved(2);\n"), "{written}");
        let written = apply(PLAN, &set("batch.microbatches", "8")).unwrap();
        assert!(written.ends_with("\n\nbatch {\n    microbatches = 8;\n}\n"), "{written}");
    }

    #[test]
    fn refuses_what_set_refuses() {
        // Pasted, these wrote a second statement into the file.
        for (key, value) in [("cluster.pp", "4; dp = 2"), ("schedule", "gpipe; owner round_robin"), ("cluster", "x")] {
            assert!(apply(PLAN, &set(key, value)).is_err(), "{key}={value}");
        }
    }
}
