//! The order graph: every event of a step (forwards, backwards, the encoder's work,
//! reductions, the optimizer step) as a node, with data edges between events that hand a
//! tensor on; each rank's chain gives its program order. Lowering walks each chain and turns
//! every data edge that crosses ranks into a send after its producer and a receive before its
//! consumer.

use rustc_hash::FxHashMap as HashMap;

use petgraph::Direction;
use petgraph::graph::{DiGraph, NodeIndex};
use petgraph::visit::EdgeRef;

use crate::ir::{Dir, Group, Instr, Op};

#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    pub instr: Instr,
    /// The rank that runs it; `None` for a collective every rank runs.
    pub rank: Option<u32>,
}

#[derive(Clone, Debug, Default)]
pub struct OrderGraph {
    /// Data edges: a tensor handed from one event to the next, activations or gradients.
    /// Program order is the chains alone, never edges: every lowering of a candidate would
    /// otherwise add and walk one per event.
    pub graph: DiGraph<Event, Dir>,
    /// Each rank's events in execution order.
    pub chains: Vec<Vec<NodeIndex>>,
    /// Compute events by (op, stage, microbatch), densely: `slot` gives the position.
    index: Vec<Option<NodeIndex>>,
    microbatches: u32,
    /// Where a cross-rank transfer is placed when not right at its producer and consumer.
    send_after: HashMap<NodeIndex, NodeIndex>,
    recv_before: HashMap<NodeIndex, NodeIndex>,
}

impl OrderGraph {
    pub fn new(ranks: u32, stages: u32, microbatches: u32) -> OrderGraph {
        OrderGraph {
            chains: vec![Vec::new(); ranks as usize],
            index: vec![None; 4 * (stages * microbatches) as usize],
            microbatches,
            ..OrderGraph::default()
        }
    }

    fn slot(&self, op: Op, stage: u32, mb: u32) -> usize {
        let kind = match op {
            Op::Forward => 0,
            Op::Backward => 1,
            Op::BackwardInput => 2,
            _ => 3,
        };
        ((stage * self.microbatches + mb) * 4 + kind) as usize
    }

    pub fn node(&mut self, instr: Instr, rank: Option<u32>) -> NodeIndex {
        let slot = instr.op.is_compute().then(|| self.slot(instr.op, instr.stage.unwrap_or(0), instr.mb.unwrap_or(0)));
        let node = self.graph.add_node(Event { instr, rank });
        if let Some(slot) = slot {
            self.index[slot] = Some(node);
        }
        node
    }

    pub fn find(&self, op: Op, stage: u32, mb: u32) -> Option<NodeIndex> {
        self.index.get(self.slot(op, stage, mb)).copied().flatten()
    }

    /// Like [`OrderGraph::find`], for an event the caller knows exists.
    pub fn index_of(&self, op: Op, stage: u32, mb: u32) -> NodeIndex {
        self.find(op, stage, mb).expect("the event exists")
    }

    pub fn data(&mut self, from: NodeIndex, to: NodeIndex, dir: Dir) {
        self.graph.add_edge(from, to, dir);
    }

    /// Places the send of `producer`'s cross-rank outputs after `anchor` instead.
    pub fn send_after(&mut self, producer: NodeIndex, anchor: NodeIndex) {
        self.send_after.insert(producer, anchor);
    }

    /// Places the receive of `consumer`'s cross-rank inputs before `anchor` instead.
    pub fn recv_before(&mut self, consumer: NodeIndex, anchor: NodeIndex) {
        self.recv_before.insert(consumer, anchor);
    }

    /// The rank an event runs on, as seen from `rank`'s chain.
    fn rank_of(&self, node: NodeIndex, from: u32) -> u32 {
        self.graph[node].rank.unwrap_or(from)
    }

    /// One instruction list per rank: each chain's events, with a receive before every
    /// event (or its anchor) for each input from another rank, and a send after every event
    /// (or its anchor) for each output to another rank. Overlapped pairs stay adjacent.
    pub fn lower(&self) -> Vec<Vec<Instr>> {
        (0..self.chains.len() as u32).map(|rank| self.lower_rank(rank)).collect()
    }

    fn lower_rank(&self, rank: u32) -> Vec<Instr> {
        let chain = &self.chains[rank as usize];
        let position = self.anchor_positions(chain);
        let anchor = |anchors: &HashMap<NodeIndex, NodeIndex>, node: NodeIndex, default: usize| {
            anchors.get(&node).and_then(|a| position.get(a)).copied().unwrap_or(default)
        };
        // Transfers keyed by where they go, 2i before chain position i and 2i + 1 after it, in
        // the order they are found: one list sorted stably at the end, where a list per
        // position cost an allocation per event.
        let mut transfers: Vec<(usize, Instr)> = Vec::with_capacity(chain.len());
        let mut found: Vec<(u32, Instr)> = Vec::new();
        for (i, &node) in chain.iter().enumerate() {
            // An overlapped pair is one slot: its transfers go around both halves.
            let opens = |j: usize| self.pair_starts(chain, j);
            let group_start = if i > 0 && opens(i - 1) { i - 1 } else { i };
            let group_end = if opens(i) { i + 1 } else { i };
            let me = &self.graph[node].instr;
            for edge in self.graph.edges_directed(node, Direction::Incoming) {
                let (from, dir) = (self.rank_of(edge.source(), rank), *edge.weight());
                if from != rank {
                    let producer = &self.graph[edge.source()].instr;
                    let (stage, mb) = (producer.stage.unwrap_or(0), producer.mb.unwrap_or(0));
                    // A part's tensor is its images' slice, activation or gradient alike.
                    let images = producer.images.or(if dir == Dir::Grad { me.images } else { None });
                    found.push((from, Instr { images, ..Instr::comm(Op::Recv, dir, stage, mb, from) }));
                }
            }
            if !found.is_empty() {
                found.sort_by_key(|(from, i)| (i.stage, i.mb, *from));
                let at = 2 * anchor(&self.recv_before, node, group_start);
                transfers.extend(found.drain(..).map(|(_, i)| (at, i)));
            }
            // A send event (features held from the step before) is its own output.
            let outgoing = if me.op == Op::Send { None } else { Some(node) };
            for edge in outgoing.into_iter().flat_map(|n| self.graph.edges_directed(n, Direction::Outgoing)) {
                let (to, dir) = (self.rank_of(edge.target(), rank), *edge.weight());
                if to != rank {
                    let target = &self.graph[edge.target()].instr;
                    let images = me.images.or(if dir == Dir::Grad { target.images } else { None });
                    let send = Instr::comm(Op::Send, dir, me.stage.unwrap_or(0), me.mb.unwrap_or(0), to);
                    found.push((to, Instr { images, ..send }));
                }
            }
            if !found.is_empty() {
                found.sort_by_key(|(to, _)| *to);
                let at = 2 * anchor(&self.send_after, node, group_end) + 1;
                transfers.extend(found.drain(..).map(|(_, i)| (at, i)));
            }
        }
        // Only anchored transfers and overlapped pairs are out of order: most lists are sorted.
        if !transfers.is_sorted_by_key(|(at, _)| *at) {
            transfers.sort_by_key(|(at, _)| *at);
        }
        let mut out = Vec::with_capacity(chain.len() + transfers.len());
        let mut transfers = transfers.into_iter().peekable();
        for (i, node) in chain.iter().enumerate() {
            while let Some((_, t)) = transfers.next_if(|(at, _)| *at == 2 * i) {
                out.push(t);
            }
            out.push(self.graph[*node].instr.clone());
            while let Some((_, t)) = transfers.next_if(|(at, _)| *at == 2 * i + 1) {
                out.push(t);
            }
        }
        out
    }

    /// Where in `chain` the events transfers are anchored to stand (of one that stands there
    /// twice, the later place).
    fn anchor_positions(&self, chain: &[NodeIndex]) -> HashMap<NodeIndex, usize> {
        let anchors: rustc_hash::FxHashSet<NodeIndex> =
            self.send_after.values().chain(self.recv_before.values()).copied().collect();
        if anchors.is_empty() {
            return HashMap::default();
        }
        chain.iter().enumerate().filter(|(_, n)| anchors.contains(n)).map(|(i, n)| (*n, i)).collect()
    }

    /// Whether chain[i] is the forward half that opens an overlapped pair.
    fn pair_starts(&self, chain: &[NodeIndex], i: usize) -> bool {
        let this = &self.graph[chain[i]].instr;
        this.overlap
            && this.op == Op::Forward
            && chain.get(i + 1).is_some_and(|n| self.graph[*n].instr.overlap && self.graph[*n].instr.op != Op::Forward)
    }
}

/// The events a collective over the pipeline group needs: one node on every chain.
pub fn collective(graph: &mut OrderGraph, group: Group, region: &str) -> NodeIndex {
    let node = graph.node(Instr::all_reduce(group, region), None);
    for chain in &mut graph.chains {
        chain.push(node);
    }
    node
}
