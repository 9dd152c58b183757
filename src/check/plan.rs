//! The root module as a plan: its model, cluster, batch, cut, schedule, owner and targets.

use super::Ctx;
use super::fields::Fields;
use super::schema;
use super::spec::{Batch, Cluster, Model, Part, Plan, Recompute, RegionSchedule, TARGETS, TargetSpec};
use super::{TRANSPOSE_ONLY, TransposeSpans};
use crate::algebra::skeleton::{self, ParamKind};
use crate::algebra::{Chunks, Cut, Fill, OwnerSpec, Region, Skeleton};
use crate::ast::{self, DefKind, Item, ValueKind};
use crate::error::Error;
use std::ops::Range;

use crate::span::Span;
use crate::suggest::did_you_mean;

/// One segment of a cut, resolved: the part, its layers within the part and in the model.
struct Piece {
    part: usize,
    local: Range<u64>,
    global: Range<u64>,
    span: Span,
}

/// The plan's statements, each with the span of its first occurrence.
#[derive(Default)]
struct Sections<'a> {
    model: Option<&'a ast::Definition>,
    cluster: Option<&'a ast::Section>,
    batch: Option<&'a ast::Section>,
    cut: Option<&'a ast::CutStmt>,
    schedule: Option<&'a ast::ScheduleStmt>,
    owner: Option<&'a ast::OwnerStmt>,
    target: Option<&'a ast::TargetStmt>,
}

fn keep<'a, T>(
    ctx: &mut Ctx,
    slot: &mut Option<&'a T>,
    item: &'a T,
    span: Span,
    first: impl Fn(&T) -> Span,
    section: &'static str,
) {
    match slot {
        Some(prev) => ctx.error(Error::DuplicateSection { span, section, first: first(prev) }),
        None => *slot = Some(item),
    }
}

impl Ctx<'_> {
    pub(super) fn plan(&mut self) -> Option<Plan> {
        let program = self.program;
        let root = program.root();
        let ast = root.ast.as_ref()?;
        let mut s = Sections::default();
        for item in &ast.items {
            match item {
                Item::Definition(d) if d.kind == DefKind::Model => {
                    keep(self, &mut s.model, d, d.name.span, |p| p.name.span, "model")
                }
                Item::Section(sec) => {
                    let slot = match sec.kind {
                        ast::SectionKind::Cluster => &mut s.cluster,
                        ast::SectionKind::Batch => &mut s.batch,
                    };
                    keep(self, slot, sec, sec.keyword_span, |p| p.keyword_span, sec.kind.keyword());
                }
                Item::Cut(c) => keep(self, &mut s.cut, c, c.span, |p| p.span, "cut"),
                Item::Schedule(c) => keep(self, &mut s.schedule, c, c.span, |p| p.span, "schedule"),
                Item::Owner(c) => keep(self, &mut s.owner, c, c.span, |p| p.span, "owner"),
                Item::Target(c) => keep(self, &mut s.target, c, c.span, |p| p.span, "target"),
                Item::Use(_) | Item::Definition(_) => {}
            }
        }
        let is_plan =
            s.model.is_some() || s.cluster.is_some() || s.batch.is_some() || s.cut.is_some() || s.schedule.is_some();
        if !is_plan {
            // A file of definitions only: a library, checked as such.
            return None;
        }
        let file_start = Span::new(root.file, 0, 0);
        let missing = |ctx: &mut Ctx, present: bool, section: &'static str, example: &'static str| {
            if !present {
                ctx.error(Error::MissingSection { span: file_start, section, example });
            }
        };
        missing(self, s.model.is_some(), "model", "model name { part = architecture; }");
        missing(self, s.cluster.is_some(), "cluster", "cluster { hardware = …; devices = 8; pp = 8; }");
        missing(self, s.batch.is_some(), "batch", "batch { microbatches = 16; seq_len = 8192; }");
        missing(self, s.cut.is_some(), "cut", "cut part | part;");
        missing(self, s.schedule.is_some(), "schedule", "schedule 1f1b;");

        let model = s.model.and_then(|m| self.model(m));
        let cluster = s.cluster.and_then(|c| self.cluster(c));
        let batch = s.batch.and_then(|b| self.batch(b));
        let cut = match (s.cut, s.model, &model) {
            (Some(c), Some(def), Some(model)) => self.cut(c, def, model),
            _ => None,
        };
        let schedule = s.schedule.and_then(|sch| self.schedule(sch));
        let owner = s.owner.and_then(|o| self.owner(o));
        let targets = s.target.map(|t| self.targets(t)).unwrap_or_default();
        let parts = rules::Parts {
            model: model.as_ref(),
            cluster: cluster.as_ref().zip(s.cluster),
            batch: batch.as_ref().zip(s.batch),
            cut: s.cut.map(|stmt| (cut.as_ref(), stmt)),
            schedule: schedule.as_deref().zip(s.schedule),
            owner: owner.as_ref().zip(s.owner),
        };
        self.rules(&parts);
        Some(Plan {
            source: program.sources.get(root.file).name.clone(),
            model: model?,
            cluster: cluster?,
            batch: batch?,
            cut: cut?,
            schedule: schedule?,
            owner,
            targets,
        })
    }

    fn model(&mut self, def: &ast::Definition) -> Option<Model> {
        let mut parts: Vec<Part> = Vec::new();
        let mut complete = true;
        for entry in &def.body.entries {
            let ast::Entry::Field(field) = entry else {
                self.error(Error::WrongType {
                    span: entry.span(),
                    expected: "a part `name = architecture;`".into(),
                    found: "a block".into(),
                    defined_at: None,
                });
                complete = false;
                continue;
            };
            if let Some(first) = parts.iter().find(|p| p.name == field.key.name) {
                self.error(Error::DuplicateField {
                    span: field.key.span,
                    field: field.key.name.clone(),
                    first: first.span,
                });
                complete = false;
                continue;
            }
            let (base, body) = match &field.value.kind {
                ValueKind::Name(n) => (n, None),
                ValueKind::Instance { base, body } => (base, Some(body)),
                _ => {
                    let found = super::fields::describe(&field.value);
                    self.error(Error::WrongType {
                        span: field.value.span,
                        expected: "an architecture name".into(),
                        found,
                        defined_at: None,
                    });
                    complete = false;
                    continue;
                }
            };
            let Some(id) = self.reference(0, base, &[DefKind::Encoder, DefKind::Decoder]) else {
                complete = false;
                continue;
            };
            let Some(mut arch) = self.archs.get(&id).cloned().flatten() else {
                complete = false;
                continue;
            };
            let mut attrs = Fields::default();
            if let Some(body) = body {
                let def = self.program.definition(id);
                let arch_schema = schema::of_definition(def.kind);
                let (mut own, mut overrides) = (Vec::new(), Vec::new());
                for entry in &body.entries {
                    let key = &entry.key().name;
                    if schema::PART.field(key).is_some() {
                        own.push(entry.clone());
                    } else if arch_schema.field(key).is_some() {
                        overrides.push(entry.clone());
                    } else {
                        let names = schema::PART.fields.iter().chain(arch_schema.fields).map(|f| f.name);
                        let suggestion = did_you_mean(key, names);
                        self.error(Error::UnknownField {
                            span: entry.key().span,
                            field: key.clone(),
                            context: "a model part".into(),
                            suggestion,
                        });
                        complete = false;
                    }
                }
                attrs = self.fields(0, &ast::Block { entries: own, span: body.span }, &schema::PART, field.key.span);
                if !overrides.is_empty() {
                    let keys: Vec<&str> = overrides.iter().map(|e| e.key().name.as_str()).collect();
                    let mut entries: Vec<ast::Entry> =
                        def.body.entries.iter().filter(|e| !keys.contains(&e.key().name.as_str())).cloned().collect();
                    entries.extend(overrides);
                    let merged = ast::Block { entries, span: def.body.span };
                    match self.arch_from(id.module, def.kind, &def.name, &merged) {
                        Some(a) => arch = a,
                        None => {
                            complete = false;
                            continue;
                        }
                    }
                }
            }
            let recompute = match attrs.choice("recompute") {
                Some("selective") => Recompute::Selective,
                Some("full") => Recompute::Full,
                _ => Recompute::None,
            };
            parts.push(Part {
                name: field.key.name.clone(),
                arch,
                frozen: attrs.boolean("frozen").unwrap_or(false),
                recompute,
                forward_time: attrs.quantity("forward_time"),
                backward_time: attrs.quantity("backward_time"),
                span: field.key.span,
            });
        }
        if def.body.entries.is_empty() {
            self.error(Error::EmptyModel { span: def.name.span, name: def.name.name.clone() });
            return None;
        }
        complete.then(|| Model { name: def.name.name.clone(), parts })
    }

    fn cluster(&mut self, sec: &ast::Section) -> Option<Cluster> {
        let f = self.fields(0, &sec.body, &schema::CLUSTER, sec.keyword_span);
        if !f.complete {
            return None;
        }
        let hardware = self.hardware.get(&f.reference("hardware")?).cloned().flatten()?;
        Some(Cluster {
            hardware,
            devices: f.count("devices")?,
            pp: f.count("pp")?,
            dp: f.count("dp").unwrap_or(1),
            tp: f.count("tp").unwrap_or(1),
            ep: f.count("ep").unwrap_or(1),
            distributed_optimizer: f.boolean("distributed_optimizer").unwrap_or(false),
            efficiency: f.fraction("efficiency").unwrap_or(0.5),
            overlap_comm: f.boolean("overlap_comm").unwrap_or(true),
            flash_attention: f.boolean("flash_attention").unwrap_or(true),
        })
    }

    fn batch(&mut self, sec: &ast::Section) -> Option<Batch> {
        let f = self.fields(0, &sec.body, &schema::BATCH, sec.keyword_span);
        if !f.complete {
            return None;
        }
        let histogram = match (f.file("image_histogram"), f.span("image_histogram")) {
            (Some((name, text)), Some(span)) => match parse_histogram(text) {
                Ok(h) => h,
                Err(line) => {
                    self.error(Error::OutOfRange {
                        span,
                        what: format!("line {line} of `{name}`"),
                        requirement: "`tokens,weight` with a whole number of tokens and a weight above 0".into(),
                    });
                    return None;
                }
            },
            _ => Vec::new(),
        };
        Some(Batch {
            microbatches: f.count("microbatches")?,
            micro_batch_size: f.count("micro_batch_size").unwrap_or(1),
            seq_len: f.count("seq_len")?,
            image_tokens: f.counts("image_tokens").unwrap_or_default(),
            images: f.count("images").unwrap_or(1),
            histogram,
        })
    }

    /// Regions over the global layer numbering; order, overlap and coverage are checked here.
    fn cut(&mut self, stmt: &ast::CutStmt, def: &ast::Definition, model: &Model) -> Option<Cut> {
        let mut offsets = Vec::with_capacity(model.parts.len());
        let mut total = 0;
        for p in &model.parts {
            offsets.push(total);
            total += p.arch.layers();
        }
        // First resolve every segment to global layers, reporting unknown parts and ranges.
        let mut resolved: Vec<Vec<Piece>> = Vec::new();
        let mut ok = true;
        for region in &stmt.regions {
            let mut segments = Vec::new();
            for seg in &region.segments {
                let Some(index) = model.parts.iter().position(|p| p.name == seg.part.name) else {
                    let suggestion = did_you_mean(&seg.part.name, model.parts.iter().map(|p| p.name.as_str()));
                    let (span, name, model) = (seg.part.span, seg.part.name.clone(), def.name.span);
                    self.error(Error::UnknownPart { span, name, model, suggestion });
                    ok = false;
                    continue;
                };
                let layers = model.parts[index].arch.layers();
                let range = match &seg.range {
                    None => 0..layers,
                    Some(r) if r.start >= r.end || r.end > layers => {
                        let detail = if r.start >= r.end {
                            format!("{}..{} is empty", r.start, r.end)
                        } else {
                            format!("ends at {}, past the last layer", r.end)
                        };
                        self.error(Error::BadLayerRange { span: r.span, part: seg.part.name.clone(), layers, detail });
                        ok = false;
                        continue;
                    }
                    Some(r) => r.start..r.end,
                };
                let global = offsets[index] + range.start..offsets[index] + range.end;
                segments.push(Piece { part: index, local: range, global, span: seg.span });
            }
            resolved.push(segments);
        }
        if !ok {
            return None;
        }
        // Then order and overlap, then coverage: a cut in the wrong order also leaves gaps,
        // and the order is the mistake to name.
        let flat: Vec<&Piece> = resolved.iter().flatten().collect();
        for pair in flat.windows(2) {
            let (Piece { part: pa, global: a, span: a_span, .. }, Piece { part: pb, global: b, span: b_span, .. }) =
                (pair[0], pair[1]);
            if b.start < a.end {
                let detail = if pb < pa {
                    format!("`{}` comes before `{}` in the model", model.parts[*pb].name, model.parts[*pa].name)
                } else {
                    "overlaps the layers before it".to_string()
                };
                self.error(Error::CutOutOfOrder { span: *b_span, previous: *a_span, detail });
                return None;
            }
        }
        let mut next = 0;
        for Piece { global, span, .. } in &flat {
            if global.start > next {
                let missing = describe_layers(model, &offsets, next..global.start);
                self.error(Error::CutIncomplete { span: *span, missing, fix: None });
                ok = false;
            }
            next = global.end;
        }
        if ok && next < total {
            let missing = describe_layers(model, &offsets, next..total);
            let fix = full_cut(self, stmt, model, &offsets, next).map(|text| (stmt.span, text));
            let span = stmt.regions.last().map(|r| r.span).unwrap_or(stmt.span);
            self.error(Error::CutIncomplete { span, missing, fix });
            ok = false;
        }
        let regions = stmt
            .regions
            .iter()
            .zip(resolved)
            .map(|(region, segments)| Region {
                name: source_text(self, region.span),
                layers: segments.first().map_or(0, |s| s.global.start)..segments.last().map_or(0, |s| s.global.end),
                segments: segments.into_iter().map(|p| (p.part, p.local)).collect(),
            })
            .collect();
        ok.then_some(Cut { regions })
    }

    fn schedule(&mut self, stmt: &ast::ScheduleStmt) -> Option<Vec<RegionSchedule>> {
        let mut out = Vec::new();
        let mut ok = true;
        for expr in &stmt.skeletons {
            match self.skeleton(expr) {
                Some(s) => out.push(s),
                None => ok = false,
            }
        }
        ok.then_some(out)
    }

    fn skeleton(&mut self, expr: &ast::SkeletonExpr) -> Option<RegionSchedule> {
        let name = &expr.name.name;
        let Some(def) = skeleton::lookup(name) else {
            let suggestion = did_you_mean(name, skeleton::NAMES.iter().copied());
            self.error(Error::UnknownSkeleton { span: expr.name.span, name: name.clone(), suggestion });
            return None;
        };
        let bad = |ctx: &mut Ctx, span: Span, message: String, help: String| {
            ctx.error(Error::BadSkeletonArgument { span, skeleton: def.name.into(), message, help });
        };
        let mut values: Vec<Option<(&ast::Value, Span)>> = vec![None; def.params.len()];
        let mut ok = true;
        for (position, arg) in expr.args.iter().flatten().enumerate() {
            let index = match &arg.name {
                Some(n) => match def.params.iter().position(|p| p.name == n.name) {
                    Some(i) => i,
                    None if TRANSPOSE_ONLY.contains(&n.name.as_str()) => {
                        self.error(Error::TransposeOnlyArgument {
                            span: arg.span,
                            name: n.name.clone(),
                            skeleton: def.name.into(),
                        });
                        ok = false;
                        continue;
                    }
                    None => {
                        let names: Vec<&str> = def.params.iter().map(|p| p.name).collect();
                        let help = match did_you_mean(&n.name, names.iter().copied()) {
                            Some(s) => format!("did you mean `{s}`?"),
                            None => format!("`{}` takes: {}", def.name, names.join(", ")),
                        };
                        bad(self, n.span, format!("no parameter `{}`", n.name), help);
                        ok = false;
                        continue;
                    }
                },
                None if position < def.params.len() => position,
                None => {
                    bad(
                        self,
                        arg.span,
                        "too many arguments".into(),
                        format!(
                            "`{}` takes at most {}",
                            def.name,
                            crate::error::count(def.params.len() as u64, "argument")
                        ),
                    );
                    ok = false;
                    continue;
                }
            };
            if values[index].is_some() {
                bad(
                    self,
                    arg.span,
                    format!("`{}` given twice", def.params[index].name),
                    "give each parameter once".into(),
                );
                ok = false;
                continue;
            }
            values[index] = Some((&arg.value, arg.span));
        }
        let mut counts = Vec::new();
        let mut split = None;
        let mut fill = Fill::Slack;
        let mut chunks = (Chunks::Auto, None);
        let mut lookahead = (false, None);
        for (param, given) in def.params.iter().zip(values) {
            match (&param.kind, given) {
                (ParamKind::Count { default, .. }, None) => match default {
                    Some(d) => counts.push(*d),
                    None => {
                        bad(
                            self,
                            expr.span,
                            format!("missing `{}`", param.name),
                            format!("write `{}({})`: {}", def.name, 2, param.doc),
                        );
                        ok = false;
                    }
                },
                (ParamKind::Count { min, .. }, Some((value, span))) => match &value.kind {
                    ValueKind::Number(q)
                        if q.unit.is_none()
                            && q.value.fract() == 0.0
                            && q.value >= *min as f64
                            && q.value <= 1024.0 =>
                    {
                        counts.push(q.value as u64)
                    }
                    _ => {
                        bad(
                            self,
                            span,
                            format!("`{}` must be a whole number from {min} to 1024", param.name),
                            format!("{}: {}", param.name, param.doc),
                        );
                        ok = false;
                    }
                },
                (ParamKind::Choice { .. }, None) => {}
                (ParamKind::Choice { choices, .. }, Some((value, span))) => match &value.kind {
                    ValueKind::Name(n) if choices.contains(&n.name.as_str()) => {
                        fill = if n.name == "prefix" { Fill::Prefix } else { Fill::Slack };
                    }
                    _ => {
                        bad(
                            self,
                            span,
                            format!("`{}` must be one of {}", param.name, choices.join(", ")),
                            param.doc.into(),
                        );
                        ok = false;
                    }
                },
                (ParamKind::CountOrAuto | ParamKind::Lookahead, None) => {}
                (ParamKind::CountOrAuto, Some((value, span))) => match &value.kind {
                    ValueKind::Name(n) if n.name == "auto" => chunks = (Chunks::Auto, Some(span)),
                    ValueKind::Number(q) if q.unit.is_none() && q.value.fract() == 0.0 && q.value >= 1.0 => {
                        chunks = (Chunks::Fixed(q.value.min(f64::from(u32::MAX)) as u32), Some(span))
                    }
                    _ => {
                        self.error(Error::ChunksOutOfRange { span, layers: None });
                        ok = false;
                    }
                },
                (ParamKind::Lookahead, Some((value, span))) => match &value.kind {
                    ValueKind::Number(q) if q.unit.is_none() && (q.value == 0.0 || q.value == 1.0) => {
                        lookahead = (q.value == 1.0, Some(span))
                    }
                    _ => {
                        self.error(Error::LookaheadOutOfRange { span });
                        ok = false;
                    }
                },
                (ParamKind::Split, None) => {}
                (ParamKind::Split, Some((value, span))) => match &value.kind {
                    ValueKind::List(items) if !items.is_empty() => {
                        let mut layers = Vec::new();
                        for item in items {
                            match &item.kind {
                                ValueKind::Number(q) => match self.count(item.span, q, 1) {
                                    Some(n) => layers.push(n),
                                    None => ok = false,
                                },
                                _ => {
                                    bad(
                                        self,
                                        item.span,
                                        "expected a layer count".into(),
                                        "write the layers of each stage: `split = [6, 6, 6, 6]`".into(),
                                    );
                                    ok = false;
                                }
                            }
                        }
                        split = Some((layers, span));
                    }
                    _ => {
                        bad(
                            self,
                            span,
                            "`split` must be a non-empty list".into(),
                            "write the layers of each stage: `split = [6, 6, 6, 6]`".into(),
                        );
                        ok = false;
                    }
                },
            }
        }
        if !ok {
            return None;
        }
        let v = counts.first().copied().unwrap_or(1) as u32;
        let skeleton = match def.name {
            "gpipe" => Skeleton::Gpipe,
            "1f1b" => Skeleton::OneFOneB,
            "interleaved" => Skeleton::Interleaved { v },
            "zb1p" => Skeleton::Zb1p { v },
            "zbv" => Skeleton::Zbv,
            "dualpipev" => Skeleton::DualPipeV,
            "transpose" => Skeleton::Transpose { fill, chunks: chunks.0, lookahead: lookahead.0 },
            other => unreachable!("skeleton table and constructor disagree on {other}"),
        };
        self.split_spans.push(split.as_ref().map(|(_, s)| *s));
        self.transpose_spans.push(TransposeSpans { chunks: chunks.1, lookahead: lookahead.1 });
        Some(RegionSchedule { skeleton, split: split.map(|(l, _)| l), span: expr.span })
    }

    fn owner(&mut self, stmt: &ast::OwnerStmt) -> Option<OwnerSpec> {
        match &stmt.spec.kind {
            ValueKind::Name(n) => match n.name.as_str() {
                "by_microbatch" => Some(OwnerSpec::ByMicrobatch),
                "round_robin" => Some(OwnerSpec::RoundRobin),
                other => {
                    let choices = crate::algebra::owner::STRATEGIES;
                    let suggestion = did_you_mean(other, choices.iter().copied());
                    self.error(Error::InvalidChoice {
                        span: n.span,
                        what: "owner map".into(),
                        found: other.into(),
                        choices: choices.to_vec(),
                        suggestion,
                    });
                    None
                }
            },
            ValueKind::List(items) => {
                let mut ranks = Vec::new();
                for item in items {
                    match &item.kind {
                        ValueKind::Number(q) => ranks.push(self.count(item.span, q, 0)?),
                        _ => {
                            self.error(Error::WrongType {
                                span: item.span,
                                expected: "a rank number".into(),
                                found: super::fields::describe(item),
                                defined_at: None,
                            });
                            return None;
                        }
                    }
                }
                Some(OwnerSpec::Explicit(ranks))
            }
            _ => unreachable!("grammar: owner is a name or a list"),
        }
    }

    fn targets(&mut self, stmt: &ast::TargetStmt) -> Vec<TargetSpec> {
        let mut out: Vec<TargetSpec> = Vec::new();
        for t in &stmt.targets {
            let name = &t.name.name;
            if !TARGETS.contains(&name.as_str()) {
                let suggestion = did_you_mean(name, TARGETS.iter().copied());
                self.error(Error::UnknownTarget {
                    span: t.name.span,
                    name: name.clone(),
                    suggestion,
                    targets: &TARGETS,
                });
                continue;
            }
            let nearest = match &t.option {
                None => false,
                Some(o) if o.name == "nearest" => true,
                Some(o) => {
                    self.error(Error::InvalidChoice {
                        span: o.span,
                        what: "target option".into(),
                        found: o.name.clone(),
                        choices: vec!["nearest"],
                        suggestion: did_you_mean(&o.name, ["nearest"]),
                    });
                    continue;
                }
            };
            match out.iter_mut().find(|o| &o.name == name) {
                Some(seen) => seen.nearest |= nearest,
                None => out.push(TargetSpec { name: name.clone(), nearest, span: Some(t.span) }),
            }
        }
        out
    }
}

fn source_text(ctx: &Ctx, span: Span) -> String {
    ctx.program.sources.text(span).split_whitespace().collect::<Vec<_>>().join(" ")
}

/// "layers 32..36 of `llm`", for a gap in the cut.
fn describe_layers(model: &Model, offsets: &[u64], gap: std::ops::Range<u64>) -> String {
    let mut pieces = Vec::new();
    for (i, p) in model.parts.iter().enumerate() {
        let (s, e) = (offsets[i], offsets[i] + p.arch.layers());
        let (a, b) = (gap.start.max(s), gap.end.min(e));
        if a < b {
            if a == s && b == e {
                pieces.push(format!("`{}`", p.name));
            } else {
                pieces.push(format!("layers {}..{} of `{}`", a - s, b - s, p.name));
            }
        }
    }
    pieces.join(", ")
}

/// The cut written with its last region extended to the end of the model, when the gap is
/// only at the end: the mechanical fix for a cut that stops early.
fn full_cut(ctx: &Ctx, stmt: &ast::CutStmt, model: &Model, offsets: &[u64], covered: u64) -> Option<String> {
    let last = stmt.regions.last()?;
    let mut text = source_text(ctx, last.span);
    for (i, p) in model.parts.iter().enumerate() {
        let (s, e) = (offsets[i], offsets[i] + p.arch.layers());
        if e <= covered {
            continue;
        }
        if s < covered {
            // The last segment ends inside this part: widen its range to the part's end.
            let seg = last.segments.last()?;
            let range = seg.range.as_ref()?;
            let old = format!("{}[{}..{}]", seg.part.name, range.start, range.end);
            if !text.ends_with(&old) {
                return None;
            }
            text.truncate(text.len() - old.len());
            text.push_str(&if range.start == 0 {
                p.name.clone()
            } else {
                format!("{}[{}..{}]", p.name, range.start, p.arch.layers())
            });
        } else {
            text.push_str(&format!(" + {}", p.name));
        }
    }
    let mut regions: Vec<String> =
        stmt.regions[..stmt.regions.len() - 1].iter().map(|r| source_text(ctx, r.span)).collect();
    regions.push(text);
    Some(format!("cut {};", regions.join(" | ")))
}

use super::rules;

/// `tokens,weight` lines (a header line and `#` comments allowed); `Err` carries the 1-based
/// number of the first bad line.
fn parse_histogram(text: &str) -> Result<Vec<(u64, f64)>, usize> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty()
            || line.starts_with('#')
            || (i == 0 && line.chars().next().is_some_and(|c| c.is_alphabetic()))
        {
            continue;
        }
        let (t, w) = line.split_once(',').ok_or(i + 1)?;
        let tokens: u64 = t.trim().parse().map_err(|_| i + 1)?;
        let weight: f64 = w.trim().parse().map_err(|_| i + 1)?;
        if !(weight.is_finite() && weight > 0.0) {
            return Err(i + 1);
        }
        out.push((tokens, weight));
    }
    if out.is_empty() { Err(1) } else { Ok(out) }
}
