//! The root module as a plan: its sections found once each, the model, cluster and batch
//! checked here, the cut (`cut.rs`) and the schedule, owner and targets (`schedule.rs`)
//! checked beside, then the algebra's rules over all of them (`rules.rs`).

use super::fields::Fields;
use super::{Ctx, rules, schema};
use crate::ast::{self, DefKind, Item, ValueKind};
use crate::error::{Error, FieldError};
use crate::plan::{Arch, Batch, Cluster, Model, Part, Plan, Recompute};
use crate::resolve::DefId;
use crate::span::Span;
use crate::suggest::did_you_mean;

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
        Some(prev) => ctx.error(Error::Field(FieldError::DuplicateSection { span, section, first: first(prev) })),
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
                ctx.error(Error::Field(FieldError::MissingSection { span: file_start, section, example }));
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
        let plan = Plan {
            source: program.sources.get(root.file).name.clone(),
            model: model?,
            cluster: cluster?,
            batch: batch?,
            cut: cut?,
            schedule: schedule?,
            owner,
            targets,
        };
        self.profile_warnings(&plan, s.cluster?);
        Some(plan)
    }

    fn model(&mut self, def: &ast::Definition) -> Option<Model> {
        let mut parts: Vec<Part> = Vec::new();
        let mut complete = true;
        for entry in &def.body.entries {
            let ast::Entry::Field(field) = entry else {
                self.error(Error::Field(FieldError::WrongType {
                    span: entry.span(),
                    expected: "a part `name = architecture;`".into(),
                    found: "a block".into(),
                    defined_at: None,
                }));
                complete = false;
                continue;
            };
            if let Some(first) = parts.iter().find(|p| p.name == field.key.name) {
                self.error(Error::Field(FieldError::DuplicateField {
                    span: field.key.span,
                    field: field.key.name.clone(),
                    first: first.span,
                }));
                complete = false;
                continue;
            }
            match self.part(field, &mut complete) {
                Some(part) => parts.push(part),
                None => complete = false,
            }
        }
        if def.body.entries.is_empty() {
            self.error(Error::Field(FieldError::EmptyModel { span: def.name.span, name: def.name.name.clone() }));
            return None;
        }
        complete.then(|| Model { name: def.name.name.clone(), parts })
    }

    /// One part of the model, `name = architecture;` or with a body of its own attributes and
    /// the architecture's fields it overrides. An unknown attribute clears `complete` but still
    /// gives the part, so a later part of the same name is reported as a duplicate.
    fn part(&mut self, field: &ast::Field, complete: &mut bool) -> Option<Part> {
        let (base, body) = match &field.value.kind {
            ValueKind::Name(n) => (n, None),
            ValueKind::Instance { base, body } => (base, Some(body)),
            _ => {
                let found = super::fields::describe(&field.value);
                self.error(Error::Field(FieldError::WrongType {
                    span: field.value.span,
                    expected: "an architecture name".into(),
                    found,
                    defined_at: None,
                }));
                return None;
            }
        };
        let id = self.reference(0, base, &[DefKind::Encoder, DefKind::Decoder])?;
        let mut arch = self.archs.get(&id).cloned().flatten()?;
        let mut attrs = Fields::default();
        if let Some(body) = body {
            (attrs, arch) = self.part_body(field, id, body, arch, complete)?;
        }
        let recompute = match attrs.choice("recompute") {
            Some("selective") => Recompute::Selective,
            Some("ops") => Recompute::Ops,
            Some("full") => Recompute::Full,
            _ => Recompute::None,
        };
        Some(Part {
            name: field.key.name.clone(),
            arch,
            frozen: attrs.boolean("frozen").unwrap_or(false),
            recompute,
            forward_time: attrs.quantity("forward_time"),
            backward_time: attrs.quantity("backward_time"),
            span: field.key.span,
        })
    }

    /// A part's body: its own attributes (`frozen`, `recompute`, …), and the architecture
    /// rebuilt with the fields the body overrides; `None` when that rebuilt one does not check.
    fn part_body(
        &mut self,
        field: &ast::Field,
        id: DefId,
        body: &ast::Block,
        arch: Arch,
        complete: &mut bool,
    ) -> Option<(Fields, Arch)> {
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
                self.error(Error::Field(FieldError::UnknownField {
                    span: entry.key().span,
                    field: key.clone(),
                    context: "a model part".into(),
                    suggestion,
                }));
                *complete = false;
            }
        }
        let attrs = self.fields(0, &ast::Block { entries: own, span: body.span }, &schema::PART, field.key.span);
        if overrides.is_empty() {
            return Some((attrs, arch));
        }
        let keys: Vec<&str> = overrides.iter().map(|e| e.key().name.as_str()).collect();
        let mut entries: Vec<ast::Entry> =
            def.body.entries.iter().filter(|e| !keys.contains(&e.key().name.as_str())).cloned().collect();
        entries.extend(overrides);
        let merged = ast::Block { entries, span: def.body.span };
        let arch = self.arch_from(id.module, def.kind, &def.name, &merged)?;
        Some((attrs, arch))
    }

    fn cluster(&mut self, sec: &ast::Section) -> Option<Cluster> {
        let f = self.fields(0, &sec.body, &schema::CLUSTER, sec.keyword_span);
        if !f.complete {
            return None;
        }
        let hardware = self.hardware.get(&f.reference("hardware")?).cloned().flatten()?;
        let profile = self.profile(&f).ok()?;
        Some(Cluster {
            hardware,
            devices: f.count("devices")?,
            pp: f.count("pp")?,
            dp: f.count("dp").unwrap_or(1),
            tp: f.count("tp").unwrap_or(1),
            ep: f.count("ep").unwrap_or(1),
            distributed_optimizer: f.boolean("distributed_optimizer").unwrap_or(false),
            shard_weights: f.boolean("shard_weights").unwrap_or(false),
            efficiency: f.fraction("efficiency"),
            overlap_comm: f.boolean("overlap_comm").unwrap_or(true),
            flash_attention: f.boolean("flash_attention").unwrap_or(true),
            fused_kernels: f.boolean("fused_kernels").unwrap_or(true),
            profile,
        })
    }

    fn batch(&mut self, sec: &ast::Section) -> Option<Batch> {
        let f = self.fields(0, &sec.body, &schema::BATCH, sec.keyword_span);
        if !f.complete {
            return None;
        }
        let histogram = match (f.file("image_histogram"), f.span("image_histogram")) {
            (Some((name, text)), Some(span)) => match parse_histogram(name, text) {
                Ok(h) => h,
                Err((what, requirement)) => {
                    self.error(Error::Field(FieldError::OutOfRange { span, what, requirement: requirement.into() }));
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
}

/// `tokens,weight` lines (a first line without digits is a header; `#` comments allowed). A
/// weight may be 0 (a bin nothing falls in), but not every weight. `Err` says what is wrong
/// (`line 3 of `name``) and what it must be.
fn parse_histogram(name: &str, text: &str) -> Result<Vec<(u64, f64)>, (String, &'static str)> {
    let bad = |i: usize, requirement| (format!("line {} of `{name}`", i + 1), requirement);
    let mut out = Vec::new();
    let mut numbered = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || (i == 0 && !line.contains(|c: char| c.is_ascii_digit())) {
            continue;
        }
        let (t, w) = line.split_once(',').ok_or_else(|| bad(i, "`tokens,weight`, two numbers and a comma"))?;
        let tokens: u64 = t.trim().parse().map_err(|_| bad(i, "a whole number of tokens, then `,` and a weight"))?;
        let weight: f64 =
            w.trim().parse().map_err(|_| bad(i, "a number of tokens, then `,` and a number, the weight"))?;
        if !(weight.is_finite() && weight >= 0.0) {
            return Err(bad(i, "a weight of 0 or more"));
        }
        out.push((tokens, weight));
        numbered.push(i + 1);
    }
    let (Some(first), Some(last)) = (numbered.first(), numbered.last()) else {
        return Err((format!("`{name}`"), "at least one `tokens,weight` line"));
    };
    if out.iter().any(|(_, w)| *w > 0.0) {
        return Ok(out);
    }
    let lines = if first == last { format!("line {first}") } else { format!("lines {first} to {last}") };
    Err((format!("every weight of `{name}` ({lines})"), "above 0 on at least one line"))
}
