//! The algebra's validity rules (docs/algebra.md, "Skeletons"): one skeleton per region, parameters in
//! range, devices, microbatches, owners, normal form. Each rule runs as soon as the pieces
//! it reads checked out, so a mistake in the cut does not hide one in the cluster.

use super::Ctx;
use crate::algebra::skeleton::body_skeleton;
use crate::algebra::{Chunks, Cut, Layout, OwnerSpec, Region, Skeleton};
use crate::ast;
use crate::error::{ClusterError, Error, FieldError, ScheduleError, Warning};
use crate::plan::{Batch, Cluster, Model, RegionSchedule, gcd, nearest_divisor};
use crate::span::Span;

/// What checked out of a plan, each checked value with its source.
pub struct Parts<'a> {
    pub model: Option<&'a Model>,
    pub cluster: Option<(&'a Cluster, &'a ast::Section)>,
    pub batch: Option<(&'a Batch, &'a ast::Section)>,
    /// The statement, and the cut when it checked out.
    pub cut: Option<(Option<&'a Cut>, &'a ast::CutStmt)>,
    pub schedule: Option<(&'a [RegionSchedule], &'a ast::ScheduleStmt)>,
    pub owner: Option<(&'a OwnerSpec, &'a ast::OwnerStmt)>,
}

/// The span of `key = …;` in a section, if written.
fn field_span(section: &ast::Section, key: &str) -> Option<Span> {
    section.body.entries.iter().find(|e| e.key().name == key).map(|e| e.span())
}

impl Ctx<'_> {
    pub(super) fn rules(&mut self, parts: &Parts) {
        if let Some((cluster, section)) = parts.cluster {
            self.cluster_rules(cluster, section);
        }
        if let Some((batch, section)) = parts.batch {
            self.batch_rules(batch, section, parts.model);
        }
        let (Some((cut, cut_stmt)), Some((schedule, schedule_stmt))) = (parts.cut, parts.schedule) else { return };
        if cut_stmt.regions.len() != schedule_stmt.skeletons.len() {
            self.error(Error::Schedule(ScheduleError::ScheduleArity {
                span: schedule_stmt.span,
                cut: cut_stmt.span,
                regions: cut_stmt.regions.len(),
                skeletons: schedule_stmt.skeletons.len(),
            }));
            return;
        }
        let layouts: Vec<Layout> = schedule.iter().map(|s| s.skeleton.layout()).collect();
        self.layout_rules(&layouts, cut_stmt, schedule_stmt, parts.owner.map(|(_, stmt)| stmt));
        self.arrangement_rules(schedule, cut_stmt, schedule_stmt);
        if let Some(cut) = cut {
            self.transpose_rules(schedule, cut, parts.model);
        }
        let Some((cluster, _)) = parts.cluster else { return };
        let Some((batch, batch_section)) = parts.batch else { return };
        let (p, m) = (cluster.pp, batch.microbatches);
        let microbatch_span = field_span(batch_section, "microbatches").unwrap_or(batch_section.keyword_span);
        if let Some((OwnerSpec::Explicit(ranks), stmt)) = parts.owner {
            self.explicit_owner(ranks, stmt, p, m);
        }
        for (i, sched) in schedule.iter().enumerate() {
            if sched.skeleton.layout() != Layout::Sharded {
                continue;
            }
            let skeleton_span = schedule_stmt.skeletons[i].span;
            if let Some(cut) = cut {
                let split_span = self.split_spans[i].unwrap_or(skeleton_span);
                self.errors.extend(stage_rules(&cut.regions[i], sched, p, cut_stmt.regions[i].span, split_span));
            }
            self.errors.extend(microbatches(sched.skeleton, (p, m), microbatch_span, skeleton_span));
        }
        self.errors.extend(body_rules(schedule, (p, m), microbatch_span, schedule_stmt.span));
        if m < p && layouts.contains(&Layout::Sharded) {
            self.error(Error::Warning(Warning::FewMicrobatches { span: microbatch_span, microbatches: m, ranks: p }));
        }
    }

    /// `chunks` at most the region's layers; `lookahead` only where nothing in the region
    /// trains (its next-step features must not depend on this step's update).
    fn transpose_rules(&mut self, schedule: &[RegionSchedule], cut: &Cut, model: Option<&Model>) {
        for (i, sched) in schedule.iter().enumerate() {
            let crate::algebra::Skeleton::Transpose { chunks, lookahead, fill } = sched.skeleton else { continue };
            let spans = self.transpose_spans.get(i).copied().unwrap_or_default();
            if let (true, crate::algebra::Fill::Prefix, Some(span)) = (lookahead, fill, spans.lookahead) {
                self.error(Error::Schedule(ScheduleError::LookaheadPrefix { span, skeleton: sched.span }));
            }
            let region = &cut.regions[i];
            if let Some(span) = spans.chunks {
                self.errors.extend(chunks_rule(chunks, region, span));
            }
            if let (Some(model), Some(span)) = (model, spans.lookahead) {
                self.errors.extend(lookahead_trainable(lookahead, region, model, span));
            }
        }
    }

    /// What derive supports: replicated regions only at the ends of the cut, and one body
    /// skeleton for all sharded regions.
    fn arrangement_rules(&mut self, schedule: &[RegionSchedule], cut: &ast::CutStmt, stmt: &ast::ScheduleStmt) {
        let sharded_at = |i: usize| schedule.get(i).is_some_and(|s| s.skeleton.layout() == Layout::Sharded);
        for (i, s) in schedule.iter().enumerate() {
            if i > 0 && s.skeleton.layout() == Layout::Replicated && sharded_at(i - 1) && sharded_at(i + 1) {
                self.error(replicated_inside(cut.regions[i].span));
            }
        }
        let sharded = sharded_skeletons(schedule);
        if sharded.len() > 1 && body_skeleton(&sharded).is_none() {
            let spans: Vec<Span> = schedule
                .iter()
                .zip(&stmt.skeletons)
                .filter(|(s, _)| s.skeleton.layout() == Layout::Sharded)
                .map(|(_, e)| e.span)
                .collect();
            self.error(mixed_body(spans[1..].iter().copied().fold(spans[1], Span::to), sharded[0]));
        }
    }

    fn cluster_rules(&mut self, c: &Cluster, section: &ast::Section) {
        if u128::from(c.pp) * u128::from(c.dp) * u128::from(c.tp) != u128::from(c.devices) {
            // One label over the fields written in the same file (a `--set` lives in its own).
            let spans: Vec<Span> = ["pp", "dp", "tp"].iter().filter_map(|k| field_span(section, k)).collect();
            let span = spans
                .iter()
                .copied()
                .filter(|s| s.file == spans[0].file)
                .reduce(Span::to)
                .unwrap_or(section.keyword_span);
            self.error(Error::Cluster(ClusterError::DeviceProduct {
                span,
                devices: c.devices,
                pp: c.pp,
                dp: c.dp,
                tp: c.tp,
            }));
        }
        if !c.dp.is_multiple_of(c.ep) {
            let entry = field_span(section, "ep");
            self.error(Error::Field(FieldError::NotADivisor {
                span: entry.unwrap_or(section.keyword_span),
                entry: entry.is_some(),
                field: "ep",
                of: format!("`dp` ({})", c.dp),
                nearest: nearest_divisor(c.dp, c.ep),
            }));
        }
    }

    fn batch_rules(&mut self, batch: &Batch, section: &ast::Section, model: Option<&Model>) {
        let m = batch.microbatches;
        if batch.image_tokens.len() > 1 && batch.image_tokens.len() as u64 != m {
            self.error(Error::Field(FieldError::OutOfRange {
                span: field_span(section, "image_tokens").unwrap_or(section.keyword_span),
                what: "the list of `image_tokens`".into(),
                requirement: format!("one entry per microbatch ({m})"),
            }));
        }
        if let Some(&tokens) = batch.image_tokens.iter().find(|t| !t.is_multiple_of(batch.images)) {
            // A divisor of every microbatch's image tokens, nearest the count written.
            let all = batch.image_tokens.iter().fold(0, |g, &t| gcd(g, t));
            let entry = field_span(section, "images");
            self.error(Error::Field(FieldError::NotADivisor {
                span: entry.unwrap_or(section.keyword_span),
                entry: entry.is_some(),
                field: "images",
                of: format!("`image_tokens` ({tokens})"),
                nearest: nearest_divisor(all, batch.images),
            }));
        }
        let has_encoder = model.is_some_and(|model| model.parts.iter().any(|p| p.arch.is_encoder()));
        if has_encoder && batch.image_tokens.is_empty() {
            self.error(Error::Field(FieldError::MissingField {
                span: section.keyword_span,
                field: "image_tokens".into(),
                context: "`batch`".into(),
                hint: "4096; // encoder tokens per sequence".into(),
            }));
        }
    }

    /// Normal form, a sharded neighbour for replicated regions, and `owner` only with one.
    fn layout_rules(
        &mut self,
        layouts: &[Layout],
        cut: &ast::CutStmt,
        schedule: &ast::ScheduleStmt,
        owner: Option<&ast::OwnerStmt>,
    ) {
        let mut adjacent = false;
        for i in 1..layouts.len() {
            if layouts[i - 1] == Layout::Replicated && layouts[i] == Layout::Replicated {
                adjacent = true;
                let merged = merged_cut(self, cut, layouts);
                let fix = normal_form_fix(self, (cut, &merged), schedule, layouts);
                let (first, second) = (cut.regions[i - 1].span, cut.regions[i].span);
                self.error(Error::Schedule(ScheduleError::AdjacentReplicated { first, second, merged, fix }));
            }
        }
        let any_replicated = layouts.contains(&Layout::Replicated);
        if !adjacent && any_replicated && !layouts.contains(&Layout::Sharded) {
            self.error(Error::Schedule(ScheduleError::ReplicatedWithoutSharded { span: schedule.span }));
        }
        if let Some(stmt) = owner.filter(|_| !any_replicated) {
            self.error(Error::Schedule(ScheduleError::OwnerWithoutReplicated { span: stmt.span }));
        }
    }

    fn explicit_owner(&mut self, ranks: &[u64], stmt: &ast::OwnerStmt, p: u64, m: u64) {
        if ranks.len() as u64 != m {
            self.error(Error::Schedule(ScheduleError::BadOwner {
                span: stmt.spec.span,
                message: format!("owner list has {} entries for {m} microbatches", ranks.len()),
                label: format!("expected {m} ranks, one per microbatch"),
                help: "list the owning rank of every microbatch, in microbatch order".into(),
            }));
        }
        let ast::ValueKind::List(items) = &stmt.spec.kind else { return };
        for (rank, item) in ranks.iter().zip(items) {
            self.errors.extend(owner_rank(*rank, p, item.span));
        }
    }
}

/// A sharded region's stages: enough layers, and a pinned split that fits.
pub(super) fn stage_rules(
    region: &crate::algebra::Region,
    sched: &RegionSchedule,
    p: u64,
    region_span: Span,
    split_span: Span,
) -> Vec<Error> {
    let mut errors = Vec::new();
    let chunks = u64::from(sched.skeleton.chunks());
    let stages = p * chunks;
    let layers = region.layers.end - region.layers.start;
    if layers < stages {
        errors.push(Error::Schedule(ScheduleError::TooFewLayers {
            span: region_span,
            region: region.name.clone(),
            layers,
            stages,
        }));
    }
    let Some(split) = &sched.split else { return errors };
    let sum: u64 = split.iter().sum();
    if split.len() as u64 != stages {
        errors.push(Error::Schedule(ScheduleError::BadSplit {
            span: split_span,
            message: format!("`split` has {} entries for {stages} stages", split.len()),
            help: format!(
                "give one layer count per stage: {p} ranks × {} = {stages}",
                crate::error::count(chunks, "chunk")
            ),
        }));
    } else if sum != layers {
        errors.push(Error::Schedule(ScheduleError::BadSplit {
            span: split_span,
            message: format!("`split` sums to {sum} layers, region `{}` has {layers}", region.name),
            help: format!("make the entries add up to {layers}"),
        }));
    }
    errors
}

/// Derive runs a replicated region at an end of the pipeline only.
pub(super) fn replicated_inside(span: Span) -> Error {
    Error::Schedule(ScheduleError::UnsupportedArrangement {
        span,
        message: "a replicated region between sharded regions".into(),
        label: "replicated, inside the pipeline".into(),
        help: "a replicated region comes first (an encoder at the source) or last (at the sink): move it to an end of the cut, or make it sharded".into(),
    })
}

/// Sharded regions run as one pipeline, so under one skeleton.
pub(super) fn mixed_body(span: Span, first: Skeleton) -> Error {
    Error::Schedule(ScheduleError::UnsupportedArrangement {
        span,
        message: "sharded regions with different skeletons".into(),
        label: format!("differs from `{first}`"),
        help: "sharded regions share the pipeline ranks and run as one pipeline: give them the same skeleton (zbv and dualpipev take a single sharded region)".into(),
    })
}

/// `skeleton` runs `m` microbatches on `p` ranks.
pub(super) fn microbatches(skeleton: Skeleton, (p, m): (u64, u64), span: Span, at: Span) -> Option<Error> {
    let e = skeleton.check_microbatches(p, m).err()?;
    Some(Error::Schedule(ScheduleError::MicrobatchesIncompatible {
        span,
        skeleton: at,
        message: e.message,
        help: e.help,
    }))
}

/// The body the sharded regions run together: sharded `1f1b` regions run as one interleaved
/// pipeline, which must take the microbatches too, and the step must stay within
/// [`super::MAX_EVENTS`].
pub(super) fn body_rules(schedule: &[RegionSchedule], (p, m): (u64, u64), span: Span, at: Span) -> Vec<Error> {
    let mut errors = Vec::new();
    let Some((body, chunks)) = body_skeleton(&sharded_skeletons(schedule)) else { return errors };
    let first = schedule.iter().find(|s| s.skeleton.layout() == Layout::Sharded).map(|s| s.skeleton);
    if chunks > 1 && first == Some(Skeleton::OneFOneB) {
        errors.extend(microbatches(body, (p, m), span, at));
    }
    let stages = p.saturating_mul(u64::from(chunks));
    let halves = if body.splits_backward() { 3 } else { 2 };
    let events = stages.saturating_mul(m).saturating_mul(halves).saturating_add(m.saturating_mul(2));
    if events > super::MAX_EVENTS {
        errors.push(Error::Cluster(ClusterError::TooLarge { span, events, limit: super::MAX_EVENTS }));
    }
    errors
}

/// A fixed `chunks` of a transpose region is at most its layers.
pub(super) fn chunks_rule(chunks: Chunks, region: &Region, span: Span) -> Option<Error> {
    let layers = region.layers.end - region.layers.start;
    let Chunks::Fixed(n) = chunks else { return None };
    (u64::from(n) > layers).then_some(Error::Schedule(ScheduleError::ChunksOutOfRange { span, layers: Some(layers) }))
}

/// `lookahead` only where nothing in the region trains.
pub(super) fn lookahead_trainable(lookahead: bool, region: &Region, model: &Model, span: Span) -> Option<Error> {
    let (part, _) = region.segments.iter().find(|(part, _)| !model.parts[*part].frozen).filter(|_| lookahead)?;
    let part = &model.parts[*part];
    Some(Error::Schedule(ScheduleError::LookaheadTrainable { span, part: part.name.clone(), part_span: part.span }))
}

/// An owner's rank is one of the pipeline's.
pub(super) fn owner_rank(rank: u64, p: u64, span: Span) -> Option<Error> {
    (rank >= p).then(|| {
        Error::Schedule(ScheduleError::BadOwner {
            span,
            message: format!("rank {rank} does not exist"),
            label: format!("the pipeline has ranks 0..{p}"),
            help: format!("use a rank below {p}"),
        })
    })
}

pub(super) fn sharded_skeletons(schedule: &[RegionSchedule]) -> Vec<crate::algebra::Skeleton> {
    schedule.iter().map(|s| s.skeleton).filter(|s| s.layout() == Layout::Sharded).collect()
}

/// The cut with every run of adjacent replicated regions joined by `+`.
/// E0312's fix: the merged cut and one skeleton per merged region, as one edit over both
/// statements, since merging the cut alone leaves a skeleton too many (E0305). None when the
/// two come from different sources (a `--set` override), where no one edit reaches both.
fn normal_form_fix(
    ctx: &Ctx,
    (cut, merged): (&ast::CutStmt, &str),
    schedule: &ast::ScheduleStmt,
    layouts: &[Layout],
) -> Option<(Span, String)> {
    if cut.span.file != schedule.span.file || schedule.skeletons.len() != layouts.len() {
        return None;
    }
    let kept: Vec<String> = (schedule.skeletons.iter().enumerate())
        .filter(|&(i, _)| i == 0 || layouts[i] != Layout::Replicated || layouts[i - 1] != Layout::Replicated)
        .map(|(_, s)| ctx.program.sources.text(s.span).split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    let schedule_text = format!("schedule {};", kept.join(", "));
    let mut edits = [(cut.span, merged.to_string()), (schedule.span, schedule_text)];
    edits.sort_by_key(|e| e.0.start);
    let whole = edits[0].0.to(edits[1].0);
    let between = &ctx.program.sources.get(whole.file).text[edits[0].0.end as usize..edits[1].0.start as usize];
    Some((whole, format!("{}{between}{}", edits[0].1, edits[1].1)))
}

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
