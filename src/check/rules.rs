//! The algebra's validity rules (ALGEBRA.md §3) over a plan whose parts all checked out: one
//! skeleton per region, parameters in range, devices, microbatches, owners, normal form.

use super::Ctx;
use super::spec::Plan;
use crate::algebra::{Layout, OwnerSpec};
use crate::ast;
use crate::error::Error;
use crate::span::Span;

/// The source of the plan's statements, for labels.
pub struct Spans<'a> {
    pub cluster: &'a ast::Section,
    pub batch: &'a ast::Section,
    pub cut: &'a ast::CutStmt,
    pub schedule: &'a ast::ScheduleStmt,
    pub owner: Option<&'a ast::OwnerStmt>,
}

/// The span of `key = …;` in a block, else of the block's keyword.
fn field_span(section: &ast::Section, key: &str) -> Span {
    section.body.entries.iter().find(|e| e.key().name == key).map(|e| e.span()).unwrap_or(section.keyword_span)
}

impl Ctx<'_> {
    pub(super) fn rules(&mut self, plan: &Plan, spans: &Spans) {
        let c = &plan.cluster;
        if c.pp * c.dp * c.tp != c.devices {
            let span =
                field_span(spans.cluster, "pp").to(field_span(spans.cluster, "tp")).to(field_span(spans.cluster, "dp"));
            self.error(Error::DeviceProduct { span, devices: c.devices, pp: c.pp, dp: c.dp, tp: c.tp });
        }
        if !c.dp.is_multiple_of(c.ep) {
            self.error(Error::OutOfRange {
                span: field_span(spans.cluster, "ep"),
                what: "`ep`".into(),
                requirement: format!("a divisor of dp ({})", c.dp),
            });
        }
        let m = plan.batch.microbatches;
        if plan.batch.image_tokens.len() > 1 && plan.batch.image_tokens.len() as u64 != m {
            self.error(Error::OutOfRange {
                span: field_span(spans.batch, "image_tokens"),
                what: "the list of `image_tokens`".into(),
                requirement: format!("one entry per microbatch ({m})"),
            });
        }
        let has_encoder = plan.model.parts.iter().any(|p| p.arch.is_encoder());
        if has_encoder && plan.batch.image_tokens.is_empty() {
            self.error(Error::MissingField {
                span: spans.batch.keyword_span,
                field: "image_tokens".into(),
                context: "`batch`".into(),
                hint: "4096".into(),
            });
        }

        let regions = &plan.cut.regions;
        if plan.schedule.len() != regions.len() {
            self.error(Error::ScheduleArity {
                span: spans.schedule.span,
                cut: spans.cut.span,
                regions: regions.len(),
                skeletons: plan.schedule.len(),
            });
            return;
        }
        let layouts: Vec<Layout> = plan.schedule.iter().map(|s| s.skeleton.layout()).collect();
        let mut adjacent = false;
        for i in 1..regions.len() {
            if layouts[i - 1] == Layout::Replicated && layouts[i] == Layout::Replicated {
                adjacent = true;
                let merged = merged_cut(self, spans.cut, &layouts);
                self.error(Error::AdjacentReplicated {
                    first: spans.cut.regions[i - 1].span,
                    second: spans.cut.regions[i].span,
                    cut: spans.cut.span,
                    merged,
                });
            }
        }
        let any_replicated = layouts.contains(&Layout::Replicated);
        if !adjacent && any_replicated && !layouts.contains(&Layout::Sharded) {
            self.error(Error::ReplicatedWithoutSharded { span: spans.schedule.span });
        }
        match (&plan.owner, spans.owner) {
            (Some(_), Some(stmt)) if !any_replicated => self.error(Error::OwnerWithoutReplicated { span: stmt.span }),
            (Some(OwnerSpec::Explicit(ranks)), Some(stmt)) => self.explicit_owner(ranks, stmt, c.pp, m),
            _ => {}
        }
        let p = c.pp;
        for (i, (region, sched)) in regions.iter().zip(&plan.schedule).enumerate() {
            let skeleton_span = spans.schedule.skeletons[i].span;
            if sched.skeleton.layout() != Layout::Sharded {
                continue;
            }
            let stages = p * u64::from(sched.skeleton.chunks());
            let layers = region.layers.end - region.layers.start;
            if layers < stages {
                self.error(Error::TooFewLayers {
                    span: spans.cut.regions[i].span,
                    region: region.name.clone(),
                    layers,
                    stages,
                });
            }
            if let Some(split) = &sched.split {
                let span = self.split_spans.get(i).copied().flatten().unwrap_or(skeleton_span);
                let sum: u64 = split.iter().sum();
                if split.len() as u64 != stages {
                    self.error(Error::BadSplit {
                        span,
                        message: format!("`split` has {} entries for {stages} stages", split.len()),
                        help: format!(
                            "give one layer count per stage: {p} ranks × {} chunk(s) = {stages}",
                            sched.skeleton.chunks()
                        ),
                    });
                } else if sum != layers {
                    self.error(Error::BadSplit {
                        span,
                        message: format!("`split` sums to {sum} layers, region `{}` has {layers}", region.name),
                        help: format!("make the entries add up to {layers}"),
                    });
                }
            }
            if let Err(e) = sched.skeleton.check_microbatches(p, m) {
                self.error(Error::MicrobatchesIncompatible {
                    span: field_span(spans.batch, "microbatches"),
                    skeleton: skeleton_span,
                    message: e.message,
                    help: e.help,
                });
            }
        }
        if m < p && layouts.contains(&Layout::Sharded) && p > 1 {
            self.error(Error::FewMicrobatches {
                span: field_span(spans.batch, "microbatches"),
                microbatches: m,
                ranks: p,
            });
        }
    }

    fn explicit_owner(&mut self, ranks: &[u64], stmt: &ast::OwnerStmt, p: u64, m: u64) {
        if ranks.len() as u64 != m {
            self.error(Error::BadOwner {
                span: stmt.spec.span,
                message: format!("owner list has {} entries for {m} microbatches", ranks.len()),
                label: format!("expected {m} ranks, one per microbatch"),
                help: "list the owning rank of every microbatch, in microbatch order".into(),
            });
        }
        let ast::ValueKind::List(items) = &stmt.spec.kind else {
            return;
        };
        for (rank, item) in ranks.iter().zip(items) {
            if *rank >= p {
                self.error(Error::BadOwner {
                    span: item.span,
                    message: format!("rank {rank} does not exist"),
                    label: format!("the pipeline has ranks 0..{p}"),
                    help: format!("use a rank below {p}"),
                });
            }
        }
    }
}

/// The cut with every run of adjacent replicated regions joined by `+`.
fn merged_cut(ctx: &Ctx, cut: &ast::CutStmt, layouts: &[Layout]) -> String {
    let mut groups: Vec<String> = Vec::new();
    for (i, region) in cut.regions.iter().enumerate() {
        let text = ctx.program.sources.text(region.span).split_whitespace().collect::<Vec<_>>().join(" ");
        if i > 0 && layouts[i] == Layout::Replicated && layouts[i - 1] == Layout::Replicated {
            let last = groups.last_mut().expect("a previous region");
            last.push_str(" + ");
            last.push_str(&text);
        } else {
            groups.push(text);
        }
    }
    format!("cut {};", groups.join(" | "))
}
