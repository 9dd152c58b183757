//! `--set KEY=VALUE`: one run's change to the plan, by dotted path, applied to the root
//! module's syntax tree before checking, so an override gets the same diagnostics as the
//! same text written in the file. Each override becomes a small source file of its own
//! (named after the flag), which is where those diagnostics point.
//!
//! Keys: `cluster.FIELD`, `batch.FIELD`, `model.PART`, `model.PART.ATTRIBUTE`, and the
//! statements `cut`, `schedule`, `owner`, `target` (their value is the statement's text
//! without the keyword: `schedule="interleaved(2)"`).

use crate::ast::{self, DefKind, Entry, Item, ValueKind};
use crate::error::{Error, ImportError};
use crate::parse;
use crate::resolve::Program;
use crate::span::Span;

pub const KEYS: &[&str] =
    &["cluster.FIELD", "batch.FIELD", "model.PART", "model.PART.ATTRIBUTE", "cut", "schedule", "owner", "target"];

/// `key` is not one `--set` knows, or names nothing in the plan.
pub fn bad_key(span: Span, key: &str) -> Error {
    Error::Import(ImportError::BadOverride { span, key: key.to_string(), keys: KEYS })
}

/// Splits `KEY=VALUE` at the first `=`.
pub fn split(arg: &str) -> Option<(&str, &str)> {
    let (k, v) = arg.split_once('=')?;
    let (k, v) = (k.trim(), v.trim());
    (!k.is_empty() && !v.is_empty()).then_some((k, v))
}

pub fn apply(program: &mut Program, overrides: &[(String, String)]) -> Vec<Error> {
    let mut errors = Vec::new();
    for (key, value) in overrides {
        if let Err(e) = apply_one(program, key, value) {
            errors.push(e);
        }
    }
    errors
}

fn apply_one(program: &mut Program, key: &str, value: &str) -> Result<(), Error> {
    let path: Vec<&str> = key.split('.').collect();
    let text = match path.as_slice() {
        ["cluster" | "batch", field] => format!("{} {{ {field} = {value}; }}", path[0]),
        ["model", part] => format!("model set {{ {part} = {value}; }}"),
        ["model", part, attr] => format!("model set {{ {part} = set {{ {attr} = {value}; }} }}"),
        ["cut" | "schedule" | "owner" | "target"] => format!("{key} {value};"),
        _ => {
            let file = program.sources.add(format!("--set {key}={value}"), format!("{key}={value}"));
            return Err(bad_key(Span::new(file, 0, key.len()), key));
        }
    };
    let file = program.sources.add(format!("--set {key}={value}"), text.clone());
    let parsed = parse::parse(file, &text)?;
    let item = parsed.items.into_iter().next().expect("the wrapped override is one item");
    let root = program.modules[0].ast.as_mut().expect("overrides apply to a parsed plan");
    match (path.as_slice(), item) {
        (["cluster" | "batch", _], Item::Section(section)) => {
            let field = section.body.entries.into_iter().next().expect("one field");
            match root.items.iter_mut().find_map(|i| match i {
                Item::Section(s) if s.kind == section.kind => Some(s),
                _ => None,
            }) {
                Some(existing) => replace_entry(&mut existing.body, field),
                None => root.items.push(Item::Section(ast::Section {
                    body: ast::Block { entries: vec![field], ..section.body },
                    ..section
                })),
            }
        }
        (["model", _], Item::Definition(def)) => {
            let field = def.body.entries.into_iter().next().expect("one part");
            replace_entry(&mut model_of(root, key)?.body, field);
        }
        (["model", part, _], Item::Definition(def)) => {
            let Some(Entry::Field(ast::Field {
                value: ast::Value { kind: ValueKind::Instance { body, .. }, .. }, ..
            })) = def.body.entries.into_iter().next()
            else {
                unreachable!("the wrapped override is an instance")
            };
            let attr = body.entries.into_iter().next().expect("one attribute");
            let model = model_of(root, key)?;
            let Some(Entry::Field(field)) = model.body.entries.iter_mut().find(|e| e.key().name == *part) else {
                // Point at the part's name inside the override's text.
                let at = text.find(&format!("{{ {part} =")).map_or(0, |i| i + 2);
                return Err(bad_key(Span::new(file, at, at + part.len()), key));
            };
            if let ValueKind::Name(base) = &field.value.kind {
                let base = base.clone();
                field.value.kind =
                    ValueKind::Instance { base, body: ast::Block { entries: Vec::new(), span: attr.span() } };
            }
            let ValueKind::Instance { body, .. } = &mut field.value.kind else {
                return Err(bad_key(Span::new(file, 0, 0), key));
            };
            replace_entry(body, attr);
        }
        (_, item) => {
            let same = |i: &Item| std::mem::discriminant(i) == std::mem::discriminant(&item);
            match root.items.iter().position(same) {
                Some(at) => root.items[at] = item,
                None => root.items.push(item),
            }
        }
    }
    Ok(())
}

fn model_of<'a>(root: &'a mut ast::Module, key: &str) -> Result<&'a mut ast::Definition, Error> {
    let span = root.span;
    root.items
        .iter_mut()
        .find_map(|i| match i {
            Item::Definition(d) if d.kind == DefKind::Model => Some(d),
            _ => None,
        })
        .ok_or_else(|| bad_key(Span { end: span.start, ..span }, key))
}

fn replace_entry(block: &mut ast::Block, entry: Entry) {
    match block.entries.iter().position(|e| e.key().name == entry.key().name) {
        Some(at) => block.entries[at] = entry,
        None => block.entries.push(entry),
    }
}
