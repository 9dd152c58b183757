//! `transpose`: the replicated encoder's work placed inside the body pipeline (ALGEBRA.md §6).
//!
//! `fill = slack` (Mpipe): each rank encodes its own microbatches in deadline order inside the
//! idle time before its first body event (its warmup slack; the first-stage rank's is the wait
//! for the first features), and the first-stage rank receives each microbatch's features just
//! before that microbatch's first forward, so it starts as soon as the first features arrive.
//! Work past a rank's slack stays at the front too: the body has no idle time before the
//! deadlines to hide it in, and deferring an encode into the steady state stalls the whole
//! pipeline behind that rank. A trainable encoder's backward runs on the owner after the
//! feature gradient comes back, at the end of its chain (its cooldown slack).
//!
//! `fill = prefix` (HyperParallel's public `ScheduleMPipeTranspose`): every rank encodes its
//! microbatches as one block before its pipeline, the first-stage rank receives all features
//! before its first forward and sends all feature gradients after its last backward.

use petgraph::graph::NodeIndex;

use super::order::OrderGraph;
use super::owner::{self, Gap, Load};
use super::placement::{Encoder, Placement};
use crate::algebra::{Fill, OwnerSpec};
use crate::check::spec::Plan;
use crate::cost::{self, Costs};
use crate::ir::{Dir, Instr, Op};

pub struct Transposed {
    pub owners: Vec<u32>,
    /// Each rank's warmup slack w_r and encoder work E_r, as derive estimated them.
    pub slack: Vec<f64>,
    pub work: Vec<f64>,
}

pub fn add(
    g: &mut OrderGraph,
    plan: &Plan,
    placement: &Placement,
    enc: &Encoder,
    costs: &dyn Costs,
    fixed: Option<&[u32]>,
) -> Transposed {
    let ranks = placement.body.shape.ranks;
    let m = placement.body.shape.microbatches;
    let first = placement.body.first;
    let head = placement.rank_of_body(0);
    let enc_layers = placement.stages[enc.stage as usize].layers.clone();

    // The body alone, timed: each rank's idle gaps before its first backward (its warmup
    // slack: the wait for the first activation and the wait for the first gradient), and when
    // the first stage needs each microbatch.
    let (start, end) = body_times(g, placement, costs);
    let gaps: Vec<Vec<Gap>> = match enc.fill {
        Fill::Slack => g.chains.iter().map(|c| warmup_gaps(c, &g.graph, &start, &end)).collect(),
        // HyperParallel's prefix block: every encode before the rank's pipeline.
        Fill::Prefix => vec![Vec::new(); ranks as usize],
    };
    let slack: Vec<f64> =
        g.chains.iter().map(|c| warmup_gaps(c, &g.graph, &start, &end).iter().map(|gap| gap.room).sum()).collect();
    let deadline: Vec<f64> =
        (0..m).map(|mb| g.find(Op::Forward, first, mb).map_or(0.0, |n| start[n.index()])).collect();
    let work: Vec<f64> = (0..m).map(|mb| costs.forward(enc_layers.clone(), mb)).collect();
    let spec = match fixed {
        Some(owners) => OwnerSpec::Explicit(owners.iter().map(|r| u64::from(*r)).collect()),
        None => plan.owner.clone().unwrap_or(OwnerSpec::ByMicrobatch),
    };
    let assignment = owner::assign(&spec, ranks, &Load { gaps: &gaps, work: &work, deadline: &deadline });
    let owners = assignment.owners;

    let first_body_node = g.chains[head as usize].first().copied();
    let last_body_node = g.chains[head as usize].last().copied();
    let mut forwards: Vec<NodeIndex> = Vec::with_capacity(m as usize);
    for mb in 0..m {
        let ef = g.node(Instr::compute(Op::Forward, enc.stage, mb), Some(owners[mb as usize]));
        forwards.push(ef);
        let consumer = g.find(Op::Forward, first, mb).expect("the first body stage runs every microbatch");
        g.data(ef, consumer, Dir::Act);
        if enc.fill == Fill::Prefix
            && let Some(anchor) = first_body_node
        {
            g.recv_before(consumer, anchor);
        }
    }
    for r in 0..ranks {
        let mut mine: Vec<u32> = (0..m).filter(|mb| owners[*mb as usize] == r).collect();
        mine.sort_by(|a, b| deadline[*a as usize].total_cmp(&deadline[*b as usize]).then(a.cmp(b)));
        let mut at: Vec<(usize, u32)> = mine.iter().map(|mb| (assignment.positions[*mb as usize], *mb)).collect();
        // Stable: within one gap, deadline order.
        at.sort_by_key(|(position, _)| *position);
        let chain = &mut g.chains[r as usize];
        for (offset, (position, mb)) in at.into_iter().enumerate() {
            chain.insert(position + offset, forwards[mb as usize]);
        }
    }
    if enc.trainable {
        for mb in 0..m {
            let owner = owners[mb as usize];
            let eb = g.node(Instr::compute(Op::Backward, enc.stage, mb), Some(owner));
            let producer = g
                .find(Op::BackwardInput, first, mb)
                .or_else(|| g.find(Op::Backward, first, mb))
                .expect("a trainable encoder means the first body stage runs backward");
            g.data(producer, eb, Dir::Grad);
            if enc.fill == Fill::Prefix
                && let Some(anchor) = last_body_node
            {
                g.send_after(producer, anchor);
            }
            g.chains[owner as usize].push(eb);
        }
    }
    let mut per_rank = vec![0.0; ranks as usize];
    for (mb, r) in owners.iter().enumerate() {
        per_rank[*r as usize] += work[mb];
    }
    Transposed { owners, slack, work: per_rank }
}

/// The idle gaps of a chain before its first backward: where encoder forwards run for free.
fn warmup_gaps(
    chain: &[NodeIndex],
    graph: &petgraph::graph::DiGraph<super::order::Event, super::order::Dep>,
    start: &[f64],
    end: &[f64],
) -> Vec<Gap> {
    let mut gaps = Vec::new();
    let mut clock = 0.0;
    for (i, n) in chain.iter().enumerate() {
        let s = start[n.index()];
        if s > clock + 1e-12 {
            gaps.push(Gap { before: i, room: s - clock, end: s });
        }
        if graph[*n].instr.op != Op::Forward {
            break;
        }
        clock = end[n.index()];
    }
    gaps
}

/// Start and end times of the body's events, by node index, with transfers taken as free.
fn body_times(g: &OrderGraph, placement: &Placement, costs: &dyn Costs) -> (Vec<f64>, Vec<f64>) {
    let mut timed = g.clone();
    timed.link_chains();
    let stages = &placement.stages;
    let times = super::critical::longest_path(
        &timed.graph,
        |n| {
            let i = &timed.graph[n].instr;
            match (i.stage, i.mb) {
                (Some(s), Some(mb)) => cost::compute_time(costs, i.op, stages[s as usize].layers.clone(), mb),
                _ => 0.0,
            }
        },
        |_| 0.0,
    )
    .expect("canonical body orders have no cycle");
    (times.start, times.end)
}

/// A replicated region after the body: each microbatch's output of the last body stage goes
/// to its owner, which runs the region's forward and, when anything is trainable, at once its
/// backward, and sends the gradient back to the last body stage. On the owner the pair goes
/// where the body-only schedule says the activation arrives, so nothing it waits for comes
/// after it.
pub fn add_sink(g: &mut OrderGraph, placement: &Placement, sink: &Encoder, owners: &[u32], costs: &dyn Costs) {
    let m = placement.body.shape.microbatches;
    let last = placement.body.first + placement.body.shape.stages() - 1;
    let backward = placement.stages[sink.stage as usize].backward;
    let (start, end) = body_times(g, placement, costs);
    let mut arrivals: Vec<(f64, u32)> = (0..m).map(|mb| (end[g.index_of(Op::Forward, last, mb).index()], mb)).collect();
    arrivals.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    // Insert in arrival order; positions refer to the chains before any insertion.
    let mut inserts: Vec<Vec<(usize, NodeIndex)>> = vec![Vec::new(); g.chains.len()];
    for (arrival, mb) in arrivals {
        let owner = owners[mb as usize];
        let producer = g.index_of(Op::Forward, last, mb);
        let forward = g.node(Instr::compute(Op::Forward, sink.stage, mb), Some(owner));
        g.data(producer, forward, Dir::Act);
        let chain = &g.chains[owner as usize];
        let mut at = chain.iter().position(|n| start[n.index()] >= arrival).unwrap_or(chain.len());
        if let Some(pos) = chain.iter().position(|n| *n == producer) {
            at = at.max(pos + 1);
        }
        inserts[owner as usize].push((at, forward));
        if backward {
            let grad = g.node(Instr::compute(Op::Backward, sink.stage, mb), Some(owner));
            g.data(forward, grad, Dir::Act);
            let consumer = g
                .find(Op::BackwardInput, last, mb)
                .or_else(|| g.find(Op::Backward, last, mb))
                .expect("the body runs backward");
            g.data(grad, consumer, Dir::Grad);
            inserts[owner as usize].push((at, grad));
        }
    }
    for (r, list) in inserts.into_iter().enumerate() {
        let mut list = list;
        list.sort_by_key(|(at, _)| *at);
        for (offset, (at, node)) in list.into_iter().enumerate() {
            g.chains[r].insert(at + offset, node);
        }
    }
}
