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

use crate::algebra::{Chunks, Fill, Layout, OwnerSpec, Skeleton};
use crate::cost::Costs;
use crate::ir::{self, Dir, Group, Instr, Op, PlanIr};
use crate::plan::Plan;
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
    let replicated: Vec<usize> =
        (0..plan.schedule.len()).filter(|&i| plan.schedule[i].skeleton.layout() == Layout::Replicated).collect();
    if replicated.is_empty() {
        return derive_once(plan, costs, &Choice::default());
    }
    let m = plan.batch.microbatches as u32;
    let p = plan.cluster.pp as u32;
    let round_robin: Vec<u32> = (0..m).map(|mb| mb % p).collect();
    let has_encoder = replicated.first() == Some(&0);
    let has_sink = replicated.last().is_some_and(|&i| i > 0);
    let mut choice = Choice::default();
    let mut plan = std::borrow::Cow::Borrowed(plan);
    if has_encoder {
        let probe = Choice { sink: has_sink.then(|| round_robin.clone()), ..Choice::default() };
        let (written, chosen) = encoder_form(&plan, costs, &probe);
        plan.to_mut().schedule[0].skeleton = written;
        choice = Choice { sink: None, ..chosen };
    }
    if has_sink {
        let placed = placement::place_chunked(&plan, costs, choice.chunks);
        let last_rank = vec![placed.rank_of_body(placed.body.shape.stages() - 1); m as usize];
        let reversed: Vec<u32> = (0..m).map(|mb| p - 1 - mb % p).collect();
        let best = fastest(&[round_robin, reversed, last_rank], costs, |owners| {
            derive_once(&plan, costs, &Choice { sink: Some(owners.clone()), ..choice.clone() })
        });
        choice.sink = Some(best);
    }
    derive_once(&plan, costs, &choice)
}

/// The encoder's form that simulates fastest: the plan's own `transpose` with each chunk count
/// `chunks = auto` allows, and with `owner by_microbatch` also its round-robin map and
/// HyperParallel's prefix form, so that a plan never runs slower than either. Ties go to the
/// earlier candidate: fewer chunks, the plan's own form.
fn encoder_form(plan: &Plan, costs: &dyn Costs, probe: &Choice) -> (Skeleton, Choice) {
    let written = plan.schedule[0].skeleton;
    let Skeleton::Transpose { fill, chunks, .. } = written else { unreachable!("the encoder is replicated") };
    let layers = plan.cut.regions[0].layers.end - plan.cut.regions[0].layers.start;
    let counts: Vec<u32> = match (chunks, fill) {
        (Chunks::Fixed(n), _) => vec![n],
        (Chunks::Auto, Fill::Prefix) => vec![1],
        (Chunks::Auto, Fill::Slack) => chunk_candidates(layers),
    };
    let by_microbatch = plan.owner.as_ref().is_none_or(|o| *o == OwnerSpec::ByMicrobatch);
    let mut forms: Vec<(Skeleton, Option<OwnerSpec>, u32)> = counts.iter().map(|&n| (written, None, n)).collect();
    if by_microbatch && fill == Fill::Slack {
        forms.extend(counts.iter().map(|&n| (written, Some(OwnerSpec::RoundRobin), n)));
        forms.push((Skeleton::whole_transpose(Fill::Prefix), Some(OwnerSpec::RoundRobin), 1));
    }
    let mut best: Option<(f64, usize)> = None;
    for (i, (skeleton, owner, n)) in forms.iter().enumerate() {
        let mut candidate = plan.clone();
        candidate.schedule[0].skeleton = *skeleton;
        if let Some(o) = owner {
            candidate.owner = Some(o.clone());
        }
        let t = candidate_step(&derive_once(&candidate, costs, &Choice { chunks: *n, ..probe.clone() }), costs);
        if best.is_none_or(|(b, _)| t < b * (1.0 - 1e-6)) {
            best = Some((t, i));
        }
    }
    let (best, i) = best.expect("at least the plan's own form");
    let (skeleton, owner, n) = forms[i].clone();
    let chosen = Choice { chunks: n, encoder_owner: owner, ..probe.clone() };
    let mut candidate = plan.clone();
    candidate.schedule[0].skeleton = skeleton;
    let (split_step, parts) = image_splits(&candidate, &chosen, best, costs);
    if parts.is_empty() {
        return (skeleton, chosen);
    }
    // Parts are smaller than whole encodes: they may fit the idle time in fewer chunks.
    let mut best = (split_step, chosen.chunks);
    for &n in counts.iter().filter(|&&n| n != chosen.chunks) {
        let t = candidate_step(
            &derive_once(&candidate, costs, &Choice { chunks: n, parts: parts.clone(), ..chosen.clone() }),
            costs,
        );
        if t < best.0 * (1.0 - 1e-6) {
            best = (t, n);
        }
    }
    (skeleton, Choice { parts, chunks: best.1, ..chosen })
}

/// Where splitting a microbatch's images across ranks pays: the first microbatches (their
/// encodes hold the body back) and, for a trainable encoder, the last ones (their backwards
/// end the step). For each end in turn: how many microbatches (1, 2, 4, … or all), each split
/// over as many ranks as the images allow, then over how many ranks (2, 4, …: fewer parts go
/// only where the idle time is), each timed against the best so far, starting from `unsplit`,
/// the step without any split.
fn image_splits(plan: &Plan, chosen: &Choice, unsplit: f64, costs: &dyn Costs) -> (f64, Vec<u32>) {
    let Skeleton::Transpose { fill: Fill::Slack, lookahead: false, .. } = plan.schedule[0].skeleton else {
        return (unsplit, Vec::new());
    };
    let m = plan.batch.microbatches as usize;
    let most = (plan.batch.images as u32).min(plan.cluster.pp as u32);
    if most <= 1 {
        return (unsplit, Vec::new());
    }
    let trainable = plan.region_parts(0).any(|part| !part.frozen);
    let doubling =
        |limit: usize| std::iter::successors(Some(1usize), |n| n.checked_mul(2)).take_while(move |n| *n < limit);
    let counts: Vec<usize> = doubling(m).chain([m]).collect();
    let widths: Vec<u32> = doubling(most as usize).skip(1).map(|n| n as u32).collect();
    let mut best = (unsplit, vec![1; m]);
    let try_split = |best: &mut (f64, Vec<u32>), split: Vec<u32>| {
        let t = candidate_step(&derive_once(plan, costs, &Choice { parts: split.clone(), ..chosen.clone() }), costs);
        if t < best.0 * (1.0 - 1e-6) {
            *best = (t, split);
        }
    };
    let ends: &[bool] = if trainable { &[false, true] } else { &[false] };
    for &last in ends {
        let base = best.1.clone();
        let with = |j: usize, parts: u32| {
            let mut split = base.clone();
            split[if last { m - j..m } else { 0..j }].iter_mut().for_each(|k| *k = parts);
            split
        };
        for &j in &counts {
            try_split(&mut best, with(j, most));
        }
        let j = counts.iter().copied().find(|&j| best.1 == with(j, most));
        for (j, &parts) in j.into_iter().flat_map(|j| widths.iter().map(move |p| (j, p))) {
            try_split(&mut best, with(j, parts));
        }
    }
    if best.1.iter().all(|k| *k == 1) { (unsplit, Vec::new()) } else { best }
}

/// Chunk counts worth trying for an encoder of `layers` layers: whole encodes, halvings down to
/// single layers, and one layer per chunk.
fn chunk_candidates(layers: u64) -> Vec<u32> {
    let layers = layers.max(1) as u32;
    let mut counts: Vec<u32> =
        std::iter::successors(Some(1u32), |n| n.checked_mul(2)).take_while(|n| *n < layers).collect();
    counts.push(layers);
    counts
}

/// Choices derive makes where the plan leaves them open.
#[derive(Clone, Debug, Default)]
struct Choice {
    /// Chunks of the encoder's work, where the plan says `auto` (0: the plan's own count, or 1).
    chunks: u32,
    /// An owner map for the encoder in place of the plan's.
    encoder_owner: Option<OwnerSpec>,
    /// The sink's owner map.
    sink: Option<Vec<u32>>,
    /// Per microbatch: the parts its images are split into across ranks (empty: all whole).
    parts: Vec<u32>,
}

/// The candidate whose derived plan runs fastest (compute and transfer times).
fn fastest(candidates: &[Vec<u32>], costs: &dyn Costs, derive_with: impl Fn(&Vec<u32>) -> Derived) -> Vec<u32> {
    let mut best = (f64::INFINITY, 0usize);
    for (i, owners) in candidates.iter().enumerate() {
        let t = candidate_step(&derive_with(owners), costs);
        if t < best.0 * (1.0 - 1e-9) {
            best = (t, i);
        }
    }
    candidates[best.1].clone()
}

/// The step of a derived plan as the cost model times its compute and transfers.
fn candidate_step(d: &Derived, costs: &dyn Costs) -> f64 {
    let stages: Vec<std::ops::Range<u64>> = d.placement.stages.iter().map(|s| s.layers.clone()).collect();
    let images = d.ir.pipeline.images;
    crate::ir::interpret::run(&d.ir, &CandidateTimes { costs, stages: &stages, images })
        .map(|t| t.makespan())
        .unwrap_or(f64::INFINITY)
}

/// The cost model's compute and transfer times, without the collectives and the optimizer
/// step every candidate shares: how derive times a candidate.
struct CandidateTimes<'a> {
    costs: &'a dyn Costs,
    stages: &'a [std::ops::Range<u64>],
    images: u32,
}

impl CandidateTimes<'_> {
    fn flight(&self, from: u32, to: u32, i: &Instr) -> f64 {
        match (i.stage, i.mb) {
            (Some(s), Some(mb)) => {
                self.costs.transfer(self.stages[s as usize].clone(), mb, i.share(self.images), from, to)
            }
            _ => 0.0,
        }
    }
}

impl crate::ir::interpret::Durations for CandidateTimes<'_> {
    fn instruction(&self, rank: u32, i: &Instr) -> f64 {
        match (i.stage, i.mb) {
            (Some(s), Some(mb)) if i.op.is_compute() => {
                crate::cost::compute_time(self.costs, i.op, self.stages[s as usize].clone(), mb) * i.share(self.images)
            }
            _ if i.op == Op::Send && self.costs.send_occupies() => self.flight(rank, i.peer.unwrap_or(rank), i),
            _ => 0.0,
        }
    }

    fn transfer(&self, from: u32, to: u32, i: &Instr) -> f64 {
        self.flight(from, to, i)
    }
}

fn derive_once(plan: &Plan, costs: &dyn Costs, choice: &Choice) -> Derived {
    let placement = placement::place_chunked(plan, costs, choice.chunks.max(1));
    let mut g =
        OrderGraph::new(placement.body.shape.ranks, placement.stages.len() as u32, placement.body.shape.microbatches);
    body(&mut g, &placement);
    let transposed = placement.encoder.map(|enc| {
        transpose::add(&mut g, plan, &placement, &enc, costs, (choice.encoder_owner.as_ref(), &choice.parts))
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
