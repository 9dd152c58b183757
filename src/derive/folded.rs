//! The encoder folded into pipeline stage 0 with the LLM balanced around it: where Megatron-LM,
//! MindFormers and MindSpeed-MM put a modality encoder. The `megatron-style` baseline and a
//! target's nearest form (`nearest.rs`) are both this placement, so they share one construction.

use std::ops::Range;

use crate::algebra::{Cut, Region, Skeleton};
use crate::cost::Costs;
use crate::cost::model::CostModel;
use crate::plan::{Plan, RegionSchedule};

/// `plan` as one sharded region under `skeleton`: its first `glued` layers (the encoder) in
/// body stage 0, every stage balanced by the plan's cost model.
pub fn fold(plan: &Plan, skeleton: Skeleton, glued: u64) -> Plan {
    single_region(plan, skeleton, fold_split(plan, skeleton, glued))
}

/// The layers per stage of [`fold`]: the first `glued` in stage 0, every stage balanced by the
/// plan's cost model.
pub fn fold_split(plan: &Plan, skeleton: Skeleton, glued: u64) -> Vec<u64> {
    let weights = layer_weights(&CostModel::new(plan), 0..plan.model.layers());
    let count = plan.cluster.pp as usize * skeleton.chunks() as usize;
    split_with_head(&weights, glued as usize, count)
}

/// `plan` as Megatron-Core lays it out with no layout flag: the first `glued` layers (the
/// encoder) in body stage 0 beside that stage's share of the others, which split evenly over
/// every stage. Megatron-Core refuses a count the stages do not divide; the nearest even split
/// gives the remainder to the first stages, a layer each. None when a stage would be empty.
pub fn fold_even(plan: &Plan, skeleton: Skeleton, glued: u64) -> Option<Plan> {
    let count = plan.cluster.pp * u64::from(skeleton.chunks());
    let rest = plan.model.layers().checked_sub(glued).filter(|r| *r >= count)?;
    let mut split: Vec<u64> = (0..count).map(|i| rest / count + u64::from(i < rest % count)).collect();
    split[0] += glued;
    Some(single_region(plan, skeleton, split))
}

/// The whole model as one sharded region with a pinned split.
pub fn single_region(plan: &Plan, skeleton: Skeleton, split: Vec<u64>) -> Plan {
    let layers = plan.model.layers();
    let segments = plan.model.parts.iter().enumerate().map(|(i, p)| (i, 0..p.arch.layers())).collect();
    let name = plan.model.parts.iter().map(|p| p.name.as_str()).collect::<Vec<_>>().join(" + ");
    let span = plan.schedule.first().map(|s| s.span).unwrap_or_default();
    Plan {
        cut: Cut { regions: vec![Region { name, layers: 0..layers, segments }] },
        schedule: vec![RegionSchedule { skeleton, split: Some(split), span }],
        owner: None,
        ..plan.clone()
    }
}

/// Cost of each layer, forward and backward, for microbatch 0.
pub fn layer_weights(model: &dyn Costs, layers: Range<u64>) -> Vec<f64> {
    layers
        .map(|l| model.forward(l..l + 1, 0) + model.backward_input(l..l + 1, 0) + model.backward_weight(l..l + 1, 0))
        .collect()
}

/// The layouts a hand-balancer of Megatron-LM tries (`--decoder-first-pipeline-num-layers`):
/// the encoder in body stage 0 with k LLM layers, k from none up to an even share, the other
/// stages balanced by the plan's cost model.
pub fn hand_balanced(plan: &Plan, skeleton: Skeleton, glued: u64) -> Vec<Plan> {
    let weights = layer_weights(&CostModel::new(plan), 0..plan.model.layers());
    let count = plan.cluster.pp as usize * skeleton.chunks() as usize;
    let even = (weights.len() - glued as usize).div_ceil(count);
    head_splits(&weights, glued as usize, count)
        .into_iter()
        .take(even + 1)
        .map(|(_, split)| single_region(plan, skeleton, split))
        .collect()
}

/// The layout a hand-balancer writes as a layout string when ranks hold several stages (an
/// interleaved or V body): the encoder in body stage 0 and every stage sized so that the busiest
/// rank, summed over its stages, is light. None for a plan with fewer layers than stages.
pub fn rank_balanced(plan: &Plan, skeleton: Skeleton, glued: u64) -> Option<Plan> {
    let weights = layer_weights(&CostModel::new(plan), 0..plan.model.layers());
    let p = plan.cluster.pp as u32;
    let mapping = crate::skeletons::mapping(skeleton);
    let ranks: Vec<usize> =
        (0..p * skeleton.chunks()).map(|s| crate::skeletons::rank_of(mapping, p, s) as usize).collect();
    let split = balance_ranks(&weights, glued as usize, &ranks, p as usize)?;
    Some(single_region(plan, skeleton, split))
}

/// Stage sizes for stages on `ranks`, stage 0 holding the first `glued` weights and every
/// other stage at least one: from the stage-balanced split, one layer moves across a stage
/// boundary while that makes the rank loads, sorted from the busiest, smaller.
fn balance_ranks(weights: &[f64], glued: usize, ranks: &[usize], p: usize) -> Option<Vec<u64>> {
    let count = ranks.len();
    if weights.len() < glued + count - 1 {
        return None;
    }
    let loads = |sizes: &[u64]| {
        let mut load = vec![0.0; p];
        let mut at = 0;
        for (&n, &r) in sizes.iter().zip(ranks) {
            load[r] += weights[at..at + n as usize].iter().sum::<f64>();
            at += n as usize;
        }
        load.sort_by(|a, b| b.total_cmp(a));
        load
    };
    let lighter =
        |a: &[f64], b: &[f64]| a.iter().zip(b).find(|(x, y)| (*x - *y).abs() > 1e-12).is_some_and(|(x, y)| x < y);
    let least = |s: usize| if s == 0 { glued as u64 } else { 1 };
    let mut sizes = split_with_head(weights, glued, count);
    loop {
        let now = loads(&sizes);
        let moves = (0..count - 1).flat_map(|b| [(b, b + 1), (b + 1, b)]);
        let better = moves.filter(|&(from, _)| sizes[from] > least(from)).find_map(|(from, to)| {
            let mut next = sizes.clone();
            next[from] -= 1;
            next[to] += 1;
            lighter(&loads(&next), &now).then_some(next)
        });
        match better {
            Some(next) => sizes = next,
            None => return Some(sizes),
        }
    }
}

/// Splits `weights` into `count` stages, keeping the first `glued` weights (the encoder)
/// together in stage 0: the split whose costliest stage is cheapest; among those, the one whose
/// costliest other stage is cheapest (a heavy encoder leaves the LLM evenly spread behind it);
/// then the one with the fewest LLM layers in stage 0 (under 1F1B it keeps the most
/// microbatches of activations).
fn split_with_head(weights: &[f64], glued: usize, count: usize) -> Vec<u64> {
    let below = |x: f64, y: f64| x < y * (1.0 - 1e-9);
    let better = |a: &(f64, f64), b: &(f64, f64)| below(a.0, b.0) || (!below(b.0, a.0) && below(a.1, b.1));
    let mut best: Option<((f64, f64), Vec<u64>)> = None;
    for (key, split) in head_splits(weights, glued, count) {
        if best.as_ref().is_none_or(|(b, _)| better(&key, b)) {
            best = Some((key, split));
        }
    }
    best.expect("at least one split").1
}

/// Stage 0 takes the encoder and the first k LLM layers, for each k that leaves a layer to
/// every other stage, in increasing k; the others split the rest by cost. Each split comes
/// with its costliest stage and its costliest stage but the first.
fn head_splits(weights: &[f64], glued: usize, count: usize) -> Vec<((f64, f64), Vec<u64>)> {
    if count == 1 {
        return vec![((0.0, 0.0), vec![weights.len() as u64])];
    }
    let rest = &weights[glued..];
    let head: f64 = weights[..glued].iter().sum();
    (0..=rest.len().saturating_sub(count - 1))
        .map(|k| {
            let tail = Weights(rest[k..].to_vec());
            let sizes = super::placement::balanced_split(0..tail.0.len() as u64, count - 1, &tail);
            let mut start = 0;
            let others = sizes
                .iter()
                .map(|&n| {
                    let load: f64 = tail.0[start..start + n as usize].iter().sum();
                    start += n as usize;
                    load
                })
                .fold(0.0, f64::max);
            let first = head + rest[..k].iter().sum::<f64>();
            let mut split = vec![(glued + k) as u64];
            split.extend(sizes);
            ((first.max(others), others), split)
        })
        .collect()
}

/// Per-layer weights as a cost model: a layer's forward is its weight, backward is free.
pub struct Weights(pub Vec<f64>);

impl Costs for Weights {
    fn forward(&self, layers: Range<u64>, _: u32) -> f64 {
        layers.map(|l| self.0[l as usize]).sum()
    }
    fn backward_input(&self, _: Range<u64>, _: u32) -> f64 {
        0.0
    }
    fn backward_weight(&self, _: Range<u64>, _: u32) -> f64 {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_glued_head_stays_in_stage_zero() {
        // A heavy encoder (two layers of 5) and eight LLM layers of 1 over four stages: stage 0
        // takes the encoder alone, the LLM spreads over the rest.
        let weights = [5.0, 5.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0];
        let split = split_with_head(&weights, 2, 4);
        assert_eq!(split.iter().sum::<u64>(), 10);
        assert!(split[0] >= 2, "{split:?}");
        assert_eq!(split, vec![2, 2, 3, 3]);
        // An encoder heavier than any LLM stage takes stage 0 alone, the LLM is even behind it.
        let mut weights = vec![20.0];
        weights.extend([1.0; 12]);
        assert_eq!(split_with_head(&weights, 1, 4), vec![1, 4, 4, 4]);
    }

    #[test]
    fn a_rank_holding_the_encoder_gets_light_later_stages() {
        // A V body on two ranks: stages 0 and 3 on rank 0, 1 and 2 on rank 1. The encoder (4)
        // on stage 0 leaves rank 0 room for 2 of the 8 unit layers (both ranks at 6); the
        // stage-balanced split [1, 2, 3, 3] would load rank 0 with 7.
        let mut weights = vec![4.0];
        weights.extend([1.0; 8]);
        let split = balance_ranks(&weights, 1, &[0, 1, 1, 0], 2).unwrap();
        assert_eq!(split.iter().sum::<u64>(), 9);
        assert!(split[0] >= 1 && split[1..].iter().all(|n| *n >= 1), "{split:?}");
        assert_eq!(split[0] - 1 + split[3], 2, "{split:?}");
        // Too few layers for the stages: no layout.
        assert_eq!(balance_ranks(&[4.0, 1.0, 1.0], 1, &[0, 1, 1, 0], 2), None);
    }
}
