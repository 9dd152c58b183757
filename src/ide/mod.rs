//! What an editor asks about a position in a plan: what is there (hover), where it is defined
//! (go to definition), what could be written there (completion). Pure functions over a checked
//! program; the language server (`mpipec lsp`) carries them over JSON-RPC.

pub mod diagnostics;

use std::collections::BTreeMap;

use crate::algebra::{owner, skeleton};
use crate::ast::{self, DefKind, Entry, Item, ValueKind};
use crate::check::schema::{self, Schema};
use crate::driver::{Built, Compiled};
use crate::resolve::{Program, stdlib};
use crate::span::{FileId, Span};

/// What a name at a position stands for.
#[derive(Clone, Debug, PartialEq)]
enum Target {
    /// A reference to a definition, looked up in the scope of `module`.
    Ref {
        module: usize,
        name: String,
    },
    Part(String),
    Skeleton(String),
    Owner(String),
    Field {
        schema: &'static Schema,
        key: String,
    },
}

/// Every interesting identifier of a module with what it stands for.
fn targets(program: &Program, module: usize) -> Vec<(Span, Target)> {
    let mut out = Vec::new();
    let Some(ast) = &program.modules[module].ast else { return out };
    let r = |out: &mut Vec<(Span, Target)>, id: &ast::Ident| {
        out.push((id.span, Target::Ref { module, name: id.name.clone() }))
    };
    for item in &ast.items {
        match item {
            Item::Use(u) => {
                for i in &u.items {
                    r(&mut out, i);
                }
            }
            Item::Definition(d) => {
                r(&mut out, &d.name);
                if d.kind == DefKind::Model {
                    for e in &d.body.entries {
                        if let Entry::Field(f) = e {
                            out.push((f.key.span, Target::Part(f.key.name.clone())));
                            match &f.value.kind {
                                ValueKind::Name(n) => r(&mut out, n),
                                ValueKind::Instance { base, body } => {
                                    r(&mut out, base);
                                    block(&mut out, body, &schema::PART);
                                }
                                _ => {}
                            }
                        }
                    }
                } else {
                    block(&mut out, &d.body, schema::of_definition(d.kind));
                }
            }
            Item::Section(s) => {
                let sch = match s.kind {
                    ast::SectionKind::Cluster => &schema::CLUSTER,
                    ast::SectionKind::Batch => &schema::BATCH,
                };
                block(&mut out, &s.body, sch);
                for e in &s.body.entries {
                    if let Entry::Field(ast::Field { value: ast::Value { kind: ValueKind::Name(n), .. }, .. }) = e {
                        r(&mut out, n);
                    }
                }
            }
            Item::Cut(c) => {
                for region in &c.regions {
                    for seg in &region.segments {
                        out.push((seg.part.span, Target::Part(seg.part.name.clone())));
                    }
                }
            }
            Item::Schedule(s) => {
                for k in &s.skeletons {
                    out.push((k.name.span, Target::Skeleton(k.name.name.clone())));
                }
            }
            Item::Owner(o) => {
                if let ValueKind::Name(n) = &o.spec.kind {
                    out.push((n.span, Target::Owner(n.name.clone())));
                }
            }
            Item::Target(_) => {}
        }
    }
    out
}

fn block(out: &mut Vec<(Span, Target)>, body: &ast::Block, sch: &'static Schema) {
    for e in &body.entries {
        out.push((e.key().span, Target::Field { schema: sch, key: e.key().name.clone() }));
        if let Entry::Block(b) = e
            && let Some(schema::Ty::Block(inner)) = sch.field(&b.key.name).map(|f| f.ty)
        {
            block(out, &b.body, inner);
        }
    }
}

fn target_at(program: &Program, file: FileId, offset: usize) -> Option<(Span, Target)> {
    let module = program.module_of_file(file)?;
    targets(program, module).into_iter().find(|(s, _)| s.start as usize <= offset && offset <= s.end as usize)
}

/// Markdown describing what is at `offset` of `file`; a part's placement comes from
/// `placements`, the last finished build's, when there is one.
pub fn hover(
    checked: &Compiled,
    placements: Option<&Placements>,
    file: FileId,
    offset: usize,
) -> Option<(Span, String)> {
    let program = &checked.program;
    let (span, target) = target_at(program, file, offset)?;
    let text = match target {
        Target::Skeleton(name) => {
            let def = skeleton::lookup(&name)?;
            let params: Vec<String> = def.params.iter().map(|p| format!("- `{}`: {}", p.name, p.doc)).collect();
            format!("**{}** — {} skeleton\n\n{}\n\n{}", def.name, def.layout, def.doc, params.join("\n"))
        }
        Target::Owner(name) => match name.as_str() {
            "by_microbatch" => "**by_microbatch** — owner map\n\nEach microbatch's encode on the rank where it is least exposed: slot by slot into warmup slack, balanced against each rank's slack by the cost model; the fastest of the greedy min-max map and the round-robin maps on the simulated step.".to_string(),
            "round_robin" => "**round_robin** — owner map\n\nMicrobatch m on rank m mod P (what public HyperParallel code ships).".to_string(),
            _ => return None,
        },
        Target::Field { schema, key } => {
            let f = schema.field(&key)?;
            format!("**{}** in {} — {}{}\n\n{}", f.name, schema.context, f.ty.describe(), if f.required { " (required)" } else { "" }, f.doc)
        }
        Target::Part(name) => part_hover(checked, placements, &name)?,
        Target::Ref { module, name } => {
            let binding = program.lookup(module, &name)?;
            let def = program.definition(binding.def);
            let source = program.sources.text(def.span);
            let from = &program.sources.get(def.span.file).name;
            format!("**{} {}** — defined in `{}`\n\n```mpipe\n{}\n```", def.kind.keyword(), def.name.name, from, source)
        }
    };
    Some((span, text))
}

/// What a finished build says of each part: per part name, where its regions went (layout,
/// skeleton, stages and owners), as hover shows it. Made once per build, off the editor's
/// path, so a hover never builds.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Placements(BTreeMap<String, String>);

impl Placements {
    pub fn of(built: &Built) -> Placements {
        let (plan, ir) = (built.plan(), &built.derived.ir);
        let mut out = BTreeMap::new();
        for (index, part) in plan.model.parts.iter().enumerate() {
            let mut text = String::new();
            for (i, region) in ir.regions.iter().enumerate() {
                if !plan.cut.regions[i].segments.iter().any(|(p, _)| *p == index) {
                    continue;
                }
                text.push_str(&format!(
                    "\n\nregion `{}`: {} ({}), layers {}..{}\n",
                    region.name, region.layout, region.skeleton, region.layers[0], region.layers[1]
                ));
                for s in ir.stages.iter().filter(|s| s.region == region.name) {
                    let on = s.rank.map_or("every rank".to_string(), |r| format!("rank {r}"));
                    text.push_str(&format!("\n- stage {} on {}: layers {}..{}", s.id, on, s.layers[0], s.layers[1]));
                }
                if let Some(owners) = ir.owner.get(&region.name) {
                    let list: Vec<String> = owners.iter().map(u32::to_string).collect();
                    text.push_str(&format!("\n\nowners (microbatch → rank): {}", list.join(" ")));
                }
            }
            out.insert(part.name.clone(), text);
        }
        Placements(out)
    }
}

/// A part, as the plan declares it and, from the last finished build, where it was placed.
fn part_hover(checked: &Compiled, placements: Option<&Placements>, name: &str) -> Option<String> {
    let plan = checked.plan.as_ref()?;
    let part = plan.model.parts.iter().find(|p| p.name == name)?;
    let mut text = format!(
        "**{}** = `{}` — {} layers{}",
        part.name,
        part.arch.name,
        part.arch.layers(),
        if part.frozen { ", frozen" } else { "" }
    );
    if let Some(placed) = placements.and_then(|p| p.0.get(name)) {
        text.push_str(placed);
    }
    Some(text)
}

/// Where the definition of what is at `offset` of `file` is.
pub fn definition(checked: &Compiled, file: FileId, offset: usize) -> Option<Span> {
    let program = &checked.program;
    let (_, target) = target_at(program, file, offset)?;
    match target {
        Target::Ref { module, name } => {
            let binding = program.lookup(module, &name)?;
            Some(program.definition(binding.def).name.span)
        }
        Target::Part(name) => {
            let ast = program.root().ast.as_ref()?;
            ast.items.iter().find_map(|i| match i {
                Item::Definition(d) if d.kind == DefKind::Model => {
                    d.body.entries.iter().find(|e| e.key().name == name).map(|e| e.key().span)
                }
                _ => None,
            })
        }
        _ => None,
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompletionKind {
    Keyword,
    Skeleton,
    Owner,
    Field,
    Name,
    Module,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Completion {
    pub label: String,
    pub kind: CompletionKind,
    pub detail: String,
}

const KEYWORDS: &[&str] =
    &["use", "hardware", "encoder", "decoder", "model", "cluster", "batch", "cut", "schedule", "owner", "target"];

/// The names worth offering at `offset` of `text`, judged from the text before it.
pub fn completions(checked: Option<&Compiled>, file: FileId, text: &str, offset: usize) -> Vec<Completion> {
    let offset = offset.min(text.len());
    let before = &text[..offset];
    let line = before.rsplit('\n').next().unwrap_or("");
    let word_start = line.trim_end_matches(|c: char| c.is_alphanumeric() || c == '_').len();
    let prefix = &line[word_start..];
    let head = line[..word_start].trim_start();
    let item =
        |label: &str, kind, detail: &str| Completion { label: label.to_string(), kind, detail: detail.to_string() };
    let mut out = Vec::new();
    if let Some(rest) = head.strip_prefix("use ") {
        let path = rest.trim_end_matches('{').trim_end_matches(", ").trim_end_matches(',').trim();
        match path.trim_end_matches("::") {
            "" | "std" => {
                for m in stdlib::module_names() {
                    out.push(item(m.trim_start_matches("std::"), CompletionKind::Module, m));
                }
            }
            module => {
                let module = module.trim_end_matches('{').trim_end_matches("::");
                for (m, name, kind) in stdlib::index() {
                    if *m == module || module.ends_with(m.trim_start_matches("std::")) {
                        out.push(item(name, CompletionKind::Name, kind.keyword()));
                    }
                }
            }
        }
    } else if head.starts_with("schedule") {
        for s in skeleton::SKELETONS {
            out.push(item(s.name, CompletionKind::Skeleton, s.doc));
        }
    } else if head.starts_with("owner") {
        for o in owner::STRATEGIES {
            out.push(item(o, CompletionKind::Owner, "owner map"));
        }
    } else if head.ends_with('=') || head.contains("= ") {
        // A value: names in scope.
        if let Some(c) = checked
            && let Some(m) = c.program.module_of_file(file)
        {
            for (name, b) in &c.program.modules[m].scope {
                out.push(item(name, CompletionKind::Name, c.program.definition(b.def).kind.keyword()));
            }
        }
    } else {
        match enclosing_block(before) {
            Some(schema) => {
                for f in schema.fields {
                    out.push(item(f.name, CompletionKind::Field, f.doc));
                }
            }
            None => {
                for k in KEYWORDS {
                    out.push(item(k, CompletionKind::Keyword, "keyword"));
                }
            }
        }
    }
    out.retain(|c| c.label.starts_with(prefix));
    out.sort_by(|a, b| a.label.cmp(&b.label));
    out.dedup_by(|a, b| a.label == b.label);
    out
}

/// The schema of the innermost block the text ends inside, from the words that opened it.
fn enclosing_block(before: &str) -> Option<&'static Schema> {
    let mut stack: Vec<&str> = Vec::new();
    let (mut previous, mut last) = ("", "");
    let mut word_start = None;
    for (i, c) in before.char_indices() {
        if c.is_alphanumeric() || c == '_' {
            word_start.get_or_insert(i);
            continue;
        }
        if let Some(s) = word_start.take() {
            previous = last;
            last = &before[s..i];
        }
        match c {
            '{' => stack.push(if matches!(previous, "hardware" | "encoder" | "decoder" | "model") {
                previous
            } else {
                last
            }),
            '}' => {
                stack.pop();
            }
            _ => {}
        }
    }
    let opener = *stack.last()?;
    let top = stack.first().copied().unwrap_or("");
    Some(match (opener, stack.len()) {
        ("cluster", 1) => &schema::CLUSTER,
        ("batch", 1) => &schema::BATCH,
        ("hardware", 1) => &schema::HARDWARE,
        ("encoder", 1) => &schema::ENCODER,
        ("decoder", 1) => &schema::DECODER,
        (_, 1) => return None,
        ("intra_node" | "inter_node", _) => &schema::LINK,
        ("moe", _) => &schema::MOE,
        ("mla", _) => &schema::MLA,
        _ if top == "model" => &schema::PART,
        _ => return None,
    })
}
