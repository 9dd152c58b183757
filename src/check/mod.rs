//! The checker: from a loaded [`Program`] to a checked [`Plan`](crate::plan::Plan), or every error found.
//! Definitions are checked in the module that defines them; the plan's own sections, the
//! cut, schedule and owner are checked in the root module, then the algebra's rules (`rules`).

mod cut;
pub mod fields;
mod plan;
mod profile;
pub mod resolved;
mod rules;
mod schedule;
pub mod schema;

use std::collections::{BTreeMap, BTreeSet};

use crate::ast::{DefKind, Item};
use crate::error::{Error, FieldError, ImportError, Warning};
use crate::plan::{Arch, ArchKind, Attention, Decoder, Encoder, Hardware, Link, Mla, Mlp, Moe, Plan};
use crate::resolve::{DefId, Program};
use crate::span::Span;
use fields::Fields;

/// Events per step (stages × microbatches × compute events each) past which a build is
/// refused: about three million instructions, the most a build handles in linear time and a
/// few hundred megabytes (docs/performance.md), so a larger plan gets this diagnostic rather
/// than an out-of-memory kill.
pub const MAX_EVENTS: u64 = 1_000_000;

/// Where `transpose`'s `chunks` and `lookahead` were written, for the rules that need the cut.
#[derive(Clone, Copy, Default)]
pub(super) struct TransposeSpans {
    pub chunks: Option<Span>,
    pub lookahead: Option<Span>,
}

/// Arguments only `transpose` takes: named on another skeleton, they get their own code.
pub(super) const TRANSPOSE_ONLY: &[&str] = &["chunks", "lookahead"];

pub struct Ctx<'a> {
    pub program: &'a Program,
    /// For data files a plan names (`image_histogram`); `None` reads none.
    pub loader: Option<&'a dyn crate::resolve::loader::Loader>,
    pub errors: Vec<Error>,
    /// `use` items that some reference went through.
    pub used: BTreeSet<Span>,
    hardware: BTreeMap<DefId, Option<Hardware>>,
    archs: BTreeMap<DefId, Option<Arch>>,
    /// The span of each skeleton's `split = […]`, by region, for labels.
    split_spans: Vec<Option<Span>>,
    /// Per skeleton of the schedule: where `transpose`'s `chunks` and `lookahead` were written.
    transpose_spans: Vec<TransposeSpans>,
}

impl Ctx<'_> {
    pub fn error(&mut self, e: Error) {
        self.errors.push(e);
    }
}

/// Checks a loaded program. Returns the plan when the root module is a complete, valid plan;
/// `None` when it has errors or is a library of definitions only.
pub fn check(program: &Program, loader: Option<&dyn crate::resolve::loader::Loader>) -> (Option<Plan>, Vec<Error>) {
    let mut ctx = Ctx::with_definitions(program, loader);
    for (m, module) in program.modules.iter().enumerate().skip(1) {
        if let Some(ast) = &module.ast {
            for item in &ast.items {
                if let Some(what) = plan_item(item) {
                    ctx.error(Error::Import(ImportError::PlanInLibrary { span: item.span(), what }));
                }
            }
        }
        let _ = m;
    }
    let plan = if program.root().ast.is_some() { ctx.plan() } else { None };
    ctx.unused_imports();
    let Ctx { errors, .. } = ctx;
    let plan = plan.filter(|_| errors.iter().all(Error::is_warning));
    (plan, errors)
}

/// Every hardware and architecture definition of the program that checks, in source order:
/// what a library of definitions amounts to (`mpipec std` lists the standard library's).
pub fn definitions(program: &Program) -> (Vec<Hardware>, Vec<Arch>) {
    let ctx = Ctx::with_definitions(program, None);
    (ctx.hardware.into_values().flatten().collect(), ctx.archs.into_values().flatten().collect())
}

impl<'a> Ctx<'a> {
    /// A checker with every definition of the program built (or its errors recorded).
    fn with_definitions(program: &'a Program, loader: Option<&'a dyn crate::resolve::loader::Loader>) -> Ctx<'a> {
        let mut ctx = Ctx {
            program,
            loader,
            errors: Vec::new(),
            used: BTreeSet::new(),
            hardware: BTreeMap::new(),
            archs: BTreeMap::new(),
            split_spans: Vec::new(),
            transpose_spans: Vec::new(),
        };
        for (m, module) in program.modules.iter().enumerate() {
            let Some(ast) = &module.ast else { continue };
            for (i, item) in ast.items.iter().enumerate() {
                let id = DefId { module: m, item: i };
                match item {
                    Item::Definition(d) if d.kind == DefKind::Hardware => {
                        let built = ctx.build_hardware(id);
                        ctx.hardware.insert(id, built);
                    }
                    Item::Definition(d) if d.kind != DefKind::Model => {
                        let built = ctx.build_arch(id);
                        ctx.archs.insert(id, built);
                    }
                    _ => {}
                }
            }
        }
        ctx
    }
}

/// The keyword of an item only a plan may hold, for "`cut` in an imported file".
fn plan_item(item: &Item) -> Option<&'static str> {
    match item {
        Item::Definition(d) if d.kind == DefKind::Model => Some("model"),
        Item::Section(s) => Some(s.kind.keyword()),
        Item::Cut(_) => Some("cut"),
        Item::Schedule(_) => Some("schedule"),
        Item::Owner(_) => Some("owner"),
        Item::Target(_) => Some("target"),
        Item::Use(_) | Item::Definition(_) => None,
    }
}

/// The standard-library module and name of a definition of `kinds` called `name`, or else
/// of the one whose name is closest, for "import it" help: names not imported count too.
pub fn stdlib_home(name: &str, kinds: &[DefKind]) -> Option<(&'static str, String)> {
    let of_kind = || crate::resolve::stdlib::index().iter().filter(|(_, _, k)| kinds.contains(k));
    let found = of_kind()
        .find(|(_, n, _)| n == name)
        .map(|(_, n, _)| n.clone())
        .or_else(|| crate::suggest::did_you_mean_or_longer(name, of_kind().map(|(_, n, _)| n.as_str())))?;
    of_kind().find(|(_, n, _)| *n == found).map(|(m, n, _)| (*m, n.clone()))
}

impl Ctx<'_> {
    fn definition_fields(&mut self, id: DefId) -> Fields {
        let def = self.program.definition(id);
        self.fields(id.module, &def.body, schema::of_definition(def.kind), def.name.span)
    }

    fn build_hardware(&mut self, id: DefId) -> Option<Hardware> {
        let f = self.definition_fields(id);
        if !f.complete {
            return None;
        }
        let link = |b: &Fields| Some(Link { alpha: b.quantity("alpha")?, beta: b.quantity("beta")? });
        Some(Hardware {
            name: self.program.definition(id).name.name.clone(),
            peak_bf16: f.quantity("peak_bf16")?,
            hbm_bytes: f.quantity("hbm")?,
            hbm_bandwidth: f.quantity("hbm_bandwidth")?,
            compute_units: f.count("compute_units"),
            matmul_efficiency: f.fraction("matmul_efficiency"),
            attention_efficiency: f.fraction("attention_efficiency"),
            devices_per_node: f.count("devices_per_node")?,
            intra_node: link(f.block("intra_node")?)?,
            inter_node: link(f.block("inter_node")?)?,
        })
    }

    fn build_arch(&mut self, id: DefId) -> Option<Arch> {
        let def = self.program.definition(id);
        self.arch_from(id.module, def.kind, &def.name, &def.body)
    }

    /// An architecture from the fields of `body`: a definition's own, or a definition's with
    /// a model part's overrides (`vit = siglip { out_hidden = 5120; }`) in their place.
    pub(crate) fn arch_from(
        &mut self,
        module: usize,
        kind: DefKind,
        name: &crate::ast::Ident,
        body: &crate::ast::Block,
    ) -> Option<Arch> {
        let f = self.fields(module, body, schema::of_definition(kind), name.span);
        if !f.complete {
            return None;
        }
        let attention = self.attention(&f, kind, name.span)?;
        let kind = match kind {
            DefKind::Encoder => ArchKind::Encoder(self.encoder(&f, attention, name.span)?),
            _ => ArchKind::Decoder(self.decoder(&f, attention, name.span)?),
        };
        Some(Arch { name: name.name.clone(), kind })
    }

    /// The attention of an architecture: `kv_heads` must divide `heads`, and `hidden` must
    /// split evenly into heads unless `head_dim` says otherwise.
    fn attention(&mut self, f: &Fields, kind: DefKind, name_span: Span) -> Option<Attention> {
        let hidden = f.count("hidden")?;
        let heads = f.count("heads")?;
        let attention = Attention {
            heads,
            kv_heads: f.count("kv_heads").unwrap_or(heads),
            head_dim: f.count("head_dim").unwrap_or(hidden / heads),
        };
        if attention.kv_heads > heads || heads % attention.kv_heads != 0 {
            let entry = f.span("kv_heads");
            self.error(Error::Field(FieldError::NotADivisor {
                span: entry.unwrap_or(name_span),
                entry: entry.is_some(),
                field: "kv_heads",
                of: format!("`heads` ({heads})"),
                nearest: crate::plan::nearest_divisor(heads, attention.kv_heads),
            }));
            return None;
        }
        if f.count("head_dim").is_none() && hidden % heads != 0 {
            self.error(Error::Field(FieldError::MissingField {
                span: name_span,
                field: "head_dim".into(),
                context: schema::of_definition(kind).context.into(),
                hint: "128;".into(),
            }));
            return None;
        }
        Some(attention)
    }

    fn encoder(&mut self, f: &Fields, attention: Attention, name_span: Span) -> Option<Encoder> {
        let window = match (f.count("window"), f.count("full_attention_layers")) {
            (Some(w), full) => Some((w, full.unwrap_or(0))),
            (None, Some(_)) => {
                let span = f.span("full_attention_layers").unwrap_or(name_span);
                self.error(Error::Field(FieldError::MissingField {
                    span,
                    field: "window".into(),
                    context: "`encoder`".into(),
                    hint: "64;".into(),
                }));
                return None;
            }
            (None, None) => None,
        };
        let hidden = f.count("hidden")?;
        Some(Encoder {
            layers: f.count("layers")?,
            hidden,
            ffn: f.count("ffn")?,
            attention,
            mlp: mlp(f, Mlp::Gelu),
            patch: f.count("patch")?,
            temporal_patch: f.count("temporal_patch").unwrap_or(1),
            merge: f.count("merge").unwrap_or(1),
            out_hidden: f.count("out_hidden").unwrap_or(hidden),
            window,
        })
    }

    fn decoder(&mut self, f: &Fields, attention: Attention, name_span: Span) -> Option<Decoder> {
        let moe = f.block("moe").map(|b| {
            Some(Moe {
                experts: b.count("experts")?,
                top_k: b.count("top_k")?,
                shared_experts: b.count("shared_experts").unwrap_or(0),
                expert_ffn: b.count("expert_ffn")?,
                dense_layers: b.count("dense_layers").unwrap_or(0),
            })
        });
        let mla = f.block("mla").map(|b| {
            Some(Mla {
                q_lora_rank: b.count("q_lora_rank").unwrap_or(0),
                kv_lora_rank: b.count("kv_lora_rank")?,
                rope_head_dim: b.count("rope_head_dim")?,
                nope_head_dim: b.count("nope_head_dim")?,
                v_head_dim: b.count("v_head_dim")?,
            })
        });
        let (moe, mla) = match (moe, mla) {
            (Some(None), _) | (_, Some(None)) => return None,
            (moe, mla) => (moe.flatten(), mla.flatten()),
        };
        if let Some(m) = &moe
            && m.top_k > m.experts
        {
            let span = f.block("moe").and_then(|b| b.span("top_k")).unwrap_or(name_span);
            self.error(Error::Field(FieldError::OutOfRange {
                span,
                what: "`top_k`".into(),
                requirement: format!("at most experts ({})", m.experts),
            }));
            return None;
        }
        Some(Decoder {
            layers: f.count("layers")?,
            hidden: f.count("hidden")?,
            ffn: f.count("ffn")?,
            attention,
            vocab: f.count("vocab")?,
            mlp: mlp(f, Mlp::SwiGlu),
            tied_embeddings: f.boolean("tied_embeddings").unwrap_or(false),
            moe,
            mla,
        })
    }

    fn unused_imports(&mut self) {
        let mut warnings = Vec::new();
        for module in &self.program.modules {
            for (name, binding) in &module.scope {
                if let Some(span) = binding.import
                    && !self.used.contains(&span)
                {
                    warnings.push(Error::Warning(Warning::UnusedImport { span, name: name.clone() }));
                }
            }
        }
        self.errors.extend(warnings);
    }
}

/// The MLP an architecture declares, or its kind's usual one.
fn mlp(f: &Fields, default: Mlp) -> Mlp {
    match f.choice("mlp") {
        Some("gelu") => Mlp::Gelu,
        Some("swiglu") => Mlp::SwiGlu,
        _ => default,
    }
}
