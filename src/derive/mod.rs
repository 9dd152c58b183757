//! derive: (cut, schedule, model, cluster, batch) -> placement × collectives × order.
//!
//! The placement fixes each stage's layers and rank; the body's skeleton gives every rank its
//! canonical compute order; a `transpose` region adds the encoder's work and its seam; the
//! reductions and the optimizer step close the step. All of it is one order graph, lowered to
//! one instruction list per pipeline rank.

pub mod choose;
pub mod critical;
pub mod folded;
pub mod nearest;
pub mod order;
pub mod owner;
pub mod placement;
pub mod resolved;
pub mod transpose;

use std::collections::BTreeMap;

use crate::algebra::{Fill, Layout, OwnerSpec};
use crate::cost::Costs;
use crate::ir::{self, Dir, Group, Instr, Op, PlanIr};
use crate::plan::Plan;
use order::{OrderGraph, collective};
use placement::Placement;
use resolved::{Choices, Resolved};

/// A plan lowered: its per-rank lists and what derive estimated of them, all that the
/// simulator, the backends and the IDE read besides the resolved plan.
pub struct Derived {
    pub ir: PlanIr,
    pub estimates: Estimates,
}

/// What derive estimated while lowering, for the report.
#[derive(Clone, Debug, PartialEq)]
pub struct Estimates {
    /// The longest chain of data dependencies of the order graph, each event at its duration
    /// and each cross-rank hand-off at its transfer time: what unlimited ranks could not beat.
    pub critical_path: f64,
    /// With a transpose encoder: each rank's warmup slack w_r and encoder work E_r, and the
    /// bounds the placement is measured against.
    pub encoder: Option<EncoderEstimates>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct EncoderEstimates {
    pub slack: Vec<f64>,
    pub work: Vec<f64>,
    pub bounds: transpose::Bounds,
}

/// The per-rank lists of a resolved plan: a function of the plan and its choices alone.
pub fn lower(resolved: &Resolved, costs: &dyn Costs) -> Derived {
    let plan = resolved.effective();
    let lowering = lower_with(&plan, costs, &resolved.choices);
    derived(lowering, &plan, costs)
}

fn derived(lowering: Lowering, plan: &Plan, costs: &dyn Costs) -> Derived {
    let critical_path = critical::data_path(&lowering.graph, &lowering.placement, plan, costs);
    let encoder = lowering.transpose.map(|t| EncoderEstimates { slack: t.slack, work: t.work, bounds: t.bounds });
    Derived { ir: lowering.ir, estimates: Estimates { critical_path, encoder } }
}

/// A plan lowered with its choices, with the placement and the order graph it was lowered
/// through: what the search times its candidates on.
pub(crate) struct Lowering {
    pub placement: Placement,
    pub graph: OrderGraph,
    pub ir: PlanIr,
    pub transpose: Option<transpose::Transposed>,
}

pub(crate) fn lower_with(plan: &Plan, costs: &dyn Costs, choice: &Choices) -> Lowering {
    lower_placed(placed(plan, costs, choice.chunks), plan, costs, (choice, owner::Effort::Full))
}

/// The stages placed and the body's events in each rank's canonical order: what does not
/// depend on image sizes, kept by `adaptive` across batches.
#[derive(Clone)]
pub struct Placed {
    placement: Placement,
    graph: OrderGraph,
}

impl Placed {
    /// The room each place of the body order leaves its microbatch's encoder work, timed with
    /// `costs`; `None` without an encoder.
    pub fn room(&self, costs: &dyn Costs) -> Option<transpose::Room> {
        transpose::room(&self.graph, &self.placement, costs)
    }

    /// Microbatch `mb`'s encoder work with `costs`: its whole encode, and a trainable encoder's
    /// backward of it.
    pub fn encoder_work(&self, costs: &dyn Costs, mb: u32) -> (f64, f64) {
        transpose::encoder_work(&self.placement, costs, mb)
    }
}

/// The stages of `plan` placed with `chunks` encoder chunks, and its body ordered.
pub fn placed(plan: &Plan, costs: &dyn Costs, chunks: u32) -> Placed {
    let placement = placement::place_chunked(plan, costs, chunks.max(1));
    let mut graph =
        OrderGraph::new(placement.body.shape.ranks, placement.stages.len() as u32, placement.body.shape.microbatches);
    // At most three events a stage and microbatch (forward, backward input and weight), each
    // with its hand-offs: room made once, where the graph copied itself as it grew.
    let per_microbatch: usize = placement.stages.iter().map(|s| if s.backward { 3 } else { 1 }).sum();
    let events = per_microbatch * placement.body.shape.microbatches as usize;
    graph.graph.reserve_nodes(events);
    graph.graph.reserve_edges(2 * events);
    body(&mut graph, &placement);
    Placed { placement, graph }
}

/// The per-rank lists of one batch of a resolved plan, on the stages and body order of its
/// static plan (`placed`, the same chunk count), the encoder's owners and slots found again
/// with `effort` for the batch's costs (those the resolved plan holds are ignored).
pub fn lower_batch(placed: Placed, resolved: &Resolved, costs: &dyn Costs, effort: owner::Effort) -> Derived {
    let plan = resolved.effective();
    let choice = Choices { encoder_schedule: None, ..resolved.choices.clone() };
    let lowering = lower_placed(placed, &plan, costs, (&choice, effort));
    derived(lowering, &plan, costs)
}

fn lower_placed(
    placed: Placed,
    plan: &Plan,
    costs: &dyn Costs,
    (choice, effort): (&Choices, owner::Effort),
) -> Lowering {
    let Placed { placement, graph: mut g } = placed;
    let transposed = placement.encoder.map(|enc| {
        let placing = transpose::Placing {
            owner: choice.encoder_owner.as_ref(),
            parts: &choice.parts,
            chosen: choice.encoder_schedule.as_ref(),
            effort,
        };
        transpose::add(&mut g, plan, &placement, &enc, costs, &placing)
    });
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
    let lists = g.lower();
    let mut ir = assemble(plan, &placement, transposed.as_ref(), lists);
    if let Some((name, owners)) = sink_owners {
        ir.owner.insert(name, owners);
    }
    Lowering { placement, graph: g, ir, transpose: transposed }
}

/// The body's events in each rank's canonical order, and the activation and gradient hand-offs
/// between consecutive stages.
fn body(g: &mut OrderGraph, placement: &Placement) {
    let shape = placement.body.shape;
    let first = placement.body.first;
    let backward = placement.stages.iter().any(|s| s.rank.is_some() && s.backward);
    let orders = crate::skeletons::order(placement.body.skeleton, shape, backward);
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
    // Trainable replicated regions: (region, the encoder when its gradients go in buckets).
    let encoder = placement.encoder.filter(|e| e.trainable);
    let buckets = encoder.filter(|e| e.chunks > 1 && e.fill == Fill::Slack);
    let sink = placement.sink.filter(|s| s.trainable).map(|s| (s.region, None));
    for (region, buckets) in encoder.map(|e| (e.region, buckets)).into_iter().chain(sink) {
        let name = placement.regions[region].name.clone();
        match buckets {
            Some(encoder) => gradient_buckets(g, &encoder, &name),
            None => {
                collective(g, Group::Pp, &name);
            }
        }
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

/// A chunked encoder's gradients are reduced over the pipeline group one chunk at a time, each
/// as soon as every rank has run its last backward of that chunk, beside the backward of the
/// chunks before it; the optimizer step waits for all of them.
fn gradient_buckets(g: &mut OrderGraph, encoder: &placement::Encoder, region: &str) {
    for stage in encoder.stages().rev() {
        let node = g.node(Instr::all_reduce_bucket(Group::Pp, region, stage), None);
        for chain in &mut g.chains {
            let last = chain.iter().rposition(|n| {
                let i = &g.graph[*n].instr;
                i.op == Op::Backward && i.stage == Some(stage)
            });
            chain.insert(last.map_or(chain.len(), |k| k + 1), node);
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
            images: plan.batch.images as u32,
        },
        regions,
        stages,
        owner,
        rank_map,
        ranks: lists
            .into_iter()
            .enumerate()
            .map(|(r, instructions)| ir::RankIr {
                rank: r as u32,
                prologue: transposed.map(|t| t.prologue[r].clone()).unwrap_or_default(),
                instructions,
            })
            .collect(),
    }
}
