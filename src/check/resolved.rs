//! The checker's rules over a plan that no source was written for: a resolved plan, the plan
//! as written with every choice derive made written in as plan values
//! (`derive::resolved::Resolved::problems`), a target's nearest form among them. The rules are
//! the ones a source's plan passes (`rules.rs`), run on the values; what they find is the
//! compiler's own mistake, so every error points at the schedule entry of its region.

use super::rules::{
    body_rules, chunks_rule, lookahead_trainable, microbatches, mixed_body, owner_rank, replicated_inside,
    sharded_skeletons, stage_rules,
};
use crate::algebra::skeleton::body_skeleton;
use crate::algebra::{Fill, Layout, Skeleton};
use crate::error::{Error, FieldError, ScheduleError};
use crate::plan::Plan;

/// A map of work to pipeline ranks that the plan's values do not hold: a replicated region's
/// owner per microbatch, or an encoder's per image part.
pub struct Owners<'a> {
    pub region: usize,
    pub ranks: &'a [u32],
    /// How many entries the map has.
    pub entries: u64,
}

/// Every rule of the algebra the plan's values break, with its owner maps and the parts each
/// microbatch's images are split into (empty: all whole).
pub fn resolved(plan: &Plan, owners: &[Owners], parts: &[u32]) -> Vec<Error> {
    let (p, m) = (plan.cluster.pp, plan.batch.microbatches);
    let span = |i: usize| plan.schedule.get(i).map(|s| s.span).unwrap_or_default();
    if plan.cut.regions.len() != plan.schedule.len() {
        let (regions, skeletons) = (plan.cut.regions.len(), plan.schedule.len());
        return vec![Error::Schedule(ScheduleError::ScheduleArity { span: span(0), cut: span(0), regions, skeletons })];
    }
    let mut errors = Vec::new();
    for (i, (region, sched)) in plan.cut.regions.iter().zip(&plan.schedule).enumerate() {
        match sched.skeleton {
            Skeleton::Transpose { chunks, lookahead, fill } => {
                errors.extend(chunks_rule(chunks, region, span(i)));
                errors.extend(lookahead_trainable(lookahead, region, &plan.model, span(i)));
                if lookahead && fill == Fill::Prefix {
                    errors.push(Error::Schedule(ScheduleError::LookaheadPrefix { span: span(i), skeleton: span(i) }));
                }
                let sharded_at =
                    |j: usize| plan.schedule.get(j).is_some_and(|s| s.skeleton.layout() == Layout::Sharded);
                if i > 0 && sharded_at(i - 1) && sharded_at(i + 1) {
                    errors.push(replicated_inside(span(i)));
                }
            }
            skeleton => {
                errors.extend(stage_rules(region, sched, p, span(i), span(i)));
                errors.extend(microbatches(skeleton, (p, m), span(i), span(i)));
            }
        }
    }
    if plan.schedule.iter().all(|s| s.skeleton.layout() == Layout::Replicated) {
        errors.push(Error::Schedule(ScheduleError::ReplicatedWithoutSharded { span: span(0) }));
    }
    let sharded = sharded_skeletons(&plan.schedule);
    if !sharded.is_empty() && body_skeleton(&sharded).is_none() {
        errors.push(mixed_body(span(0), sharded[0]));
    }
    errors.extend(body_rules(&plan.schedule, (p, m), span(0), span(0)));
    for map in owners {
        errors.extend(owner_count(map, span(map.region)));
        errors.extend(map.ranks.iter().filter_map(|&rank| owner_rank(u64::from(rank), p, span(map.region))));
    }
    errors.extend(image_parts(plan, parts, span(0)));
    errors
}

fn owner_count(map: &Owners, span: crate::span::Span) -> Option<Error> {
    let (have, want) = (map.ranks.len() as u64, map.entries);
    (have != want).then(|| {
        Error::Schedule(ScheduleError::BadOwner {
            span,
            message: format!("owner list has {have} entries for {want}"),
            label: format!("expected {want} ranks"),
            help: "list the owning rank of every entry, in order".into(),
        })
    })
}

/// Each microbatch's images go to between one rank and as many as it has images, at most
/// every rank.
fn image_parts(plan: &Plan, parts: &[u32], span: crate::span::Span) -> Vec<Error> {
    if parts.is_empty() {
        return Vec::new();
    }
    let most = plan.batch.images.min(plan.cluster.pp);
    let mut errors = Vec::new();
    if parts.len() as u64 != plan.batch.microbatches {
        let requirement = format!("one entry per microbatch ({})", plan.batch.microbatches);
        errors.push(Error::Field(FieldError::OutOfRange { span, what: "the image parts".into(), requirement }));
    }
    for (mb, &k) in parts.iter().enumerate() {
        if k == 0 || u64::from(k) > most {
            let (what, requirement) = (format!("the image parts of microbatch {mb}"), format!("between 1 and {most}"));
            errors.push(Error::Field(FieldError::OutOfRange { span, what, requirement }));
        }
    }
    errors
}
