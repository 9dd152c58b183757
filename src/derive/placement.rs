//! Placement: which layers each stage holds and which rank holds each stage. A sharded
//! region's layers split into P·v contiguous stages balanced by cost (unless pinned); a
//! replicated region is one stage held by every rank.

use std::ops::Range;

use crate::algebra::{Chunks, Fill, Layout, Skeleton, skeleton::body_skeleton};
use crate::cost::Costs;
use crate::ir::Mapping;
use crate::plan::{Plan, Recompute};
use crate::skeletons::{self, Shape};

#[derive(Clone, Debug, PartialEq)]
pub struct Stage {
    pub id: u32,
    pub region: usize,
    /// `None`: every rank (a replicated region).
    pub rank: Option<u32>,
    pub layers: Range<u64>,
    /// Whether backward events exist for this stage.
    pub backward: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct RegionInfo {
    pub name: String,
    pub layout: Layout,
    pub skeleton: Skeleton,
    pub trainable: bool,
    pub backward: bool,
    pub layers: Range<u64>,
}

/// The sharded stages as one pipeline.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Body {
    pub skeleton: Skeleton,
    pub shape: Shape,
    pub mapping: Mapping,
    /// Global id of body stage 0.
    pub first: u32,
}

/// A replicated region run by `transpose` at the source: the encoder.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Encoder {
    pub region: usize,
    /// The first of its stages: `chunks` consecutive stages, each a run of the region's layers.
    pub stage: u32,
    pub chunks: u32,
    pub fill: Fill,
    pub trainable: bool,
    /// Encodes the next step's microbatches (frozen encoders only).
    pub lookahead: bool,
    /// Every layer recomputes its activations in backward (`recompute = full`): a chunk's
    /// backward needs only the chunk's input, so it may run on another rank than its forward.
    pub recomputes: bool,
}

impl Encoder {
    pub fn stages(&self) -> std::ops::Range<u32> {
        self.stage..self.stage + self.chunks
    }

    pub fn last_stage(&self) -> u32 {
        self.stage + self.chunks - 1
    }
}

/// A replicated region after the body (a sink-side generator or head): one stage, run right
/// after the body's last stage, so nothing to chunk, fill or look ahead.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sink {
    pub region: usize,
    pub stage: u32,
    pub trainable: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Placement {
    pub regions: Vec<RegionInfo>,
    pub stages: Vec<Stage>,
    pub body: Body,
    pub encoder: Option<Encoder>,
    pub sink: Option<Sink>,
}

impl Placement {
    pub fn body_stage(&self, b: u32) -> &Stage {
        &self.stages[(self.body.first + b) as usize]
    }

    pub fn rank_of_body(&self, b: u32) -> u32 {
        skeletons::rank_of(self.body.mapping, self.body.shape.ranks, b)
    }
}

/// The placement with whole encodes; `chunks = auto` is resolved by derive, which places
/// each candidate count with [`place_chunked`].
pub fn place(plan: &Plan, costs: &dyn Costs) -> Placement {
    place_chunked(plan, costs, 1)
}

/// The chunk count a plan's encoder asks for, `auto_chunks` where it leaves the choice to derive.
pub fn chunk_count(plan: &Plan, auto_chunks: u32) -> u32 {
    match plan.schedule.first().map(|s| s.skeleton) {
        Some(Skeleton::Transpose { chunks: Chunks::Fixed(n), .. }) => n,
        _ => auto_chunks,
    }
}

pub fn place_chunked(plan: &Plan, costs: &dyn Costs, auto_chunks: u32) -> Placement {
    let p = plan.cluster.pp as u32;
    let m = plan.batch.microbatches as u32;
    let mut regions = Vec::new();
    let mut upstream_trainable = false;
    for (i, (region, sched)) in plan.cut.regions.iter().zip(&plan.schedule).enumerate() {
        let trainable = plan.region_parts(i).any(|part| !part.frozen);
        upstream_trainable |= trainable;
        regions.push(RegionInfo {
            name: region.name.clone(),
            layout: sched.skeleton.layout(),
            skeleton: sched.skeleton,
            trainable,
            backward: upstream_trainable,
            layers: region.layers.clone(),
        });
    }
    let sharded: Vec<Skeleton> = regions.iter().filter(|r| r.layout == Layout::Sharded).map(|r| r.skeleton).collect();
    let (skeleton, chunks) =
        body_skeleton(&sharded).expect("the checker admits only plans with one body skeleton (E0317)");
    // The first trainable layer: a stage needs backward events iff it ends after it (a frozen
    // stage downstream of trainable layers still passes gradients back; upstream of all of
    // them it has no backward at all).
    let mut first_trainable = u64::MAX;
    let mut offset = 0;
    for part in &plan.model.parts {
        if !part.frozen {
            first_trainable = first_trainable.min(offset);
        }
        offset += part.arch.layers();
    }
    let mut stages = Vec::new();
    let mut encoder = None;
    let mut sink = None;
    let mut first = None;
    for (i, (region, info)) in plan.cut.regions.iter().zip(&regions).enumerate() {
        let id = stages.len() as u32;
        if info.layout == Layout::Replicated {
            let Skeleton::Transpose { fill, lookahead, .. } = info.skeleton else {
                unreachable!("replicated means transpose")
            };
            let chunks = if first.is_none() { chunk_count(plan, auto_chunks) } else { 1 };
            if first.is_none() {
                let recomputes = plan.region_parts(i).all(|part| part.recompute == Recompute::Full);
                let trainable = info.trainable;
                encoder = Some(Encoder { region: i, stage: id, chunks, fill, trainable, lookahead, recomputes });
            } else {
                sink = Some(Sink { region: i, stage: id, trainable: info.trainable });
            }
            let mut start = region.layers.start;
            for size in balanced_split(region.layers.clone(), chunks as usize, costs) {
                let id = stages.len() as u32;
                let backward = start + size > first_trainable;
                stages.push(Stage { id, region: i, rank: None, layers: start..start + size, backward });
                start += size;
            }
            continue;
        }
        let first_id = *first.get_or_insert(id);
        let count = p * info.skeleton.chunks();
        let sizes = match &plan.schedule[i].split {
            Some(split) => split.clone(),
            None => balanced_split(region.layers.clone(), count as usize, costs),
        };
        let mut start = region.layers.start;
        for size in sizes {
            let id = stages.len() as u32;
            let body = id - first_id;
            let rank = skeletons::rank_of(skeletons::mapping(skeleton), p, body);
            stages.push(Stage {
                id,
                region: i,
                rank: Some(rank),
                layers: start..start + size,
                backward: start + size > first_trainable,
            });
            start += size;
        }
    }
    let body = Body {
        skeleton,
        shape: Shape { ranks: p, chunks, microbatches: m },
        mapping: skeletons::mapping(skeleton),
        first: first.expect("the checker admits only plans with a sharded region (E0313)"),
    };
    Placement { regions, stages, body, encoder, sink }
}

/// Splits `layers` into `count` contiguous stages minimising the costliest stage (forward
/// plus backward of microbatch 0). Among the optimal splits, earlier stages get fewer
/// layers: under 1F1B they hold the most microbatches of activations.
pub fn balanced_split(layers: Range<u64>, count: usize, costs: &dyn Costs) -> Vec<u64> {
    let weights: Vec<f64> = layers
        .clone()
        .map(|l| costs.forward(l..l + 1, 0) + costs.backward_input(l..l + 1, 0) + costs.backward_weight(l..l + 1, 0))
        .collect();
    let n = weights.len();
    // Fewest stages a bound allows, packing from the back.
    let stages_needed = |bound: f64| {
        let (mut stages, mut current) = (1, 0.0);
        for &w in weights.iter().rev() {
            if current + w > bound && current > 0.0 {
                stages += 1;
                current = 0.0;
            }
            current += w;
        }
        stages
    };
    let (mut lo, mut hi) = (weights.iter().cloned().fold(0.0, f64::max), weights.iter().sum::<f64>());
    for _ in 0..100 {
        let mid = (lo + hi) / 2.0;
        if stages_needed(mid) <= count { hi = mid } else { lo = mid }
    }
    let bound = hi * (1.0 + 1e-9);
    // Pack from the back: each stage takes layers until it reaches its share of what is left
    // (so the remainder lands on later stages) without passing the bound, leaving at least
    // one layer for every earlier stage.
    let mut sizes = vec![0u64; count];
    let mut end = n;
    let mut remaining: f64 = weights.iter().sum();
    for stage in (1..count).rev() {
        let target = remaining / (stage + 1) as f64;
        let mut start = end;
        let mut load = 0.0;
        while start > stage && (start == end || (load < target && load + weights[start - 1] <= bound)) {
            load += weights[start - 1];
            start -= 1;
        }
        sizes[stage] = (end - start) as u64;
        remaining -= load;
        end = start;
    }
    sizes[0] += end as u64;
    sizes
}

#[cfg(test)]
mod tests {
    use super::balanced_split;
    use crate::derive::folded::Weights;

    #[test]
    fn even_layers_split_evenly_with_the_remainder_late() {
        let w = Weights(vec![1.0; 36]);
        assert_eq!(balanced_split(0..36, 8, &w), [4, 4, 4, 4, 5, 5, 5, 5]);
        assert_eq!(balanced_split(0..8, 8, &w), [1; 8]);
    }

    #[test]
    fn heavy_layers_get_stages_of_their_own() {
        let w = Weights(vec![10.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 10.0]);
        let split = balanced_split(0..8, 3, &w);
        assert_eq!(split.iter().sum::<u64>(), 8);
        assert_eq!(split, [1, 6, 1]);
    }
}
