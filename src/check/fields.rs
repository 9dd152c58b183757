//! Checking a block against its [`Schema`]: unknown, duplicate and missing fields, types,
//! units and ranges. All problems of a block are collected; what checks out is returned.

use std::collections::BTreeMap;

use super::Ctx;
use super::schema::{Schema, Ty};
use crate::ast::{self, DefKind, Entry, ValueKind};
use crate::error::{Error, FieldError, ImportError};
use crate::resolve::{DefId, kind_word};
use crate::span::Span;
use crate::suggest::{did_you_mean, did_you_mean_or_longer};
use crate::units::{self, Dimension};

/// The largest count any field accepts.
pub const MAX_COUNT: u64 = 1 << 32;

#[derive(Clone, Debug, PartialEq)]
pub enum Val {
    Count(u64),
    Fraction(f64),
    Bool(bool),
    /// In the dimension's base unit (bytes, B/s, s, FLOP/s, FLOP).
    Quantity(f64),
    Choice(&'static str),
    Ref(DefId),
    Counts(Vec<u64>),
    Block(Fields),
    /// A file's (key, display name, text), read through the loader.
    File(String, String),
}

/// One field's checked value and where it was written.
#[derive(Clone, Debug, PartialEq)]
pub struct FieldValue {
    pub val: Val,
    pub span: Span,
}

/// The fields of one block that checked out, by name.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Fields {
    pub values: BTreeMap<&'static str, FieldValue>,
    /// False when a required field was missing: builders then give up quietly, the error
    /// having been reported already.
    pub complete: bool,
}

impl Fields {
    pub fn count(&self, name: &str) -> Option<u64> {
        match self.values.get(name).map(|c| &c.val) {
            Some(Val::Count(n)) => Some(*n),
            _ => None,
        }
    }

    pub fn quantity(&self, name: &str) -> Option<f64> {
        match self.values.get(name).map(|c| &c.val) {
            Some(Val::Quantity(q)) => Some(*q),
            _ => None,
        }
    }

    pub fn fraction(&self, name: &str) -> Option<f64> {
        match self.values.get(name).map(|c| &c.val) {
            Some(Val::Fraction(f)) => Some(*f),
            _ => None,
        }
    }

    pub fn boolean(&self, name: &str) -> Option<bool> {
        match self.values.get(name).map(|c| &c.val) {
            Some(Val::Bool(b)) => Some(*b),
            _ => None,
        }
    }

    pub fn choice(&self, name: &str) -> Option<&'static str> {
        match self.values.get(name).map(|c| &c.val) {
            Some(Val::Choice(c)) => Some(c),
            _ => None,
        }
    }

    pub fn reference(&self, name: &str) -> Option<DefId> {
        match self.values.get(name).map(|c| &c.val) {
            Some(Val::Ref(d)) => Some(*d),
            _ => None,
        }
    }

    pub fn counts(&self, name: &str) -> Option<Vec<u64>> {
        match self.values.get(name).map(|c| &c.val) {
            Some(Val::Count(n)) => Some(vec![*n]),
            Some(Val::Counts(v)) => Some(v.clone()),
            _ => None,
        }
    }

    pub fn block(&self, name: &str) -> Option<&Fields> {
        match self.values.get(name).map(|c| &c.val) {
            Some(Val::Block(f)) => Some(f),
            _ => None,
        }
    }

    pub fn file(&self, name: &str) -> Option<(&str, &str)> {
        match self.values.get(name).map(|c| &c.val) {
            Some(Val::File(display, text)) => Some((display, text)),
            _ => None,
        }
    }

    pub fn span(&self, name: &str) -> Option<Span> {
        self.values.get(name).map(|c| c.span)
    }
}

/// What a value is, for "expected …, found …".
pub fn describe(value: &ast::Value) -> String {
    match &value.kind {
        ValueKind::Number(q) => match &q.unit {
            Some(u) => format!("the quantity `{}{}`", q.digits, u.name),
            None => format!("the number `{}`", q.digits),
        },
        ValueKind::String(_) => "a string".into(),
        ValueKind::Bool(b) => format!("`{b}`"),
        ValueKind::Name(n) => format!("the name `{}`", n.name),
        ValueKind::List(_) => "a list".into(),
        ValueKind::Instance { base, .. } => format!("`{}` with a block", base.name),
    }
}

impl Ctx<'_> {
    /// Checks `block` against `schema`; `owner` is where "missing field" points.
    pub fn fields(&mut self, module: usize, block: &ast::Block, schema: &'static Schema, owner: Span) -> Fields {
        let mut fields = Fields { values: BTreeMap::new(), complete: true };
        let mut seen: BTreeMap<&str, Span> = BTreeMap::new();
        for entry in &block.entries {
            let key = entry.key();
            let Some(spec) = schema.field(&key.name) else {
                // A field the block already sets is no fix for a misspelt one: it would be set
                // twice. An override (another file) replaces the field it names, so it may.
                let written = |name: &str| {
                    block.entries.iter().any(|e| e.key().name == name && e.key().span.file == key.span.file)
                };
                let unwritten = schema.fields.iter().map(|f| f.name).filter(|f| !written(f));
                let suggestion = did_you_mean_or_longer(&key.name, unwritten);
                self.error(Error::Field(FieldError::UnknownField {
                    span: key.span,
                    field: key.name.clone(),
                    context: schema.context.into(),
                    suggestion,
                }));
                continue;
            };
            if let Some(first) = seen.get(spec.name) {
                self.error(Error::Field(FieldError::DuplicateField {
                    span: key.span,
                    field: key.name.clone(),
                    first: *first,
                }));
                continue;
            }
            seen.insert(spec.name, key.span);
            let checked = match (entry, spec.ty) {
                (Entry::Block(b), Ty::Block(inner)) => {
                    Some(Val::Block(self.fields(module, &b.body, inner, b.key.span)))
                }
                (Entry::Block(b), ty) => {
                    self.error(Error::Field(FieldError::WrongType {
                        span: b.body.span,
                        expected: ty.describe(),
                        found: "a block".into(),
                        defined_at: None,
                    }));
                    None
                }
                (Entry::Field(f), ty) => self.value(module, &f.value, ty, spec.name),
            };
            if let Some(val) = checked {
                fields.values.insert(spec.name, FieldValue { val, span: entry.span() });
            }
        }
        for spec in schema.fields.iter().filter(|f| f.required) {
            if !seen.contains_key(spec.name) {
                fields.complete = false;
                self.error(Error::Field(FieldError::MissingField {
                    span: owner,
                    field: spec.name.into(),
                    context: schema.context.into(),
                    hint: format!("{}; // {}", spec.ty.hint(), spec.doc),
                }));
            } else if !fields.values.contains_key(spec.name) {
                fields.complete = false;
            }
        }
        fields
    }

    fn value(&mut self, module: usize, value: &ast::Value, ty: Ty, field: &'static str) -> Option<Val> {
        let wrong = |expected: String| {
            Error::Field(FieldError::WrongType { span: value.span, expected, found: describe(value), defined_at: None })
        };
        match (ty, &value.kind) {
            (Ty::Count { min }, ValueKind::Number(q)) => self.count(value.span, q, min).map(Val::Count),
            (Ty::CountOrList { min }, ValueKind::Number(q)) => self.count(value.span, q, min).map(Val::Count),
            (Ty::CountOrList { min }, ValueKind::List(items)) => {
                if items.is_empty() {
                    self.error(Error::Field(FieldError::OutOfRange {
                        span: value.span,
                        what: "the list".into(),
                        requirement: "not empty".into(),
                    }));
                    return None;
                }
                let mut counts = Vec::with_capacity(items.len());
                for item in items {
                    match &item.kind {
                        ValueKind::Number(q) => counts.push(self.count(item.span, q, min)?),
                        _ => {
                            self.error(Error::Field(FieldError::WrongType {
                                span: item.span,
                                expected: "a whole number".into(),
                                found: describe(item),
                                defined_at: None,
                            }));
                            return None;
                        }
                    }
                }
                Some(Val::Counts(counts))
            }
            (Ty::Fraction, ValueKind::Number(q)) => {
                self.unitless(value.span, q)?;
                if q.value > 0.0 && q.value <= 1.0 {
                    Some(Val::Fraction(q.value))
                } else {
                    self.error(Error::Field(FieldError::OutOfRange {
                        span: value.span,
                        what: format!("`{}`", q.digits),
                        requirement: "greater than 0 and at most 1".into(),
                    }));
                    None
                }
            }
            (Ty::Bool, ValueKind::Bool(b)) => Some(Val::Bool(*b)),
            (Ty::Quantity(dim), ValueKind::Number(q)) => self.quantity(value.span, q, dim).map(Val::Quantity),
            (Ty::Choice(choices), ValueKind::Name(n)) => match choices.iter().find(|c| **c == n.name) {
                Some(c) => Some(Val::Choice(c)),
                None => {
                    let suggestion = did_you_mean(&n.name, choices.iter().copied());
                    self.error(Error::Field(FieldError::InvalidChoice {
                        span: n.span,
                        what: format!("`{field}`"),
                        found: n.name.clone(),
                        choices: choices.to_vec(),
                        suggestion,
                    }));
                    None
                }
            },
            (Ty::Ref(kinds), ValueKind::Name(n)) => self.reference(module, n, kinds).map(Val::Ref),
            (Ty::Path, ValueKind::String(path)) => self.read_file(module, value.span, field, path),
            (ty, _) => {
                self.error(wrong(ty.describe()));
                None
            }
        }
    }

    fn unitless(&mut self, span: Span, q: &ast::Quantity) -> Option<()> {
        match &q.unit {
            None => Some(()),
            Some(u) => {
                match units::lookup(&u.name) {
                    Some((dim, _)) => {
                        self.error(Error::Field(FieldError::UnitMismatch { span, expected: None, found: Some(dim) }))
                    }
                    None => self.error(Error::Field(FieldError::CountSuffix {
                        span,
                        written: format!("{}{}", q.digits, u.name),
                        readings: units::magnitude(&u.name).and_then(|(decimal, binary)| {
                            let whole =
                                |f: f64| Some(q.value * f).filter(|v| v.fract() == 0.0 && *v <= MAX_COUNT as f64);
                            Some((whole(decimal)? as u64, whole(binary)? as u64))
                        }),
                    })),
                }
                None
            }
        }
    }

    pub fn count(&mut self, span: Span, q: &ast::Quantity, min: u64) -> Option<u64> {
        self.unitless(span, q)?;
        // 2^32 is past every real cluster, model and batch, and keeps products of counts exact.
        if q.value.fract() != 0.0 && q.value.abs() <= MAX_COUNT as f64 {
            let near = ((q.value.floor() as u64).max(min), (q.value.ceil() as u64).max(min));
            self.error(Error::Field(FieldError::NotWhole { span, written: q.digits.clone(), near }));
            return None;
        }
        if q.value.fract() != 0.0 || q.value < min as f64 || q.value > MAX_COUNT as f64 {
            let requirement = if min == 0 { "a whole number up to 2^32" } else { "a whole number from 1 to 2^32" };
            self.error(Error::Field(FieldError::OutOfRange {
                span,
                what: format!("`{}`", q.digits),
                requirement: requirement.into(),
            }));
            return None;
        }
        Some(q.value as u64)
    }

    fn quantity(&mut self, span: Span, q: &ast::Quantity, dim: Dimension) -> Option<f64> {
        let Some(unit) = &q.unit else {
            self.error(Error::Field(FieldError::UnitMismatch { span, expected: Some(dim), found: None }));
            return None;
        };
        let Some((found, factor)) = units::lookup(&unit.name) else {
            let suggestion = did_you_mean(&unit.name, units::UNITS.iter().map(|(u, _, _)| *u));
            self.error(Error::Field(FieldError::UnknownUnit { span: unit.span, unit: unit.name.clone(), suggestion }));
            return None;
        };
        if found != dim {
            self.error(Error::Field(FieldError::UnitMismatch { span, expected: Some(dim), found: Some(found) }));
            return None;
        }
        let value = q.value * factor;
        if !(value.is_finite() && value > 0.0) {
            self.error(Error::Field(FieldError::OutOfRange {
                span,
                what: format!("`{}{}`", q.digits, unit.name),
                requirement: "a finite amount greater than 0".into(),
            }));
            return None;
        }
        Some(value)
    }

    /// A data file named relative to the module's file, read through the loader.
    fn read_file(&mut self, module: usize, span: Span, field: &'static str, path: &str) -> Option<Val> {
        let loader = self.loader?;
        let from = self.program.modules[module].key.clone();
        let resolved = match loader.resolve(&from, path) {
            Ok(r) => r,
            Err(crate::resolve::loader::ResolveError::OutsideRoot) => {
                self.error(Error::Import(ImportError::ImportOutsideRoot { span, path: path.into() }));
                return None;
            }
            Err(crate::resolve::loader::ResolveError::NotFound(reason)) => {
                self.error(Error::Import(ImportError::DataFileNotFound { span, field, path: path.into(), reason }));
                return None;
            }
        };
        let bytes = match loader.read(&resolved.key) {
            Ok(bytes) => bytes,
            Err(reason) => {
                self.error(Error::Import(ImportError::DataFileNotFound { span, field, path: path.into(), reason }));
                return None;
            }
        };
        match String::from_utf8(bytes).ok().filter(|text| !text.contains('\0')) {
            Some(text) => Some(Val::File(resolved.display, text)),
            None => {
                self.error(Error::Import(ImportError::DataFileNotText { span, field, path: path.into() }));
                None
            }
        }
    }

    /// Resolves a name that must stand for a definition of one of `kinds`.
    pub fn reference(&mut self, module: usize, name: &ast::Ident, kinds: &[DefKind]) -> Option<DefId> {
        let Some(binding) = self.program.lookup(module, &name.name) else {
            if self.program.modules[module].unresolved.contains(&name.name) {
                return None;
            }
            let scope = &self.program.modules[module].scope;
            let candidates = scope
                .iter()
                .filter(|(_, b)| kinds.contains(&self.program.definition(b.def).kind))
                .map(|(n, _)| n.as_str());
            let suggestion = did_you_mean(&name.name, candidates);
            let import_from = super::stdlib_home(&name.name, kinds);
            self.error(Error::Import(ImportError::UnknownName {
                span: name.span,
                name: name.name.clone(),
                expected: kind_word(kinds),
                suggestion,
                import_from,
            }));
            return None;
        };
        if let Some(import) = binding.import {
            self.used.insert(import);
        }
        let def = self.program.definition(binding.def);
        if !kinds.contains(&def.kind) {
            self.error(Error::Field(FieldError::WrongType {
                span: name.span,
                expected: format!("a {} definition", kind_word(kinds)),
                found: format!("{} `{}`", def.kind.keyword(), name.name),
                defined_at: Some(def.name.span),
            }));
            return None;
        }
        Some(binding.def)
    }
}
