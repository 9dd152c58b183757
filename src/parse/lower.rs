//! pest pairs to `ast`. The grammar guarantees each shape matched here, so a mismatch is a
//! bug in this file, not in the input.

use pest::iterators::Pair;

use super::{Rule, Setting};
use crate::ast::*;
use crate::span::{FileId, Span};

struct Lower {
    file: FileId,
}

pub fn module(file: FileId, pair: Pair<Rule>) -> Module {
    let l = Lower { file };
    let span = l.span(&pair);
    let items = pair.into_inner().filter(|p| p.as_rule() != Rule::EOI).map(|p| l.item(p)).collect();
    Module { items, span }
}

/// A `--set` flag's value, from one of the grammar's `set_*` rules: the key is skipped, the
/// statements are built without their keyword.
pub fn setting(file: FileId, pair: Pair<Rule>) -> Setting {
    let l = Lower { file };
    match pair.as_rule() {
        Rule::set_value => {
            let value = pair.into_inner().find(|p| !matches!(p.as_rule(), Rule::set_key | Rule::EOI));
            Setting::Value(l.value(value.expect("grammar: set_value holds a value")))
        }
        Rule::set_cut => Setting::Item(Item::Cut(l.cut(pair))),
        Rule::set_schedule => Setting::Item(Item::Schedule(l.schedule(pair))),
        Rule::set_owner => {
            let value = pair.into_inner().find(|p| matches!(p.as_rule(), Rule::list | Rule::name));
            let spec = l.value(value.expect("grammar: set_owner holds a spec"));
            Setting::Item(Item::Owner(OwnerStmt { span: spec.span, spec }))
        }
        Rule::set_target => Setting::Item(Item::Target(l.target(pair))),
        r => unreachable!("grammar: unexpected setting {r:?}"),
    }
}

impl Lower {
    fn span(&self, pair: &Pair<Rule>) -> Span {
        let s = pair.as_span();
        Span::new(self.file, s.start(), s.end())
    }

    fn ident(&self, pair: Pair<Rule>) -> Ident {
        Ident { name: pair.as_str().to_string(), span: self.span(&pair) }
    }

    fn item(&self, pair: Pair<Rule>) -> Item {
        match pair.as_rule() {
            Rule::use_decl => Item::Use(self.use_decl(pair)),
            Rule::definition => Item::Definition(self.definition(pair)),
            Rule::section => Item::Section(self.section(pair)),
            Rule::cut_stmt => Item::Cut(self.cut(pair)),
            Rule::schedule_stmt => Item::Schedule(self.schedule(pair)),
            Rule::owner_stmt => Item::Owner(self.owner(pair)),
            Rule::target_stmt => Item::Target(self.target(pair)),
            r => unreachable!("grammar: unexpected item {r:?}"),
        }
    }

    fn use_decl(&self, pair: Pair<Rule>) -> UseDecl {
        let span = self.span(&pair);
        let mut inner = pair.into_inner().skip(1);
        let source = inner.next().expect("grammar: use source");
        let source = match source.as_rule() {
            Rule::string => UseSource::File(self.string(source)),
            Rule::module_path => UseSource::Path(source.into_inner().map(|p| self.ident(p)).collect()),
            r => unreachable!("grammar: unexpected use source {r:?}"),
        };
        let what = inner.next().expect("grammar: use items");
        let (items, grouped) = match what.as_rule() {
            Rule::use_group => (what.into_inner().map(|p| self.ident(p)).collect(), true),
            Rule::ident => (vec![self.ident(what)], false),
            r => unreachable!("grammar: unexpected use item {r:?}"),
        };
        UseDecl { source, items, grouped, span }
    }

    fn string(&self, pair: Pair<Rule>) -> StringLit {
        let raw = pair.as_str();
        let mut value = String::with_capacity(raw.len());
        let mut chars = raw[1..raw.len() - 1].chars();
        while let Some(c) = chars.next() {
            if c == '\\' {
                match chars.next() {
                    Some('n') => value.push('\n'),
                    Some('t') => value.push('\t'),
                    Some(other) => value.push(other),
                    None => {}
                }
            } else {
                value.push(c);
            }
        }
        StringLit { value, span: self.span(&pair) }
    }

    fn definition(&self, pair: Pair<Rule>) -> Definition {
        let span = self.span(&pair);
        let mut inner = pair.into_inner();
        let kind = match inner.next().and_then(|k| k.into_inner().next()).map(|k| k.as_rule()) {
            Some(Rule::kw_hardware) => DefKind::Hardware,
            Some(Rule::kw_encoder) => DefKind::Encoder,
            Some(Rule::kw_decoder) => DefKind::Decoder,
            Some(Rule::kw_model) => DefKind::Model,
            r => unreachable!("grammar: unexpected definition kind {r:?}"),
        };
        let name = self.ident(inner.next().expect("grammar: definition name"));
        let body = self.block(inner.next().expect("grammar: definition body"));
        Definition { kind, name, body, span }
    }

    fn section(&self, pair: Pair<Rule>) -> Section {
        let span = self.span(&pair);
        let mut inner = pair.into_inner();
        let kind_pair = inner.next().expect("grammar: section kind");
        let keyword_span = self.span(&kind_pair);
        let kind = match kind_pair.into_inner().next().map(|k| k.as_rule()) {
            Some(Rule::kw_cluster) => SectionKind::Cluster,
            Some(Rule::kw_batch) => SectionKind::Batch,
            r => unreachable!("grammar: unexpected section kind {r:?}"),
        };
        let body = self.block(inner.next().expect("grammar: section body"));
        Section { kind, keyword_span, body, span }
    }

    fn block(&self, pair: Pair<Rule>) -> Block {
        let span = self.span(&pair);
        let entries = pair
            .into_inner()
            .map(|p| match p.as_rule() {
                Rule::field => Entry::Field(self.field(p)),
                Rule::sub_block => {
                    let span = self.span(&p);
                    let mut inner = p.into_inner();
                    let key = self.ident(inner.next().expect("grammar: block key"));
                    let body = self.block(inner.next().expect("grammar: block body"));
                    Entry::Block(SubBlock { key, body, span })
                }
                r => unreachable!("grammar: unexpected entry {r:?}"),
            })
            .collect();
        Block { entries, span }
    }

    fn field(&self, pair: Pair<Rule>) -> Field {
        let span = self.span(&pair);
        let mut inner = pair.into_inner();
        let key = self.ident(inner.next().expect("grammar: field key"));
        let value = self.value(inner.next().expect("grammar: field value"));
        Field { key, value, span }
    }

    fn value(&self, pair: Pair<Rule>) -> Value {
        let span = self.span(&pair);
        let kind = match pair.as_rule() {
            Rule::list => ValueKind::List(pair.into_inner().map(|p| self.value(p)).collect()),
            Rule::string => ValueKind::String(self.string(pair).value),
            Rule::boolean => ValueKind::Bool(pair.as_str() == "true"),
            Rule::name => ValueKind::Name(self.ident(pair.into_inner().next().expect("grammar: name"))),
            Rule::quantity => {
                let mut inner = pair.into_inner();
                let digits = inner.next().expect("grammar: number").as_str().to_string();
                let value = digits.replace('_', "").parse::<f64>().unwrap_or(f64::INFINITY);
                let unit = inner.next().map(|u| self.ident(u));
                ValueKind::Number(Quantity { value, digits, unit })
            }
            Rule::instance => {
                let mut inner = pair.into_inner();
                let base = self.ident(inner.next().expect("grammar: instance base"));
                let body = self.block(inner.next().expect("grammar: instance body"));
                ValueKind::Instance { base, body }
            }
            r => unreachable!("grammar: unexpected value {r:?}"),
        };
        Value { kind, span }
    }

    fn cut(&self, pair: Pair<Rule>) -> CutStmt {
        let span = self.span(&pair);
        let regions = pair
            .into_inner()
            .filter(|p| p.as_rule() == Rule::region)
            .map(|region| {
                let mut span = self.span(&region);
                let segments: Vec<Segment> = region.into_inner().map(|s| self.segment(s)).collect();
                // pest's span takes in the blanks it skipped looking for another `+`.
                span.end = segments.last().map_or(span.end, |s: &Segment| s.span.end);
                RegionExpr { segments, span }
            })
            .collect();
        CutStmt { regions, span }
    }

    fn segment(&self, pair: Pair<Rule>) -> Segment {
        let span = self.span(&pair);
        let mut inner = pair.into_inner();
        let part = self.ident(inner.next().expect("grammar: segment part"));
        let range = inner.next().map(|r| {
            let span = self.span(&r);
            let mut bounds = r.into_inner().map(|b| b.as_str().parse::<u64>().unwrap_or(u64::MAX));
            let start = bounds.next().expect("grammar: range start");
            let end = bounds.next().expect("grammar: range end");
            LayerRange { start, end, span }
        });
        Segment { part, range, span }
    }

    fn schedule(&self, pair: Pair<Rule>) -> ScheduleStmt {
        let span = self.span(&pair);
        let skeletons = pair
            .into_inner()
            .filter(|p| p.as_rule() == Rule::skeleton)
            .map(|s| {
                let span = self.span(&s);
                let mut inner = s.into_inner();
                let name = self.ident(inner.next().expect("grammar: skeleton name"));
                let args = inner.next().map(|args| args.into_inner().map(|a| self.arg(a)).collect());
                SkeletonExpr { name, args, span }
            })
            .collect();
        ScheduleStmt { skeletons, span }
    }

    fn arg(&self, pair: Pair<Rule>) -> Arg {
        let span = self.span(&pair);
        let mut parts: Vec<Pair<Rule>> = pair.into_inner().collect();
        let value = self.value(parts.pop().expect("grammar: argument value"));
        let name = parts.pop().map(|k| self.ident(k));
        Arg { name, value, span }
    }

    fn owner(&self, pair: Pair<Rule>) -> OwnerStmt {
        let span = self.span(&pair);
        let spec = self.value(pair.into_inner().last().expect("grammar: owner spec"));
        OwnerStmt { spec, span }
    }

    fn target(&self, pair: Pair<Rule>) -> TargetStmt {
        let span = self.span(&pair);
        let targets = pair
            .into_inner()
            .filter(|p| p.as_rule() == Rule::target)
            .map(|t| {
                let span = self.span(&t);
                let mut inner = t.into_inner();
                let name = self.ident(inner.next().expect("grammar: target name"));
                let option = inner.next().map(|o| self.ident(o));
                Target { name, option, span }
            })
            .collect();
        TargetStmt { targets, span }
    }
}
