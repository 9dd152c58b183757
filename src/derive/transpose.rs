//! `transpose`: the replicated encoder's work placed inside the body pipeline (docs/transpose.md).
//!
//! `fill = slack` (Mpipe): one microbatch's encode is `chunks` runs of consecutive encoder
//! layers, each an instruction on the microbatch's owner; the boundary activation between two
//! chunks stays there. Owners and places come from the body alone, timed: chunks go into each
//! rank's idle windows before the time the first body stage needs the features (owner.rs), so
//! encoder work delays no body event, and the first forward waits only as long as the first
//! features take. The first-stage rank receives each microbatch's features just before that
//! microbatch's first forward. A trainable encoder's backward chunks run on the owner once the
//! feature gradient is back, in its idle windows from then on (its cooldown); an encoder that
//! recomputes fully may run them on another rank, which recomputes each chunk from its input. With lookahead a
//! frozen encoder encodes the next step's microbatches anywhere in this step's idle time
//! (`step: 1` in plan.json), the features of this step's microbatches, encoded the step
//! before, leave their owners at the start of the step, and a prologue encodes the first
//! step's batch.
//!
//! `fill = prefix` (HyperParallel's public `ScheduleMPipeTranspose`): every rank encodes its
//! microbatches as one block before its pipeline, the first-stage rank receives all features
//! before its first forward and sends all feature gradients after its last backward.

use petgraph::graph::NodeIndex;

use super::order::OrderGraph;
use super::owner::{self, Job, Window};
use super::placement::{Encoder, Placement, Sink};
use crate::algebra::{Fill, OwnerSpec};
use crate::cost::{self, Costs};
use crate::ir::{Dir, Instr, Op};
use crate::plan::Plan;

pub struct Transposed {
    pub owners: Vec<u32>,
    /// Each rank's warmup slack w_r and encoder work E_r, as derive estimated them.
    pub slack: Vec<f64>,
    pub work: Vec<f64>,
    /// With lookahead: what each rank encodes once, before the first step, for that step.
    pub prologue: Vec<Vec<Instr>>,
    /// Two bounds on the step, in compute time with transfers free.
    pub bounds: Bounds,
    /// Where the chunks went (`fill = slack`): the head delay, owners, backward ranks, slots.
    pub schedule: Option<owner::Schedule>,
}

/// What the placement is measured against, each bound labelled for what it is.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bounds {
    /// The body alone, plus the encode of the microbatch the first stage needs first (nothing
    /// with lookahead), plus a trainable encoder's backward of the microbatch whose gradient
    /// comes back last: no schedule of whole-layer chunks beats it, and one whose other
    /// encoder work all fits the idle time reaches it.
    pub floor: f64,
    /// The body alone plus the encoder work that the idle time before the deadlines cannot
    /// hold, spread evenly over the ranks: a fluid relaxation (work divides at will), which no
    /// schedule of instructions need reach.
    pub relaxation: f64,
}

pub fn add(
    g: &mut OrderGraph,
    plan: &Plan,
    placement: &Placement,
    enc: &Encoder,
    costs: &dyn Costs,
    placing: &Placing,
) -> Transposed {
    let ranks = placement.body.shape.ranks;
    let m = placement.body.shape.microbatches;
    let first = placement.body.first;
    let (start, end) = body_times(g, placement, costs);
    let slack: Vec<f64> = g.chains.iter().map(|c| warmup_slack(c, &g.graph, &start, &end)).collect();
    let spec = placing.owner.or(plan.owner.as_ref()).cloned().unwrap_or(OwnerSpec::ByMicrobatch);
    let images = plan.batch.images as u32;
    let bounds = bounds(g, placement, enc, costs, (&start, &end), images.min(ranks));
    let pieces: Vec<Piece> = (0..m)
        .flat_map(|mb| {
            let k = placing.parts.get(mb as usize).copied().unwrap_or(1).clamp(1, images.min(ranks));
            image_ranges(images, k).into_iter().map(move |range| Piece { mb, images: range, owner: 0 })
        })
        .collect();
    let (owners, pieces, schedule) = match enc.fill {
        Fill::Slack => fill_idle_time(g, placement, enc, costs, (&spec, placing), (&start, &end), (pieces, images)),
        Fill::Prefix => {
            let owners = prefix(g, placement, enc, &spec);
            let pieces = (0..m).map(|mb| Piece { mb, images: None, owner: owners[mb as usize] }).collect();
            (owners, pieces, None)
        }
    };
    let mut work = vec![0.0; ranks as usize];
    for p in &pieces {
        work[p.owner as usize] += encode(placement, enc, costs, p.mb) * p.share(images);
    }
    let mut prologue = vec![Vec::new(); ranks as usize];
    if enc.lookahead {
        let deadline = |mb: u32| deadline(g, &start, first, mb);
        let mut order: Vec<&Piece> = pieces.iter().collect();
        order.sort_by(|a, b| deadline(a.mb).total_cmp(&deadline(b.mb)).then(a.mb.cmp(&b.mb)));
        for p in order {
            let forwards = enc.stages().map(|s| Instr { images: p.images, ..Instr::compute(Op::Forward, s, p.mb) });
            prologue[p.owner as usize].extend(forwards);
        }
    }
    Transposed { owners, slack, work, prologue, bounds, schedule }
}

/// A microbatch's encoder work, or a part of its images, and the rank that runs it.
struct Piece {
    mb: u32,
    /// Images `[lo, hi)` of each sequence; `None`: all of them.
    images: Option<[u32; 2]>,
    owner: u32,
}

impl Piece {
    fn share(&self, images: u32) -> f64 {
        crate::ir::image_share(self.images, images)
    }
}

/// `images` split into `parts` contiguous ranges as even as whole images allow; one part is
/// the whole encode (no range).
pub fn image_ranges(images: u32, parts: u32) -> Vec<Option<[u32; 2]>> {
    if parts <= 1 {
        return vec![None];
    }
    (0..parts).map(|k| Some([k * images / parts, (k + 1) * images / parts])).collect()
}

fn forward_of(placement: &Placement, costs: &dyn Costs, stage: u32, mb: u32) -> f64 {
    costs.forward(placement.stages[stage as usize].layers.clone(), mb)
}

/// One microbatch's whole encode: the forwards of all its chunks.
fn encode(placement: &Placement, enc: &Encoder, costs: &dyn Costs, mb: u32) -> f64 {
    enc.stages().map(|s| forward_of(placement, costs, s, mb)).sum()
}

/// When the first body stage needs microbatch `mb`'s features, in body time.
fn deadline(g: &OrderGraph, start: &[f64], first: u32, mb: u32) -> f64 {
    g.find(Op::Forward, first, mb).map_or(0.0, |n| start[n.index()])
}

/// A trainable encoder's backward of one microbatch's whole encode (none when frozen).
fn backward_of_encode(placement: &Placement, enc: &Encoder, costs: &dyn Costs, mb: u32) -> f64 {
    if !enc.trainable {
        return 0.0;
    }
    let layers = |s: u32| placement.stages[s as usize].layers.clone();
    enc.stages().map(|s| cost::compute_time(costs, Op::Backward, layers(s), mb)).sum()
}

/// One microbatch's encoder work: its whole encode and a trainable encoder's backward of it.
pub(super) fn encoder_work(placement: &Placement, costs: &dyn Costs, mb: u32) -> (f64, f64) {
    placement
        .encoder
        .map_or((0.0, 0.0), |enc| (encode(placement, &enc, costs, mb), backward_of_encode(placement, &enc, costs, mb)))
}

/// The room each place of the body order leaves the encoder work of the microbatch that runs
/// there, in the body-only schedule (transfers free), by place (the microbatch label of the
/// canonical order).
#[derive(Clone, Debug, PartialEq)]
pub struct Room {
    /// When the first body stage needs the features; `None` with lookahead (encoded the step
    /// before).
    pub before: Vec<Option<f64>>,
    /// From the feature gradient's return to the body's end; `None` for a frozen encoder.
    pub after: Vec<Option<f64>>,
}

pub(super) fn room(g: &OrderGraph, placement: &Placement, costs: &dyn Costs) -> Option<Room> {
    let enc = placement.encoder?;
    let (start, end) = body_times(g, placement, costs);
    let first = placement.body.first;
    let body_end = end.iter().cloned().fold(0.0, f64::max);
    let places = 0..placement.body.shape.microbatches;
    let before = places.clone().map(|mb| (!enc.lookahead).then(|| deadline(g, &start, first, mb))).collect();
    let after = places
        .map(|mb| {
            let gradient = g.find(Op::BackwardInput, first, mb).or_else(|| g.find(Op::Backward, first, mb));
            gradient.filter(|_| enc.trainable).map(|n| body_end - end[n.index()])
        })
        .collect();
    Some(Room { before, after })
}

fn bounds(
    g: &OrderGraph,
    placement: &Placement,
    enc: &Encoder,
    costs: &dyn Costs,
    (start, end): (&[f64], &[f64]),
    parts: u32,
) -> Bounds {
    let first = placement.body.first;
    let m = placement.body.shape.microbatches;
    let body = end.iter().cloned().fold(0.0, f64::max);
    let deadline = |mb: u32| deadline(g, start, first, mb);
    let release = |mb: u32| {
        let n = g.find(Op::BackwardInput, first, mb).or_else(|| g.find(Op::Backward, first, mb));
        n.map_or(0.0, |n| end[n.index()])
    };
    let encode = |mb: u32| encode(placement, enc, costs, mb);
    let backward = |mb: u32| backward_of_encode(placement, enc, costs, mb);
    let by = |key: &dyn Fn(u32) -> f64, last: bool| {
        (0..m).min_by(|a, b| {
            let order = key(*a).total_cmp(&key(*b)).then(a.cmp(b));
            if last { order.reverse() } else { order }
        })
    };
    // The first features hold the whole body back; the last feature gradient comes back when
    // the body is done, and its encoder backward follows.
    // Both divide over the ranks at most as far as the images go.
    let parts = f64::from(parts.max(1));
    let head = by(&deadline, false).map_or(0.0, encode) / parts;
    let tail = by(&release, true).map_or(0.0, backward) / parts;
    // Idle time that can hold encoder work: before the last deadline, or up to the body's end
    // where the work may follow it (lookahead, backward).
    let open = enc.lookahead || enc.trainable;
    let horizon = if open { body } else { (0..m).map(deadline).fold(0.0, f64::max) };
    let idle: f64 = g
        .chains
        .iter()
        .map(|c| {
            let windows = idle_windows(c, start, end);
            windows.iter().map(|w| (w.to.min(horizon) - w.from.unwrap_or(0.0)).max(0.0)).sum::<f64>()
        })
        .sum();
    let ranks = g.chains.len().max(1) as f64;
    let total: f64 = (0..m).map(|mb| encode(mb) + backward(mb)).sum();
    Bounds {
        floor: body + if enc.lookahead { 0.0 } else { head } + tail,
        relaxation: body + ((total - idle) / ranks).max(0.0),
    }
}

/// How the encoder's chunks find their places: as the resolved plan holds them, or searched
/// here (a candidate of derive's search, or one batch's plan) with the given effort.
#[derive(Clone, Copy)]
pub struct Placing<'a> {
    /// An owner map in place of the plan's.
    pub owner: Option<&'a OwnerSpec>,
    /// Per microbatch: the parts its images are split into.
    pub parts: &'a [u32],
    pub chosen: Option<&'a owner::Schedule>,
    pub effort: owner::Effort,
}

/// Mpipe's placement: each piece's chunks on one owner, inside the body's idle windows
/// (owner::search), the forwards chained to each other and to the first body stage, a
/// trainable encoder's backwards from the feature gradient down to the first chunk. With
/// lookahead the forwards serve the next step, and this step's features, encoded the step
/// before, leave their owner at the start of the step. A microbatch split into parts has one
/// piece a part, each on its own rank; the first body stage gathers them. The schedule is the
/// one the resolved plan holds, or without one (a candidate of the search, a batch's plan)
/// found here.
fn fill_idle_time(
    g: &mut OrderGraph,
    placement: &Placement,
    enc: &Encoder,
    costs: &dyn Costs,
    (spec, placing): (&OwnerSpec, &Placing),
    times: (&[f64], &[f64]),
    (mut pieces, images): (Vec<Piece>, u32),
) -> (Vec<u32>, Vec<Piece>, Option<owner::Schedule>) {
    let windows: Vec<Vec<Window>> = g.chains.iter().map(|c| idle_windows(c, times.0, times.1)).collect();
    let schedule = match placing.chosen {
        Some(chosen) => chosen.clone(),
        None => {
            owner::search(spec, &windows, &jobs(g, placement, enc, costs, times, (&pieces, images)), placing.effort)
        }
    };
    for (piece, owner) in pieces.iter_mut().zip(&schedule.owners) {
        piece.owner = *owner;
    }
    place_pieces(g, placement, enc, &schedule, &pieces);
    let mut owners = vec![0; placement.body.shape.microbatches as usize];
    for p in pieces.iter().rev() {
        owners[p.mb as usize] = p.owner;
    }
    (owners, pieces, Some(schedule))
}

/// Each piece's encoder work as owner.rs schedules it: its chunks' times, when the first body
/// stage needs its features and when their gradient comes back, in body time.
fn jobs(
    g: &OrderGraph,
    placement: &Placement,
    enc: &Encoder,
    costs: &dyn Costs,
    (start, end): (&[f64], &[f64]),
    (pieces, images): (&[Piece], u32),
) -> Vec<Job> {
    let first = placement.body.first;
    let layers = |s: u32| placement.stages[s as usize].layers.clone();
    // A fully recomputed chunk's backward needs only the chunk's input, which may travel to
    // another rank where sending it costs no compute time.
    let moves = enc.trainable && enc.recomputes && !costs.send_occupies();
    let mut part = 0;
    pieces
        .iter()
        .enumerate()
        .map(|(k, p)| {
            part = if k > 0 && pieces[k - 1].mb == p.mb { part + 1 } else { 0 };
            let share = p.share(images);
            let consumer = g.index_of(Op::Forward, first, p.mb);
            let gradient = g.find(Op::BackwardInput, first, p.mb).or_else(|| g.find(Op::Backward, first, p.mb));
            let backward = |s: u32| cost::compute_time(costs, Op::Backward, layers(s), p.mb) * share;
            Job {
                forward: enc.stages().map(|s| forward_of(placement, costs, s, p.mb) * share).collect(),
                backward: if enc.trainable { enc.stages().rev().map(backward).collect() } else { Vec::new() },
                deadline: (!enc.lookahead).then(|| start[consumer.index()]),
                release: gradient.map_or(0.0, |n| end[n.index()]),
                mb: p.mb,
                part,
                moves,
            }
        })
        .collect()
}

/// Each piece's chunk events in the slots `schedule` gives them, with their data edges.
fn place_pieces(
    g: &mut OrderGraph,
    placement: &Placement,
    enc: &Encoder,
    schedule: &owner::Schedule,
    pieces: &[Piece],
) {
    let first = placement.body.first;
    let head = placement.rank_of_body(0);
    // Every chunk's forward and backward, each with its data edges: room made once, where the
    // graph grew (copying itself) as it went.
    let events = pieces.len() * enc.chunks as usize * if enc.trainable { 2 } else { 1 };
    g.graph.reserve_nodes(events);
    g.graph.reserve_edges(2 * events);
    // Chunk nodes to insert per rank: (chain position, start, node).
    let mut inserts: Vec<Vec<(usize, f64, NodeIndex)>> = vec![Vec::new(); g.chains.len()];
    for (k, piece) in pieces.iter().enumerate() {
        let (mb, owner) = (piece.mb, piece.owner);
        let consumer = g.index_of(Op::Forward, first, mb);
        let mut forwards = Vec::new();
        for (s, slot) in enc.stages().zip(&schedule.forward[k]) {
            let mut instr = Instr { images: piece.images, ..Instr::compute(Op::Forward, s, mb) };
            instr.step = enc.lookahead.then_some(1);
            let node = g.node(instr, Some(owner));
            if let Some(&p) = forwards.last() {
                g.data(p, node, Dir::Act);
            }
            forwards.push(node);
            inserts[owner as usize].push((slot.before, slot.start, node));
        }
        let last = *forwards.last().expect("an encoder has at least one chunk");
        if !enc.lookahead {
            g.data(last, consumer, Dir::Act);
        } else if owner != head {
            let send = Instr::comm(Op::Send, Dir::Act, enc.last_stage(), mb, head);
            let held = g.node(Instr { images: piece.images, ..send }, Some(owner));
            g.data(held, consumer, Dir::Act);
            inserts[owner as usize].push((0, f64::NEG_INFINITY, held));
        }
        if enc.trainable {
            let gradient = g
                .find(Op::BackwardInput, first, mb)
                .or_else(|| g.find(Op::Backward, first, mb))
                .expect("a trainable encoder means the first body stage runs backward");
            let behind = schedule.backward_owners[k];
            let mut previous = gradient;
            for (s, slot) in enc.stages().rev().zip(&schedule.backward[k]) {
                let node = g.node(Instr { images: piece.images, ..Instr::compute(Op::Backward, s, mb) }, Some(behind));
                g.data(previous, node, Dir::Grad);
                // On the forward's rank the backward reads what the forward kept; elsewhere it
                // recomputes from the chunk's input, the previous chunk's output (the first
                // chunk's input is the microbatch's own images).
                let chunk = (s - enc.stage) as usize;
                let input =
                    if behind == owner { Some(forwards[chunk]) } else { chunk.checked_sub(1).map(|j| forwards[j]) };
                if let Some(input) = input {
                    g.data(input, node, Dir::Act);
                }
                previous = node;
                inserts[behind as usize].push((slot.before, slot.start, node));
            }
        }
    }
    for (r, mut list) in inserts.into_iter().enumerate() {
        list.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
        g.chains[r] = spliced(&g.chains[r], list.into_iter().map(|(at, _, node)| (at, node)));
    }
}

/// HyperParallel's prefix block: each rank encodes its microbatches whole, before its pipeline,
/// in microbatch order; the first-stage rank receives all features before its first forward
/// and sends all feature gradients after its last backward.
fn prefix(g: &mut OrderGraph, placement: &Placement, enc: &Encoder, spec: &OwnerSpec) -> Vec<u32> {
    let ranks = placement.body.shape.ranks;
    let m = placement.body.shape.microbatches;
    let first = placement.body.first;
    let head = placement.rank_of_body(0);
    let owners: Vec<u32> = match spec {
        OwnerSpec::Explicit(list) => list.iter().map(|r| *r as u32).collect(),
        _ => (0..m).map(|mb| mb % ranks).collect(),
    };
    let first_body_node = g.chains[head as usize].first().copied();
    let last_body_node = g.chains[head as usize].last().copied();
    let mut front: Vec<Vec<NodeIndex>> = vec![Vec::new(); ranks as usize];
    for mb in 0..m {
        let owner = owners[mb as usize];
        let mut previous = None;
        for s in enc.stages() {
            let node = g.node(Instr::compute(Op::Forward, s, mb), Some(owner));
            if let Some(p) = previous {
                g.data(p, node, Dir::Act);
            }
            previous = Some(node);
            front[owner as usize].push(node);
        }
        let consumer = g.index_of(Op::Forward, first, mb);
        g.data(previous.expect("an encoder has at least one chunk"), consumer, Dir::Act);
        if let Some(anchor) = first_body_node {
            g.recv_before(consumer, anchor);
        }
    }
    // HyperParallel sends a rank's features only once its whole block is encoded.
    for nodes in &front {
        if let Some(&block_end) = nodes.last() {
            for &n in nodes {
                g.send_after(n, block_end);
            }
        }
    }
    for (r, nodes) in front.into_iter().enumerate() {
        g.chains[r].splice(0..0, nodes);
    }
    if enc.trainable {
        for mb in 0..m {
            let owner = owners[mb as usize];
            let producer = g
                .find(Op::BackwardInput, first, mb)
                .or_else(|| g.find(Op::Backward, first, mb))
                .expect("a trainable encoder means the first body stage runs backward");
            let mut previous = producer;
            // The first-stage rank runs its own microbatches' encoder backward right after the
            // first stage's (one autograd graph there); the others get theirs after the body.
            let mut at =
                (owner == head).then(|| g.chains[owner as usize].iter().position(|n| *n == producer)).flatten();
            for s in enc.stages().rev() {
                let node = g.node(Instr::compute(Op::Backward, s, mb), Some(owner));
                g.data(previous, node, Dir::Grad);
                g.data(g.index_of(Op::Forward, s, mb), node, Dir::Act);
                previous = node;
                match at.as_mut() {
                    Some(i) => {
                        *i += 1;
                        g.chains[owner as usize].insert(*i, node);
                    }
                    None => g.chains[owner as usize].push(node),
                }
            }
            if let Some(anchor) = last_body_node.filter(|_| owner != head) {
                g.send_after(producer, anchor);
            }
        }
    }
    owners
}

/// A chain's idle windows in the body-only schedule: before its first event, between events,
/// and after its last (open-ended).
fn idle_windows(chain: &[NodeIndex], start: &[f64], end: &[f64]) -> Vec<Window> {
    let mut windows = Vec::new();
    let mut clock: Option<f64> = None;
    for (i, n) in chain.iter().enumerate() {
        let s = start[n.index()];
        match clock {
            None => windows.push(Window { before: i, from: None, to: s }),
            Some(c) if s > c + 1e-12 => windows.push(Window { before: i, from: Some(c), to: s }),
            Some(_) => {}
        }
        clock = Some(clock.map_or(end[n.index()], |c: f64| c.max(end[n.index()])));
    }
    windows.push(Window { before: chain.len(), from: Some(clock.unwrap_or(0.0)), to: f64::INFINITY });
    windows
}

/// A chain's warmup slack, for the report: its idle time before its first backward in the
/// body-only schedule.
fn warmup_slack(
    chain: &[NodeIndex],
    graph: &petgraph::graph::DiGraph<super::order::Event, Dir>,
    start: &[f64],
    end: &[f64],
) -> f64 {
    let mut slack = 0.0;
    let mut clock = 0.0;
    for n in chain {
        let s = start[n.index()];
        if s > clock + 1e-12 {
            slack += s - clock;
        }
        if graph[*n].instr.op != Op::Forward {
            break;
        }
        clock = end[n.index()];
    }
    slack
}

/// Start and end times of the body's events, by node index, with transfers taken as free.
fn body_times(g: &OrderGraph, placement: &Placement, costs: &dyn Costs) -> (Vec<f64>, Vec<f64>) {
    let stages = &placement.stages;
    let times = super::critical::chain_times(g, |n| {
        let i = &g.graph[n].instr;
        match (i.stage, i.mb) {
            (Some(s), Some(mb)) => cost::compute_time(costs, i.op, stages[s as usize].layers.clone(), mb),
            _ => 0.0,
        }
    })
    .expect("canonical body orders have no cycle");
    (times.start, times.end)
}

/// A replicated region after the body: each microbatch's output of the last body stage goes
/// to its owner, which runs the region's forward and, when anything is trainable, at once its
/// backward, and sends the gradient back to the last body stage. On the owner the pair goes
/// where the body-only schedule says the activation arrives, so nothing it waits for comes
/// after it.
pub fn add_sink(g: &mut OrderGraph, placement: &Placement, sink: &Sink, owners: &[u32], costs: &dyn Costs) {
    let m = placement.body.shape.microbatches;
    let last = placement.body.first + placement.body.shape.stages() - 1;
    let backward = placement.stages[sink.stage as usize].backward;
    let (start, end) = body_times(g, placement, costs);
    let mut arrivals: Vec<(f64, u32)> = (0..m).map(|mb| (end[g.index_of(Op::Forward, last, mb).index()], mb)).collect();
    arrivals.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    // Insert in arrival order; positions refer to the chains before any insertion.
    let mut inserts: Vec<Vec<(usize, NodeIndex)>> = vec![Vec::new(); g.chains.len()];
    let positions: Vec<rustc_hash::FxHashMap<NodeIndex, usize>> =
        g.chains.iter().map(|c| c.iter().enumerate().map(|(i, n)| (*n, i)).collect()).collect();
    for (arrival, mb) in arrivals {
        let owner = owners[mb as usize];
        let producer = g.index_of(Op::Forward, last, mb);
        let forward = g.node(Instr::compute(Op::Forward, sink.stage, mb), Some(owner));
        g.data(producer, forward, Dir::Act);
        // A chain's events start in order in the body-only schedule.
        let chain = &g.chains[owner as usize];
        let mut at = chain.partition_point(|n| start[n.index()] < arrival);
        if let Some(&pos) = positions[owner as usize].get(&producer) {
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
    for (r, mut list) in inserts.into_iter().enumerate() {
        list.sort_by_key(|(at, _)| *at);
        g.chains[r] = spliced(&g.chains[r], list);
    }
}

/// `chain` with each `(at, node)` of `inserts` (ordered by `at`) before the event at position
/// `at` of `chain` (its length: at the end), those of one position in their order: built in one
/// pass, where inserting one at a time made lowering quadratic in microbatches.
fn spliced(chain: &[NodeIndex], inserts: impl IntoIterator<Item = (usize, NodeIndex)>) -> Vec<NodeIndex> {
    let mut out = Vec::with_capacity(chain.len());
    let mut next = 0;
    for (at, node) in inserts {
        out.extend_from_slice(&chain[next..at]);
        next = at;
        out.push(node);
    }
    out.extend_from_slice(&chain[next..]);
    out
}
