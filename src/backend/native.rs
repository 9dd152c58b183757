//! What each launch-configuration target runs natively, and the nearest native plan of one it
//! does not: the skeleton × target table of the README, as code.
//!
//! Megatron-LM and MindFormers build the modality encoder into pipeline stage 0
//! (`add_encoder = is_pipeline_first_stage()`, a Cell's `pipeline_stage = 0`); MindSpeed-MM
//! spreads it over the first stages (a ViT `pipeline_num_layers` list, all before the first LLM
//! layer). None replicates it. HyperParallel replicates it with its public
//! `ScheduleMPipeTranspose`: one encoder block before each rank's body, owners round-robin.

use crate::algebra::skeleton::body_skeleton;
use crate::algebra::{Fill, Layout, OwnerSpec, Skeleton};
use crate::derive::{Derived, folded};
use crate::plan::Plan;
use crate::span::Span;

use super::Target;
use super::layout::BodyStages;

/// One thing the nearest native plan does differently, at the schedule entry it replaces.
#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    pub span: Span,
    pub what: String,
}

pub enum Verdict {
    Native,
    Nearest { changes: Vec<Change>, plan: Box<Plan> },
    Impossible { span: Span, reason: String, help: String },
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

/// HyperParallel's form of a transpose encoder, `ScheduleMPipeTranspose`'s prefix block: each
/// microbatch encoded whole, in one block before the rank's pipeline. The skeleton in that
/// form, and what changed, said of each construct replaced.
fn mpipe_encoder(skeleton: Skeleton, chunks: u32) -> (Skeleton, Vec<String>) {
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
    (Skeleton::whole_transpose(Fill::Prefix), whats)
}

/// Whether `target` can hold encoder layers on body stages after the first.
fn shards_encoder(target: Target) -> bool {
    matches!(target, Target::Torch | Target::MindSpeedMm)
}

pub fn verdict(target: Target, plan: &Plan, derived: &Derived) -> Verdict {
    if target == Target::Torch {
        return Verdict::Native;
    }
    let placement = &derived.placement;
    let name = target.name();
    if let Some(sink) = placement.sink {
        return Verdict::Impossible {
            span: plan.schedule[sink.region].span,
            reason: format!("`{name}` has no replicated region after the LLM"),
            help: "build this plan for `torch`, which runs any plan".into(),
        };
    }
    // The stacks' configs describe one encoder and one LLM.
    for (kind, is_encoder) in [("encoder", true), ("LLM", false)] {
        let parts: Vec<_> = plan.model.parts.iter().filter(|p| p.arch.is_encoder() == is_encoder).collect();
        if parts.len() > 1 {
            return Verdict::Impossible {
                span: parts[1].span,
                reason: format!("`{name}` takes one {kind}; this model has {} {kind} parts", parts.len()),
                help: format!("describe the {kind} as one part, or build this plan for `torch`"),
            };
        }
    }
    let first_decoder = plan.model.parts.iter().position(|p| !p.arch.is_encoder());
    if let Some(late) = first_decoder.and_then(|d| plan.model.parts[d..].iter().find(|p| p.arch.is_encoder())) {
        return Verdict::Impossible {
            span: late.span,
            reason: format!("`{name}` has no encoder after the LLM"),
            help: "build this plan for `torch`, which runs any plan".into(),
        };
    }
    let p = plan.cluster.pp;
    let m = plan.batch.microbatches;
    let body_skeleton_now = placement.body.skeleton;
    let first_sharded = plan.schedule.iter().find(|s| s.skeleton.layout() == Layout::Sharded).map(|s| s.span);
    let body_span = first_sharded.unwrap_or_default();
    let mut changes = Vec::new();
    let mpipe = target == Target::HyperParallel && placement.encoder.is_some();
    let body = |target, skeleton| if mpipe { mpipe_body(skeleton) } else { body(target, skeleton) };
    let mapped = body(target, body_skeleton_now);
    let new_body = match mapped {
        Ok(s) => s,
        Err((nearest, why)) => {
            changes.push(Change {
                span: body_span,
                what: format!("`{body_skeleton_now}` runs as `{nearest}`: `{name}` {why}"),
            });
            nearest
        }
    };
    let encoder_layers = leading_encoder_layers(plan);
    let layout = BodyStages::of(plan, derived);
    let mut nearest = plan.clone();
    let fold = match placement.encoder {
        Some(enc) if target == Target::HyperParallel => {
            let span = plan.schedule[enc.region].span;
            let (encoder, whats) = mpipe_encoder(plan.schedule[enc.region].skeleton, enc.chunks);
            changes.extend(whats.into_iter().map(|what| Change { span, what }));
            nearest.schedule[enc.region].skeleton = encoder;
            let round_robin: Vec<u32> = (0..m as u32).map(|mb| mb % p as u32).collect();
            let owners = derived.transpose.as_ref().map(|t| t.owners.clone()).unwrap_or_default();
            if owners != round_robin {
                changes.push(Change {
                    span,
                    what: "microbatch m is encoded on rank m mod pp (`owner round_robin`): \
                           `pp_mpipe_transpose_overflow: full` is HyperParallel's owner map"
                        .into(),
                });
            }
            // Pinned even when the plan's own choice was round-robin: `by_microbatch` could
            // choose otherwise for the nearest plan's other fill.
            nearest.owner = Some(OwnerSpec::RoundRobin);
            false
        }
        Some(enc) => {
            changes.push(Change {
                span: plan.schedule[enc.region].span,
                what: format!(
                    "the encoder ({encoder_layers} layers) is folded into pipeline stage 0 and the LLM layers are \
                     rebalanced around it: `{name}` builds the encoder into the first stage and has no replicated one"
                ),
            });
            true
        }
        None if !shards_encoder(target) && layout.encoder.iter().skip(1).any(|&n| n > 0) => {
            changes.push(Change {
                span: body_span,
                what: format!(
                    "the encoder ({encoder_layers} layers) is moved into pipeline stage 0 and the LLM layers are \
                     rebalanced around it: `{name}` builds the whole encoder into the first stage"
                ),
            });
            true
        }
        None => false,
    };
    if changes.is_empty() {
        return target_rules(target, plan, body_skeleton_now, body_span).unwrap_or(Verdict::Native);
    }
    if fold {
        let stages = p * u64::from(new_body.chunks());
        if plan.model.layers() - encoder_layers + 1 < stages {
            return Verdict::Impossible {
                span: body_span,
                reason: format!(
                    "`{name}` needs the encoder in stage 0 and at least one LLM layer on each of the other {} stages",
                    stages - 1
                ),
                help: "use fewer pipeline ranks or fewer virtual stages".into(),
            };
        }
        nearest = folded::fold(plan, new_body, encoder_layers);
        let mut llm = nearest.schedule[0].split.clone().expect("a fold pins its split");
        llm[0] -= encoder_layers;
        changes.push(Change { span: body_span, what: format!("LLM layers by stage, in stage order: {llm:?}") });
    } else if new_body != body_skeleton_now {
        for region in nearest.schedule.iter_mut().filter(|s| s.skeleton.layout() == Layout::Sharded) {
            let (Ok(s) | Err((s, _))) = body(target, region.skeleton);
            if s.chunks() != region.skeleton.chunks() && region.split.take().is_some() {
                changes.push(Change {
                    span: region.span,
                    what: format!(
                        "the pinned split of `{}` is rebalanced for {} stages",
                        region.skeleton,
                        p * u64::from(s.chunks())
                    ),
                });
            }
            region.skeleton = s;
        }
    }
    let sharded: Vec<Skeleton> =
        nearest.schedule.iter().map(|s| s.skeleton).filter(|s| s.layout() == Layout::Sharded).collect();
    let Some((emitted_body, _)) = body_skeleton(&sharded) else {
        return Verdict::Impossible {
            span: body_span,
            reason: format!("`{name}` has no schedule for these sharded regions together"),
            help: "use one sharded region, or build for `torch`".into(),
        };
    };
    if let Err(mismatch) = emitted_body.check_microbatches(p, m) {
        return Verdict::Impossible {
            span: body_span,
            reason: format!("the nearest plan `{name}` can run uses `{emitted_body}`, and {}", mismatch.message),
            help: mismatch.help,
        };
    }
    if let Some(impossible) = target_rules(target, &nearest, emitted_body, body_span) {
        return impossible;
    }
    Verdict::Nearest { changes, plan: Box::new(nearest) }
}

/// Rules of the stack itself that the language does not impose.
fn target_rules(target: Target, plan: &Plan, body: Skeleton, span: Span) -> Option<Verdict> {
    let name = target.name();
    if plan.cluster.pp == 1 && body.chunks() > 1 {
        return Some(Verdict::Impossible {
            span,
            reason: format!("`{name}` runs virtual pipeline stages only with more than one pipeline rank"),
            help: "use `1f1b`, or more pipeline ranks".into(),
        });
    }
    None
}

/// Layers of the encoder parts before the first decoder part.
pub fn leading_encoder_layers(plan: &Plan) -> u64 {
    plan.model.parts.iter().take_while(|p| p.arch.is_encoder()).map(|p| p.arch.layers()).sum()
}
