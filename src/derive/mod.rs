//! derive: (cut, schedule, model, cluster, batch) -> placement × collectives × order.
//!
//! The placement fixes each stage's layers and rank; the body's skeleton gives every rank its
//! canonical compute order; a `transpose` region adds the encoder's work and its seam; the
//! reductions and the optimizer step close the step. All of it is one order graph, lowered to
//! one instruction list per pipeline rank.

pub mod critical;
pub mod folded;
pub mod order;
pub mod owner;
pub mod placement;
pub mod skeletons;
pub mod transpose;

use std::collections::BTreeMap;

use crate::algebra::{Layout, OwnerSpec};
use crate::check::spec::Plan;
use crate::cost::Costs;
use crate::ir::{self, Dir, Group, Instr, Op, PlanIr};
use order::{OrderGraph, collective};
use placement::Placement;

pub struct Derived {
    pub placement: Placement,
    pub graph: OrderGraph,
    pub ir: PlanIr,
    /// With a transpose region: owners, and each rank's slack and encoder work.
    pub transpose: Option<transpose::Transposed>,
}

pub fn derive(plan: &Plan, costs: &dyn Costs) -> Derived {
    let by_microbatch = plan.owner.as_ref().is_none_or(|o| *o == OwnerSpec::ByMicrobatch);
    let replicated: Vec<usize> =
        (0..plan.schedule.len()).filter(|&i| plan.schedule[i].skeleton.layout() == Layout::Replicated).collect();
    if !by_microbatch || replicated.is_empty() {
        return derive_once(plan, costs, &Choice::default());
    }
    // `by_microbatch`: candidate owner maps — for the encoder the greedy min-max map, for both
    // the round-robin maps (and for a sink, all on the last body rank) — each placed slot by
    // slot and timed on the simulated step; the fastest wins (ties: the first). The encoder's
    // candidates are timed with the encoder frozen, so its choice, like the forward schedule,
    // is the same whether the encoder trains or not.
    let m = plan.batch.microbatches as u32;
    let p = plan.cluster.pp as u32;
    let round_robin: Vec<u32> = (0..m).map(|mb| mb % p).collect();
    let reversed: Vec<u32> = (0..m).map(|mb| p - 1 - mb % p).collect();
    let mut choice = Choice::default();
    let has_encoder = replicated.first() == Some(&0);
    let has_sink = replicated.last().is_some_and(|&i| i > 0);
    if has_encoder {
        let forward_only = Plan {
            model: crate::check::spec::Model {
                parts: plan
                    .model
                    .parts
                    .iter()
                    .map(|part| crate::check::spec::Part {
                        frozen: part.frozen || part.arch.is_encoder(),
                        ..part.clone()
                    })
                    .collect(),
                ..plan.model.clone()
            },
            ..plan.clone()
        };
        let probe = Choice { encoder: None, sink: has_sink.then(|| round_robin.clone()) };
        let greedy = derive_once(&forward_only, costs, &probe).transpose.map(|t| t.owners).unwrap_or_default();
        let best = fastest(&[greedy, round_robin.clone(), reversed.clone()], costs, |owners| {
            derive_once(&forward_only, costs, &Choice { encoder: Some(owners.clone()), sink: probe.sink.clone() })
        });
        choice.encoder = Some(best);
    }
    if has_sink {
        let placed = placement::place(plan, costs);
        let last_rank = vec![placed.rank_of_body(placed.body.shape.stages() - 1); m as usize];
        let encoder = choice.encoder.clone();
        let best = fastest(&[round_robin, reversed, last_rank], costs, |owners| {
            derive_once(plan, costs, &Choice { encoder: encoder.clone(), sink: Some(owners.clone()) })
        });
        choice.sink = Some(best);
    }
    derive_once(plan, costs, &choice)
}

/// Owner maps fixed by derive itself, overriding the plan's `owner` per replicated region.
#[derive(Clone, Debug, Default)]
struct Choice {
    encoder: Option<Vec<u32>>,
    sink: Option<Vec<u32>>,
}

/// The candidate whose derived plan simulates fastest (compute times, transfers free).
fn fastest(candidates: &[Vec<u32>], costs: &dyn Costs, derive_with: impl Fn(&Vec<u32>) -> Derived) -> Vec<u32> {
    let mut best = (f64::INFINITY, 0usize);
    for (i, owners) in candidates.iter().enumerate() {
        let d = derive_with(owners);
        let stages: Vec<std::ops::Range<u64>> = d.placement.stages.iter().map(|s| s.layers.clone()).collect();
        let t = crate::ir::interpret::run(&d.ir, &ComputeOnly { costs, stages: &stages })
            .map(|t| t.makespan())
            .unwrap_or(f64::INFINITY);
        if t < best.0 * (1.0 - 1e-9) {
            best = (t, i);
        }
    }
    candidates[best.1].clone()
}

/// Compute durations from the cost model, transfers free: how derive times a candidate.
struct ComputeOnly<'a> {
    costs: &'a dyn Costs,
    stages: &'a [std::ops::Range<u64>],
}

impl crate::ir::interpret::Durations for ComputeOnly<'_> {
    fn instruction(&self, _: u32, i: &Instr) -> f64 {
        match (i.stage, i.mb) {
            (Some(s), Some(mb)) if i.op.is_compute() => {
                crate::cost::compute_time(self.costs, i.op, self.stages[s as usize].clone(), mb)
            }
            _ => 0.0,
        }
    }

    fn transfer(&self, _: u32, _: u32, _: &Instr) -> f64 {
        0.0
    }
}

fn derive_once(plan: &Plan, costs: &dyn Costs, choice: &Choice) -> Derived {
    let placement = placement::place(plan, costs);
    let mut g =
        OrderGraph::new(placement.body.shape.ranks, placement.stages.len() as u32, placement.body.shape.microbatches);
    body(&mut g, &placement);
    let transposed =
        placement.encoder.map(|enc| transpose::add(&mut g, plan, &placement, &enc, costs, choice.encoder.as_deref()));
    let m = placement.body.shape.microbatches;
    let sink_owners = placement.sink.map(|sink| {
        let owners = match (&choice.sink, &plan.owner) {
            (Some(o), _) => o.clone(),
            (None, Some(OwnerSpec::Explicit(list))) => list.iter().map(|r| *r as u32).collect(),
            _ => (0..m).map(|mb| mb % placement.body.shape.ranks).collect(),
        };
        transpose::add_sink(&mut g, &placement, &sink, &owners, costs);
        (placement.regions[sink.region].name.clone(), owners)
    });
    reductions(&mut g, plan, &placement);
    g.link_chains();
    let lists = g.lower();
    let mut ir = assemble(plan, &placement, transposed.as_ref(), lists);
    if let Some((name, owners)) = sink_owners {
        ir.owner.insert(name, owners);
    }
    Derived { placement, graph: g, ir, transpose: transposed }
}

/// The body's events in each rank's canonical order, and the activation and gradient hand-offs
/// between consecutive stages.
fn body(g: &mut OrderGraph, placement: &Placement) {
    let shape = placement.body.shape;
    let first = placement.body.first;
    let backward = placement.stages.iter().any(|s| s.rank.is_some() && s.backward);
    let orders = skeletons::order(placement.body.skeleton, shape, backward);
    for (rank, tasks) in orders.into_iter().enumerate() {
        for task in tasks {
            let stage = &placement.body_stage(task.stage);
            if task.op != Op::Forward && !stage.backward {
                continue;
            }
            let mut instr = Instr::compute(task.op, first + task.stage, task.mb);
            instr.overlap = task.overlap;
            let node = g.node(instr, Some(rank as u32));
            g.chains[rank].push(node);
        }
    }
    let stages = shape.stages();
    for b in 0..stages {
        let s = first + b;
        for mb in 0..shape.microbatches {
            let forward = g.index_of(Op::Forward, s, mb);
            if b > 0 {
                let previous = g.index_of(Op::Forward, s - 1, mb);
                g.data(previous, forward, Dir::Act);
            }
            let Some(grad) = g.find(Op::BackwardInput, s, mb).or_else(|| g.find(Op::Backward, s, mb)) else { continue };
            g.data(forward, grad, Dir::Act);
            if b + 1 < stages {
                let next = g.find(Op::BackwardInput, s + 1, mb).or_else(|| g.find(Op::Backward, s + 1, mb));
                if let Some(next) = next {
                    g.data(next, grad, Dir::Grad);
                }
            }
            if let Some(weight) = g.find(Op::BackwardWeight, s, mb) {
                g.data(grad, weight, Dir::Grad);
            }
        }
    }
}

/// Gradient reductions and the optimizer step that end every rank's step.
fn reductions(g: &mut OrderGraph, plan: &Plan, placement: &Placement) {
    let dp = plan.cluster.dp > 1;
    let ranks = placement.body.shape.ranks;
    for r in 0..ranks {
        for (i, region) in placement.regions.iter().enumerate() {
            let holds = placement.stages.iter().any(|s| s.region == i && s.rank == Some(r));
            if dp && region.layout == Layout::Sharded && region.trainable && holds {
                let node = g.node(Instr::all_reduce(Group::Dp, &region.name), Some(r));
                g.chains[r as usize].push(node);
            }
        }
    }
    for replica in [placement.encoder, placement.sink].into_iter().flatten().filter(|e| e.trainable) {
        let name = placement.regions[replica.region].name.clone();
        collective(g, Group::Pp, &name);
        if dp {
            for r in 0..ranks {
                let node = g.node(Instr::all_reduce(Group::Dp, &name), Some(r));
                g.chains[r as usize].push(node);
            }
        }
    }
    if placement.regions.iter().any(|r| r.trainable) {
        for r in 0..ranks {
            let node = g.node(Instr::optimizer_step(), Some(r));
            g.chains[r as usize].push(node);
        }
    }
}

fn assemble(
    plan: &Plan,
    placement: &Placement,
    transposed: Option<&transpose::Transposed>,
    lists: Vec<Vec<Instr>>,
) -> PlanIr {
    let c = &plan.cluster;
    let regions = placement
        .regions
        .iter()
        .map(|r| ir::RegionIr {
            name: r.name.clone(),
            layout: r.layout,
            skeleton: r.skeleton.to_string(),
            trainable: r.trainable,
            backward: r.backward,
            layers: [r.layers.start, r.layers.end],
        })
        .collect();
    let stages = placement
        .stages
        .iter()
        .map(|s| ir::StageIr {
            id: s.id,
            region: placement.regions[s.region].name.clone(),
            ranks: s.rank.is_none().then(|| "all".to_string()),
            rank: s.rank,
            layers: [s.layers.start, s.layers.end],
            backward: s.backward,
        })
        .collect();
    let mut owner = BTreeMap::new();
    if let (Some(enc), Some(t)) = (placement.encoder, transposed) {
        owner.insert(placement.regions[enc.region].name.clone(), t.owners.clone());
    }
    let mut rank_map = Vec::with_capacity(c.devices as usize);
    for pp in 0..c.pp {
        for dp in 0..c.dp {
            for tp in 0..c.tp {
                let global = (pp * c.dp + dp) * c.tp + tp;
                rank_map.push(ir::RankCoord { global: global as u32, dp: dp as u32, pp: pp as u32, tp: tp as u32 });
            }
        }
    }
    PlanIr {
        format: ir::FORMAT.to_string(),
        version: ir::VERSION,
        source: plan.source.clone(),
        pipeline: ir::Pipeline {
            ranks: c.pp as u32,
            microbatches: plan.batch.microbatches as u32,
            dp: c.dp as u32,
            tp: c.tp as u32,
            mapping: placement.body.mapping,
        },
        regions,
        stages,
        owner,
        rank_map,
        ranks: lists
            .into_iter()
            .enumerate()
            .map(|(r, instructions)| ir::RankIr { rank: r as u32, instructions })
            .collect(),
    }
}
