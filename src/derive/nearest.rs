//! A target's nearest form of a plan: what each launch-configuration stack runs natively (the
//! skeleton × target table of the README, as code), and for a plan it does not run as written,
//! the form it runs instead, a choice of the resolved plan ([`TargetForm`]) that
//! [`super::choose::nearest`] completes with its own search and [`super::lower`] lowers.
//!
//! Megatron-LM and MindFormers build the modality encoder into pipeline stage 0
//! (`add_encoder = is_pipeline_first_stage()`, a Cell's `pipeline_stage = 0`); MindSpeed-MM
//! spreads it over the first stages (a ViT `pipeline_num_layers` list, all before the first LLM
//! layer). None replicates it. HyperParallel replicates it with its public
//! `ScheduleMPipeTranspose`: one encoder block before each rank's body, owners round-robin.

use super::folded;
use super::resolved::Resolved;
use crate::algebra::skeleton::body_skeleton;
use crate::algebra::{Fill, Layout, OwnerSpec, Skeleton};
use crate::ir::PlanIr;
use crate::plan::{Plan, Target};
use crate::span::Span;

/// One thing the nearest native plan does differently, at the schedule entry it replaces.
#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    pub span: Span,
    pub what: String,
}

/// Why a target cannot run a plan, said at the construct it cannot run.
#[derive(Clone, Debug, PartialEq)]
pub struct Refusal {
    pub span: Span,
    pub reason: String,
    pub help: String,
}

/// The form a target runs a plan in when it has no native form of the plan as written: its
/// body skeleton and where it puts the encoder, and what that changes.
#[derive(Clone, Debug, PartialEq)]
pub struct TargetForm {
    pub target: Target,
    /// The body as the target runs it, and its stages per rank.
    pub body: (Skeleton, u32),
    pub encoder: Encoder,
    /// What differs from the plan as written, in the order W0004 lists it.
    pub changes: Vec<Change>,
}

/// Where the target's form puts the encoder.
#[derive(Clone, Debug, PartialEq)]
pub enum Encoder {
    /// Where the plan puts it.
    AsWritten,
    /// HyperParallel's MPipe form: `transpose(prefix)`, each microbatch whole, owners
    /// round-robin.
    Prefix,
    /// In body stage 0, the model one sharded region with these layers per stage.
    Folded(Vec<u64>),
}

impl TargetForm {
    /// `plan` in this form: what lowering places.
    pub fn written_into(&self, plan: &Plan) -> Plan {
        match &self.encoder {
            Encoder::Folded(split) => folded::single_region(plan, self.body.0, split.clone()),
            Encoder::Prefix => {
                let mut plan = plan.clone();
                plan.schedule[0].skeleton = Skeleton::whole_transpose(Fill::Prefix);
                // Pinned even when the plan's own choice was round-robin: `by_microbatch` could
                // choose otherwise for this form's other fill.
                plan.owner = Some(OwnerSpec::RoundRobin);
                rewrite_sharded(self.target, true, &mut plan);
                plan
            }
            Encoder::AsWritten => {
                let mut plan = plan.clone();
                rewrite_sharded(self.target, false, &mut plan);
                plan
            }
        }
    }
}

/// How `target` runs a body skeleton: as written, or as the nearest skeleton it has and why
/// (said of the target: "has no zero-bubble schedule").
pub fn body(target: Target, skeleton: Skeleton) -> Result<Skeleton, (Skeleton, &'static str)> {
    use Skeleton::*;
    use Target::*;
    match (target, skeleton) {
        (Torch, s) => Ok(s),
        (_, Transpose { .. }) => unreachable!("a body skeleton is sharded"),
        (Megatron | MindSpeedMm, Gpipe) => {
            Err((OneFOneB, "pipelines with 1F1B only: all forwards then all backwards has no flag"))
        }
        (Megatron | MindSpeedMm | HyperParallel, Zb1p { v }) => {
            Err((Interleaved { v }, "has no zero-bubble schedule (backward split into input and weight gradients)"))
        }
        (Megatron | MindSpeedMm | HyperParallel, Zbv | DualPipeV) => {
            Err((Interleaved { v: 2 }, "places virtual stage i on rank i mod pp, so a V-shaped schedule has no layout"))
        }
        (MindFormers, Zb1p { v }) => Err((Interleaved { v }, "has no interleaved zero-bubble `pipeline_scheduler`")),
        (MindFormers, DualPipeV) => {
            Err((Zbv, "has `zero_bubble_v` but not DualPipeV's overlapped forward/backward pairs"))
        }
        (_, s @ (Gpipe | OneFOneB | Interleaved { .. } | Zbv)) => Ok(s),
    }
}

/// How HyperParallel's MPipe schedule runs a body: always with its interleaved generator,
/// whose one-chunk `pp_less_memory` variant is `1f1b`.
fn mpipe_body(skeleton: Skeleton) -> Result<Skeleton, (Skeleton, &'static str)> {
    match (skeleton, body(Target::HyperParallel, skeleton)) {
        (Skeleton::Gpipe, _) => Err((
            Skeleton::OneFOneB,
            "pipelines a transposed encoder's LLM with interleaved 1F1B (`pp_schedule: mpipe`)",
        )),
        (_, mapped) => mapped,
    }
}

/// What changes when a transpose encoder runs in HyperParallel's form,
/// `ScheduleMPipeTranspose`'s prefix block: each microbatch encoded whole, in one block before
/// the rank's pipeline, said of each construct replaced.
fn mpipe_encoder(skeleton: Skeleton, chunks: u32) -> Vec<String> {
    let mut whats = Vec::new();
    let Skeleton::Transpose { fill, lookahead, .. } = skeleton else { unreachable!("the encoder is replicated") };
    if fill == Fill::Slack {
        whats.push(
            "the encoder runs as one block before each rank's pipeline (`transpose(prefix)`): \
             HyperParallel's ScheduleMPipeTranspose does not fill the idle time slot by slot"
                .to_string(),
        );
    }
    if chunks > 1 {
        whats.push("each microbatch is encoded whole (`chunks = 1`): HyperParallel's MPIPE_TRANSPOSE_FWD step runs the whole tower".to_string());
    }
    if lookahead {
        whats.push(
            "each step encodes its own batch (no `lookahead`): HyperParallel loads and encodes a step's data within the step"
                .to_string(),
        );
    }
    whats
}

/// Whether `target` can hold encoder layers on body stages after the first.
fn shards_encoder(target: Target) -> bool {
    matches!(target, Target::Torch | Target::MindSpeedMm)
}

/// The form `target` runs the resolved plan in (`None`: as written), or why it has none.
pub fn form(target: Target, resolved: &Resolved, ir: &PlanIr) -> Result<Option<TargetForm>, Refusal> {
    if target == Target::Torch {
        return Ok(None);
    }
    let plan = resolved.plan;
    one_encoder_then_one_llm(target, resolved)?;
    let written = resolved.body().0;
    let body_span = plan.schedule.iter().find(|s| s.skeleton.layout() == Layout::Sharded).map(|s| s.span);
    let body_span = body_span.unwrap_or_default();
    let mpipe = target == Target::HyperParallel && resolved.choices.encoder.is_some();
    let mut changes = Vec::new();
    let new_body = match runs_body(target, mpipe, written) {
        Ok(s) => s,
        Err((nearest, why)) => {
            let what = format!("`{written}` runs as `{nearest}`: `{}` {why}", target.name());
            changes.push(Change { span: body_span, what });
            nearest
        }
    };
    let encoder = place_encoder(target, (resolved, ir), body_span, &mut changes);
    if changes.is_empty() {
        return target_rules(target, plan, written, body_span).map(|()| None);
    }
    let encoder = match encoder {
        Some(Encoder::Folded(_)) => fold_encoder(target, plan, new_body, body_span, &mut changes)?,
        Some(other) => other,
        None => Encoder::AsWritten,
    };
    let mut form = TargetForm { target, body: (new_body, new_body.chunks()), encoder, changes };
    let nearest = form.written_into(plan);
    if !matches!(form.encoder, Encoder::Folded(_)) && new_body != written {
        form.changes.extend(dropped_splits(plan, &nearest));
    }
    form.body = check_body(target, &nearest, body_span)?;
    Ok(Some(form))
}

/// How `target` runs a body; with HyperParallel's MPipe schedule (a transposed encoder), as
/// that schedule's generator does.
fn runs_body(target: Target, mpipe: bool, skeleton: Skeleton) -> Result<Skeleton, (Skeleton, &'static str)> {
    if mpipe { mpipe_body(skeleton) } else { body(target, skeleton) }
}

/// The stacks' configs describe one encoder, then one LLM, and nothing after it.
fn one_encoder_then_one_llm(target: Target, resolved: &Resolved) -> Result<(), Refusal> {
    let (name, plan) = (target.name(), resolved.plan);
    if let Some(sink) = resolved.sink() {
        return Err(Refusal {
            span: plan.schedule[sink].span,
            reason: format!("`{name}` has no replicated region after the LLM"),
            help: "build this plan for `torch`, which runs any plan".into(),
        });
    }
    for (kind, is_encoder) in [("encoder", true), ("LLM", false)] {
        let parts: Vec<_> = plan.model.parts.iter().filter(|p| p.arch.is_encoder() == is_encoder).collect();
        if parts.len() > 1 {
            return Err(Refusal {
                span: parts[1].span,
                reason: format!("`{name}` takes one {kind}; this model has {} {kind} parts", parts.len()),
                help: format!("describe the {kind} as one part, or build this plan for `torch`"),
            });
        }
    }
    let first_decoder = plan.model.parts.iter().position(|p| !p.arch.is_encoder());
    if let Some(late) = first_decoder.and_then(|d| plan.model.parts[d..].iter().find(|p| p.arch.is_encoder())) {
        return Err(Refusal {
            span: late.span,
            reason: format!("`{name}` has no encoder after the LLM"),
            help: "build this plan for `torch`, which runs any plan".into(),
        });
    }
    Ok(())
}

/// Where `target` puts the encoder: HyperParallel's MPipe form of a transposed one, or folded
/// into pipeline stage 0 (its split still to make); `None` where the plan puts it. Records what
/// changed.
fn place_encoder(
    target: Target,
    (resolved, ir): (&Resolved, &PlanIr),
    body_span: Span,
    changes: &mut Vec<Change>,
) -> Option<Encoder> {
    let (name, plan) = (target.name(), resolved.plan);
    let encoder_layers = leading_encoder_layers(plan);
    // The encoder, when there is one, is region 0.
    match resolved.choices.encoder.map(|_| 0) {
        Some(region) if target == Target::HyperParallel => {
            let span = plan.schedule[region].span;
            let whats = mpipe_encoder(plan.schedule[region].skeleton, resolved.choices.chunks);
            changes.extend(whats.into_iter().map(|what| Change { span, what }));
            let (p, m) = (plan.cluster.pp as u32, plan.batch.microbatches as u32);
            let round_robin: Vec<u32> = (0..m).map(|mb| mb % p).collect();
            let owners = ir.owner.get(&plan.cut.regions[region].name).cloned().unwrap_or_default();
            if owners != round_robin {
                changes.push(Change {
                    span,
                    what: "microbatch m is encoded on rank m mod pp (`owner round_robin`): \
                           `pp_mpipe_transpose_overflow: full` is HyperParallel's owner map"
                        .into(),
                });
            }
            Some(Encoder::Prefix)
        }
        Some(region) => {
            changes.push(Change {
                span: plan.schedule[region].span,
                what: format!(
                    "the encoder ({encoder_layers} layers) is folded into pipeline stage 0 and the LLM layers are \
                     rebalanced around it: `{name}` builds the encoder into the first stage and has no replicated one"
                ),
            });
            Some(Encoder::Folded(Vec::new()))
        }
        None if !shards_encoder(target) && body_layers(plan, ir).0.iter().skip(1).any(|&n| n > 0) => {
            changes.push(Change {
                span: body_span,
                what: format!(
                    "the encoder ({encoder_layers} layers) is moved into pipeline stage 0 and the LLM layers are \
                     rebalanced around it: `{name}` builds the whole encoder into the first stage"
                ),
            });
            Some(Encoder::Folded(Vec::new()))
        }
        None => None,
    }
}

/// The encoder folded into stage 0 before a body of `new_body`, with its LLM layers by stage
/// added to the changes; refused when some stage would hold no LLM layer.
fn fold_encoder(
    target: Target,
    plan: &Plan,
    new_body: Skeleton,
    body_span: Span,
    changes: &mut Vec<Change>,
) -> Result<Encoder, Refusal> {
    let encoder_layers = leading_encoder_layers(plan);
    let stages = plan.cluster.pp * u64::from(new_body.chunks());
    if plan.model.layers() - encoder_layers + 1 < stages {
        return Err(Refusal {
            span: body_span,
            reason: format!(
                "`{}` needs the encoder in stage 0 and at least one LLM layer on each of the other {} stages",
                target.name(),
                stages - 1
            ),
            help: "use fewer pipeline ranks or fewer virtual stages".into(),
        });
    }
    let split = folded::fold_split(plan, new_body, encoder_layers);
    let mut llm = split.clone();
    llm[0] -= encoder_layers;
    changes.push(Change { span: body_span, what: format!("LLM layers by stage, in stage order: {llm:?}") });
    Ok(Encoder::Folded(split))
}

/// Every sharded region of `plan` as the target runs it; a pinned split that no longer fits
/// the new number of stages is dropped.
fn rewrite_sharded(target: Target, mpipe: bool, plan: &mut Plan) {
    for region in plan.schedule.iter_mut().filter(|s| s.skeleton.layout() == Layout::Sharded) {
        let (Ok(s) | Err((s, _))) = runs_body(target, mpipe, region.skeleton);
        if s.chunks() != region.skeleton.chunks() {
            region.split = None;
        }
        region.skeleton = s;
    }
}

/// The pinned splits the target's form dropped, said at each region.
fn dropped_splits(written: &Plan, nearest: &Plan) -> Vec<Change> {
    let p = nearest.cluster.pp;
    let regions = written.schedule.iter().zip(&nearest.schedule);
    regions
        .filter(|(w, n)| w.split.is_some() && n.split.is_none())
        .map(|(w, n)| Change {
            span: w.span,
            what: format!(
                "the pinned split of `{}` is rebalanced for {} stages",
                w.skeleton,
                p * u64::from(n.skeleton.chunks())
            ),
        })
        .collect()
}

/// The nearest plan's body must be one schedule the target has, for this many microbatches.
fn check_body(target: Target, nearest: &Plan, body_span: Span) -> Result<(Skeleton, u32), Refusal> {
    let name = target.name();
    let sharded: Vec<Skeleton> =
        nearest.schedule.iter().map(|s| s.skeleton).filter(|s| s.layout() == Layout::Sharded).collect();
    let Some((emitted_body, chunks)) = body_skeleton(&sharded) else {
        return Err(Refusal {
            span: body_span,
            reason: format!("`{name}` has no schedule for these sharded regions together"),
            help: "use one sharded region, or build for `torch`".into(),
        });
    };
    if let Err(mismatch) = emitted_body.check_microbatches(nearest.cluster.pp, nearest.batch.microbatches) {
        return Err(Refusal {
            span: body_span,
            reason: format!("the nearest plan `{name}` can run uses `{emitted_body}`, and {}", mismatch.message),
            help: mismatch.help,
        });
    }
    target_rules(target, nearest, emitted_body, body_span).map(|()| (emitted_body, chunks))
}

/// Rules of the stack itself that the language does not impose.
fn target_rules(target: Target, plan: &Plan, body: Skeleton, span: Span) -> Result<(), Refusal> {
    let name = target.name();
    if plan.cluster.pp == 1 && body.chunks() > 1 {
        return Err(Refusal {
            span,
            reason: format!("`{name}` runs virtual pipeline stages only with more than one pipeline rank"),
            help: "use `1f1b`, or more pipeline ranks".into(),
        });
    }
    Ok(())
}

/// Layers of the encoder parts before the first decoder part.
pub fn leading_encoder_layers(plan: &Plan) -> u64 {
    plan.model.parts.iter().take_while(|p| p.arch.is_encoder()).map(|p| p.arch.layers()).sum()
}

/// Per body stage of the lists (the stages on a rank, in the IR's order): its layers of
/// encoder parts and of decoder parts.
pub fn body_layers(plan: &Plan, ir: &PlanIr) -> (Vec<u64>, Vec<u64>) {
    let mut parts = Vec::new();
    let mut start = 0;
    for part in &plan.model.parts {
        let end = start + part.arch.layers();
        parts.push((start..end, part.arch.is_encoder()));
        start = end;
    }
    let (mut encoder, mut decoder) = (Vec::new(), Vec::new());
    for stage in ir.stages.iter().filter(|s| s.rank.is_some()) {
        let [start, end] = stage.layers;
        let (mut e, mut d) = (0, 0);
        for (range, is_encoder) in &parts {
            let overlap = end.min(range.end).saturating_sub(start.max(range.start));
            if *is_encoder { e += overlap } else { d += overlap }
        }
        encoder.push(e);
        decoder.push(d);
    }
    (encoder, decoder)
}
