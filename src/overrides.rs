//! `--set KEY=VALUE`: one run's change to the plan, by dotted path, applied to the root
//! module's syntax tree before checking. The value is parsed as exactly one of what its key
//! takes (a value, or a statement's body), never pasted into the plan's text, so nothing
//! after it can reach the plan; the checker then reads it as it reads the same value written
//! in the file. Each flag becomes a small source file of its own (its `KEY=VALUE` text),
//! which is where the diagnostics about it point.
//!
//! Keys: `cluster.FIELD`, `batch.FIELD`, `model.PART`, `model.PART.ATTRIBUTE`, and the
//! statements `cut`, `schedule`, `owner`, `target` (their value is the statement's text
//! without the keyword: `schedule="interleaved(2)"`).

use crate::ast::{self, DefKind, Entry, Ident, Item, SectionKind, ValueKind};
use crate::error::{Error, ImportError, InputError};
use crate::parse::{self, Setting, Takes};
use crate::resolve::Program;
use crate::span::{FileId, Span};

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

/// A key's place in the plan, read from its dotted path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path<'k> {
    Field(SectionKind, &'k str),
    Part(&'k str),
    Attribute(&'k str, &'k str),
    Statement(Takes),
}

impl<'k> Path<'k> {
    fn of(key: &'k str) -> Option<Path<'k>> {
        let path: Vec<&str> = key.split('.').collect();
        let word = |w: &str| {
            w.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                && w.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        };
        if !path.iter().all(|w| word(w)) {
            return None;
        }
        Some(match path.as_slice() {
            ["cluster", field] => Path::Field(SectionKind::Cluster, field),
            ["batch", field] => Path::Field(SectionKind::Batch, field),
            ["model", part] => Path::Part(part),
            ["model", part, attr] => Path::Attribute(part, attr),
            ["cut"] => Path::Statement(Takes::Cut),
            ["schedule"] => Path::Statement(Takes::Schedule),
            ["owner"] => Path::Statement(Takes::Owner),
            ["target"] => Path::Statement(Takes::Target),
            _ => return None,
        })
    }

    fn takes(self) -> Takes {
        match self {
            Path::Statement(takes) => takes,
            _ => Takes::Value,
        }
    }
}

pub fn apply(program: &mut Program, overrides: &[(String, String)]) -> Vec<Error> {
    overrides.iter().filter_map(|(key, value)| apply_one(program, key, value).err()).collect()
}

/// The flag `KEY=VALUE` (the text of `file`) read as `--set` reads it: where its key points,
/// and its value parsed as exactly what that key takes.
pub fn typed<'k>(file: FileId, key: &'k str, flag: &str) -> Result<(Path<'k>, Setting), Error> {
    let path = Path::of(key).ok_or_else(|| bad_key(Span::new(file, 0, key.len()), key))?;
    let setting = parse::setting(file, flag, path.takes()).map_err(|e| trailing(e, key, path.takes(), flag))?;
    Ok((path, setting))
}

fn apply_one(program: &mut Program, key: &str, value: &str) -> Result<(), Error> {
    let flag = format!("{key}={value}");
    let file = program.sources.add(format!("--set {flag}"), flag.clone());
    let key_span = Span::new(file, 0, key.len());
    let (path, setting) = typed(file, key, &flag)?;
    let Some(root) = program.modules[0].ast.as_mut() else { return Ok(()) };
    // The name the key gives, and where it is in the flag: its last word.
    let last = key.rsplit('.').next().unwrap_or(key);
    let name = |word: &str, at: usize| Ident { name: word.to_string(), span: Span::new(file, at, at + word.len()) };
    let field = |value: ast::Value| {
        Entry::Field(ast::Field {
            key: name(last, key.len() - last.len()),
            value,
            span: Span::new(file, 0, flag.len()),
        })
    };
    match (path, setting) {
        (Path::Field(kind, _), Setting::Value(value)) => set_field(root, kind, field(value), key_span),
        (Path::Part(_), Setting::Value(value)) => replace_entry(&mut model_of(root, key)?.body, field(value)),
        (Path::Attribute(part, _), Setting::Value(value)) => {
            let model = model_of(root, key)?;
            let Some(Entry::Field(part_field)) = model.body.entries.iter_mut().find(|e| e.key().name == part) else {
                return Err(bad_key(Span::new(file, "model.".len(), "model.".len() + part.len()), key));
            };
            if let ValueKind::Name(base) = &part_field.value.kind {
                let base = base.clone();
                let span = Span::new(file, 0, flag.len());
                part_field.value.kind = ValueKind::Instance { base, body: ast::Block { entries: Vec::new(), span } };
            }
            let ValueKind::Instance { body, .. } = &mut part_field.value.kind else {
                return Err(bad_key(key_span, key));
            };
            replace_entry(body, field(value));
        }
        (_, Setting::Item(item)) => replace_statement(root, item),
        (_, Setting::Value(_)) => return Err(bad_key(key_span, key)),
    }
    Ok(())
}

/// A syntax error where the value was complete and more text followed, said as what it is.
fn trailing(error: Error, key: &str, takes: Takes, flag: &str) -> Error {
    match error {
        Error::Input(InputError::Syntax { span, expected, found, .. }) if expected.contains(&"end of file") => {
            let rest = flag[span.start as usize..].trim_start_matches([';', ',', ' ']);
            let section = key.rsplit_once('.').map(|(s, _)| s);
            let next = match (section, split(rest)) {
                (Some(section), Some((k, v))) if Path::of(&format!("{section}.{k}")).is_some() => {
                    Some(format!("--set {section}.{k}={}", v.trim_end_matches(';').trim_end()))
                }
                _ => None,
            };
            Error::Import(ImportError::OverrideTrailing {
                span,
                key: key.to_string(),
                takes: takes.describe(),
                found,
                next,
            })
        }
        other => other,
    }
}

fn set_field(root: &mut ast::Module, kind: SectionKind, field: Entry, keyword_span: Span) {
    let section = root.items.iter_mut().find_map(|i| match i {
        Item::Section(s) if s.kind == kind => Some(s),
        _ => None,
    });
    match section {
        Some(existing) => replace_entry(&mut existing.body, field),
        None => {
            let span = field.span();
            let body = ast::Block { entries: vec![field], span };
            root.items.push(Item::Section(ast::Section { kind, keyword_span, body, span }));
        }
    }
}

fn replace_statement(root: &mut ast::Module, item: Item) {
    let same = |i: &Item| std::mem::discriminant(i) == std::mem::discriminant(&item);
    match root.items.iter().position(same) {
        Some(at) => root.items[at] = item,
        None => root.items.push(item),
    }
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
