//! Baselines of ALGEBRA.md §8, each derived and simulated by mpipec on the plan's own model,
//! cluster and cost model, so a speedup compares schedules and nothing else.

use super::report::{Compared, simulate};
use crate::algebra::{Fill, Layout, OwnerSpec, Skeleton};
use crate::check::spec::{Plan, RegionSchedule};
use crate::cost::model::CostModel;
use crate::derive::folded;

/// A baseline: its name, what it is, and the plan that expresses it.
struct Baseline {
    name: &'static str,
    description: String,
    plan: Plan,
}

/// Step time of `plan`, derived and simulated with its own cost model.
pub fn step_time(plan: &Plan) -> Option<f64> {
    let model = CostModel::new(plan);
    let derived = crate::build::derive_with(plan, &model).ok()?;
    Some(simulate(&derived, &model).report.step_time_s)
}

pub fn compare(plan: &Plan, step: f64) -> Vec<Compared> {
    let baselines = if plan.schedule.iter().any(|s| s.skeleton.layout() == Layout::Replicated) {
        encoder_baselines(plan)
    } else {
        skeleton_baselines(plan)
    };
    baselines
        .into_iter()
        .filter_map(|b| {
            let t = step_time(&b.plan)?;
            Some(Compared { name: b.name.to_string(), step_time_s: t, speedup: t / step, description: b.description })
        })
        .collect()
}

fn encoder_baselines(plan: &Plan) -> Vec<Baseline> {
    let model = CostModel::new(plan);
    let p = plan.cluster.pp as usize;
    let enc = &plan.cut.regions[0];
    let enc_layers = (enc.layers.end - enc.layers.start) as usize;
    let all = folded::layer_weights(&model, 0..plan.model.layers());
    let mut out = Vec::new();
    // Megatron-style (LLaVA): the encoder inside pipeline stage 0, the LLM split so stage 0
    // is not the bottleneck, plain 1F1B.
    out.push(Baseline {
        name: "megatron-style",
        description: "encoder folded into stage 0, LLM layers balanced around it, 1F1B".into(),
        plan: folded::fold(plan, Skeleton::OneFOneB, enc_layers as u64),
    });
    // DistTrain-like: the encoder on its own leading stage(s) on dedicated ranks; the count
    // of encoder stages that balances the pipeline best.
    let best = (1..p.min(enc_layers + 1))
        .filter_map(|k| {
            let mut split = crate::derive::placement::balanced_split(
                0..enc_layers as u64,
                k,
                &folded::Weights(all[..enc_layers].to_vec()),
            );
            split.extend(crate::derive::placement::balanced_split(
                0..(all.len() - enc_layers) as u64,
                p - k,
                &folded::Weights(all[enc_layers..].to_vec()),
            ));
            let candidate = folded::single_region(plan, Skeleton::OneFOneB, split);
            step_time(&candidate).map(|t| (t, k, candidate))
        })
        .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    if let Some((_, k, plan)) = best {
        out.push(Baseline {
            name: "disttrain-like",
            description: format!("encoder on {k} dedicated leading stage(s), 1F1B"),
            plan,
        });
    }
    let body = plan.schedule[1..].to_vec();
    let with = |skeleton: Skeleton, owner: OwnerSpec| {
        let mut schedule = vec![RegionSchedule { skeleton, split: None, span: plan.schedule[0].span }];
        schedule.extend(body.iter().cloned());
        Plan { schedule, owner: Some(owner), ..plan.clone() }
    };
    let mut hyperparallel = with(Skeleton::whole_transpose(Fill::Prefix), OwnerSpec::RoundRobin);
    for region in hyperparallel.schedule.iter_mut().filter(|r| r.skeleton.layout() == Layout::Sharded) {
        let body = hyperparallel_body(region.skeleton);
        if body.chunks() != region.skeleton.chunks() {
            region.split = None;
        }
        region.skeleton = body;
    }
    out.push(Baseline {
        name: "hyperparallel",
        description:
            "HyperParallel's public transpose: encoder block before each rank's pipeline, round-robin owners, \
                      its interleaved 1F1B body"
                .into(),
        plan: hyperparallel,
    });
    out.push(Baseline {
        name: "transpose-round-robin",
        description: "this plan's transpose with round-robin owners".into(),
        plan: with(plan.schedule[0].skeleton, OwnerSpec::RoundRobin),
    });
    out
}

/// The body HyperParallel's `ScheduleMPipeTranspose` runs by default: its interleaved generator
/// (warmup 2(P-1-i) on rank i with one chunk), as many chunks as the stack has for the plan's.
fn hyperparallel_body(skeleton: Skeleton) -> Skeleton {
    let (Ok(body) | Err((body, _))) = crate::backend::native::body(crate::backend::Target::HyperParallel, skeleton);
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
