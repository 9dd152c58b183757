//! The baselines of `sim --compare` (docs/baselines.md), each derived and simulated by mpipec on
//! the plan's own model, cluster, cost model and body skeleton, so a speedup compares where the
//! encoder runs and nothing else.

use crate::algebra::{Fill, Layout, OwnerSpec, Skeleton};
use crate::cost::model::CostModel;
use crate::derive::folded;
use crate::derive::placement::balanced_split;
use crate::plan::{Plan, RegionSchedule};
use crate::sim::report::Compared;

/// A baseline: its name, what it is and where it comes from, and the plan that expresses it.
pub struct Baseline {
    pub name: &'static str,
    pub description: String,
    pub plan: Plan,
}

/// Step time of `plan`, derived and simulated with its own cost model.
pub fn step_time(plan: &Plan) -> Option<f64> {
    Some(crate::driver::build(plan).ok()?.evaluate().report.step_time_s)
}

/// The baselines `plan` is compared with: with a transposed encoder, the other places of that
/// encoder; without one, the other skeletons.
pub fn baselines(plan: &Plan) -> Vec<Baseline> {
    if plan.schedule.iter().any(|s| s.skeleton.layout() == Layout::Replicated) {
        encoder_baselines(plan)
    } else {
        skeleton_baselines(plan)
    }
}

pub fn compare(plan: &Plan, step: f64) -> Vec<Compared> {
    baselines(plan)
        .into_iter()
        .filter_map(|b| {
            let t = step_time(&b.plan)?;
            Some(Compared { name: b.name.to_string(), step_time_s: t, speedup: t / step, description: b.description })
        })
        .collect()
}

/// The plan's body skeleton, which every baseline runs: an interleaved plan is compared with
/// interleaved baselines, a zero-bubble plan with zero-bubble ones.
pub fn body_skeleton(plan: &Plan) -> Option<Skeleton> {
    let sharded: Vec<Skeleton> =
        plan.schedule.iter().map(|s| s.skeleton).filter(|s| s.layout() == Layout::Sharded).collect();
    crate::algebra::skeleton::body_skeleton(&sharded).map(|(s, _)| s)
}

/// Layers of the encoder parts at the model's source, whether the plan transposes all of them
/// or a part.
fn encoder_layers(plan: &Plan) -> u64 {
    plan.model.parts.iter().take_while(|p| p.arch.is_encoder()).map(|p| p.arch.layers()).sum()
}

fn encoder_baselines(plan: &Plan) -> Vec<Baseline> {
    let Some(body) = body_skeleton(plan) else { return Vec::new() };
    let enc = encoder_layers(plan);
    let mut out = Vec::new();
    if let Some(even) = folded::fold_even(plan, body, enc) {
        out.push(Baseline {
            name: "megatron-even",
            description: format!(
                "Megatron-Core's default (no layout flag): the encoder on the first stage, the LLM's layers split \
                 evenly, {body}"
            ),
            plan: even,
        });
    }
    // A hand-balancer keeps the best layout it tried, the default and the cost-balanced fold
    // among them.
    let tried = folded::hand_balanced(plan, body, enc).into_iter().chain([folded::fold(plan, body, enc)]);
    let style = tried
        .chain(folded::rank_balanced(plan, body, enc))
        .chain(folded::fold_even(plan, body, enc))
        .filter_map(|p| Some((step_time(&p)?, p)));
    if let Some((_, style)) = style.min_by(|a, b| a.0.total_cmp(&b.0)) {
        out.push(Baseline {
            name: "megatron-style",
            description: format!(
                "Megatron-LM hand-balanced: the encoder on the first stage, the LLM's layers placed around it \
                 for the shortest step (--decoder-first-pipeline-num-layers or a layout string), {body}"
            ),
            plan: style,
        });
    }
    out.extend(disttrain_like(plan, body, enc));
    out.push(Baseline {
        name: "prefix",
        description: "prefix form: each rank's round-robin encodes as one block before its pipeline \
             (HyperParallel's public code, Megatron-Core's colocated multimodal schedule), the plan's body"
            .into(),
        plan: transposed(plan, Fill::Prefix),
    });
    out.push(hyperparallel(plan));
    out.push(Baseline {
        name: "transpose-round-robin",
        description: "this plan's transpose with round-robin owners instead of its owner map".into(),
        plan: Plan { owner: Some(OwnerSpec::RoundRobin), ..plan.clone() },
    });
    out
}

/// DistTrain-like (Zhang et al., SIGCOMM'25, disaggregated encoder): the encoder on its own
/// leading stages, dedicated ranks under a one-chunk body, the LLM balanced over the rest; the
/// count of encoder stages that gives the shortest step.
fn disttrain_like(plan: &Plan, body: Skeleton, enc: u64) -> Option<Baseline> {
    let weights = folded::layer_weights(&CostModel::new(plan), 0..plan.model.layers());
    let (enc_weights, llm_weights) = weights.split_at(enc as usize);
    let count = plan.cluster.pp as usize * body.chunks() as usize;
    let (_, k, candidate) = (1..count.min(enc as usize + 1))
        .filter(|k| count - k <= llm_weights.len())
        .filter_map(|k| {
            let mut split = balanced_split(0..enc, k, &folded::Weights(enc_weights.to_vec()));
            split.extend(balanced_split(
                0..llm_weights.len() as u64,
                count - k,
                &folded::Weights(llm_weights.to_vec()),
            ));
            let candidate = folded::single_region(plan, body, split);
            step_time(&candidate).map(|t| (t, k, candidate))
        })
        .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)))?;
    Some(Baseline {
        name: "disttrain-like",
        description: format!(
            "DistTrain-like (SIGCOMM'25): the encoder alone on {k} leading stage(s), the LLM balanced over the rest, \
             {body}"
        ),
        plan: candidate,
    })
}

/// `plan` with its transposed regions filled as `fill`, whole encodes each step, and round-robin
/// owners, its body as written.
fn transposed(plan: &Plan, fill: Fill) -> Plan {
    let schedule = plan
        .schedule
        .iter()
        .map(|s| match s.skeleton.layout() {
            Layout::Replicated => {
                RegionSchedule { skeleton: Skeleton::whole_transpose(fill), split: None, span: s.span }
            }
            Layout::Sharded => s.clone(),
        })
        .collect();
    Plan { schedule, owner: Some(OwnerSpec::RoundRobin), ..plan.clone() }
}

/// HyperParallel's ScheduleMPipeTranspose as its public code runs it.
fn hyperparallel(plan: &Plan) -> Baseline {
    Baseline {
        name: "hyperparallel",
        description:
            "HyperParallel's public transpose: encoder block before each rank's pipeline, round-robin owners, \
             its interleaved 1F1B body"
                .into(),
        plan: {
            let mut hp = transposed(plan, Fill::Prefix);
            for region in hp.schedule.iter_mut().filter(|r| r.skeleton.layout() == Layout::Sharded) {
                let body = hyperparallel_body(region.skeleton);
                if body.chunks() != region.skeleton.chunks() {
                    region.split = None;
                }
                region.skeleton = body;
            }
            hp
        },
    }
}

/// The body HyperParallel's `ScheduleMPipeTranspose` runs by default: its interleaved generator
/// (warmup 2(P-1-i) on rank i with one chunk), as many chunks as the stack has for the plan's.
fn hyperparallel_body(skeleton: Skeleton) -> Skeleton {
    let (Ok(body) | Err((body, _))) = crate::derive::nearest::body(crate::plan::Target::HyperParallel, skeleton);
    Skeleton::Interleaved { v: body.chunks() }
}

/// A plan without an encoder: the same pipeline under the other sharded skeletons.
fn skeleton_baselines(plan: &Plan) -> Vec<Baseline> {
    let p = plan.cluster.pp;
    let m = plan.batch.microbatches;
    let layers = plan.model.layers();
    [
        Skeleton::Gpipe,
        Skeleton::OneFOneB,
        Skeleton::Interleaved { v: 2 },
        Skeleton::Zb1p { v: 2 },
        Skeleton::Zbv,
        Skeleton::DualPipeV,
    ]
    .into_iter()
    .filter(|s| plan.schedule.len() != 1 || plan.schedule[0].skeleton != *s)
    .filter(|s| s.check_microbatches(p, m).is_ok() && layers >= p * u64::from(s.chunks()))
    .map(|s| {
        let schedule =
            plan.schedule.iter().map(|r| RegionSchedule { skeleton: s, split: None, span: r.span }).collect();
        Baseline {
            name: s.name(),
            description: format!("the same pipeline under {s}"),
            plan: Plan { schedule, ..plan.clone() },
        }
    })
    .filter(|b| {
        crate::algebra::skeleton::body_skeleton(&b.plan.schedule.iter().map(|s| s.skeleton).collect::<Vec<_>>())
            .is_some()
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hyperparallel_baseline_runs_its_interleaved_body() {
        use Skeleton::*;
        for (written, runs) in [
            (OneFOneB, Interleaved { v: 1 }),
            (Gpipe, Interleaved { v: 1 }),
            (Interleaved { v: 3 }, Interleaved { v: 3 }),
            (Zb1p { v: 2 }, Interleaved { v: 2 }),
            (Zbv, Interleaved { v: 2 }),
            (DualPipeV, Interleaved { v: 2 }),
        ] {
            assert_eq!(hyperparallel_body(written), runs, "{written}");
        }
    }
}
