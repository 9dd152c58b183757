//! The order graph: every event of a step (forwards, backwards, the encoder's work,
//! reductions, the optimizer step) as a node, with program-order edges along each rank's
//! chain and data edges between events that hand a tensor on. Lowering walks each chain and
//! turns every data edge that crosses ranks into a send after its producer and a receive
//! before its consumer.

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

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dep {
    /// The next event on the same rank.
    Program,
    /// A tensor handed from one event to the next: activations or gradients.
    Data(Dir),
}

#[derive(Clone, Debug, Default)]
pub struct OrderGraph {
    pub graph: DiGraph<Event, Dep>,
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
        self.graph.add_edge(from, to, Dep::Data(dir));
    }

    /// Places the send of `producer`'s cross-rank outputs after `anchor` instead.
    pub fn send_after(&mut self, producer: NodeIndex, anchor: NodeIndex) {
        self.send_after.insert(producer, anchor);
    }

    /// Places the receive of `consumer`'s cross-rank inputs before `anchor` instead.
    pub fn recv_before(&mut self, consumer: NodeIndex, anchor: NodeIndex) {
        self.recv_before.insert(consumer, anchor);
    }

    /// Adds program-order edges along every chain; call once the chains are final.
    pub fn link_chains(&mut self) {
        for chain in &self.chains {
            for pair in chain.windows(2) {
                self.graph.add_edge(pair[0], pair[1], Dep::Program);
            }
        }
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
        // Transfers to print before / after each chain position; anchors are found by position.
        let mut before: Vec<Vec<Instr>> = vec![Vec::new(); chain.len()];
        let mut after: Vec<Vec<Instr>> = vec![Vec::new(); chain.len()];
        let anchored = !self.send_after.is_empty() || !self.recv_before.is_empty();
        let position: HashMap<NodeIndex, usize> =
            if anchored { chain.iter().enumerate().map(|(i, n)| (*n, i)).collect() } else { HashMap::default() };
        let anchor = |anchors: &HashMap<NodeIndex, NodeIndex>, node: NodeIndex, default: usize| {
            anchors.get(&node).and_then(|a| position.get(a)).copied().unwrap_or(default)
        };
        for (i, &node) in chain.iter().enumerate() {
            // An overlapped pair is one slot: its transfers go around both halves.
            let opens = |j: usize| self.pair_starts(chain, j);
            let group_start = if i > 0 && opens(i - 1) { i - 1 } else { i };
            let group_end = if opens(i) { i + 1 } else { i };
            let me = &self.graph[node].instr;
            let mut inputs: Vec<(u32, Instr)> = Vec::new();
            for edge in self.graph.edges_directed(node, Direction::Incoming) {
                let Dep::Data(dir) = *edge.weight() else { continue };
                let from = self.rank_of(edge.source(), rank);
                if from != rank {
                    let producer = &self.graph[edge.source()].instr;
                    let (stage, mb) = (producer.stage.unwrap_or(0), producer.mb.unwrap_or(0));
                    // A part's tensor is its images' slice, activation or gradient alike.
                    let images = producer.images.or(if dir == Dir::Grad { me.images } else { None });
                    inputs.push((from, Instr { images, ..Instr::comm(Op::Recv, dir, stage, mb, from) }));
                }
            }
            if !inputs.is_empty() {
                inputs.sort_by_key(|(from, i)| (i.stage, i.mb, *from));
                before[anchor(&self.recv_before, node, group_start)].extend(inputs.into_iter().map(|(_, i)| i));
            }
            let mut outputs: Vec<(u32, Instr)> = Vec::new();
            // A send event (features held from the step before) is its own output.
            let outgoing = if me.op == Op::Send { None } else { Some(node) };
            for edge in outgoing.into_iter().flat_map(|n| self.graph.edges_directed(n, Direction::Outgoing)) {
                let Dep::Data(dir) = *edge.weight() else { continue };
                let to = self.rank_of(edge.target(), rank);
                if to != rank {
                    let target = &self.graph[edge.target()].instr;
                    let images = me.images.or(if dir == Dir::Grad { target.images } else { None });
                    let send = Instr::comm(Op::Send, dir, me.stage.unwrap_or(0), me.mb.unwrap_or(0), to);
                    outputs.push((to, Instr { images, ..send }));
                }
            }
            if !outputs.is_empty() {
                outputs.sort_by_key(|(to, _)| *to);
                after[anchor(&self.send_after, node, group_end)].extend(outputs.into_iter().map(|(_, i)| i));
            }
        }
        let mut out = Vec::with_capacity(chain.len() * 2);
        for (i, node) in chain.iter().enumerate() {
            out.append(&mut before[i]);
            out.push(self.graph[*node].instr.clone());
            out.append(&mut after[i]);
        }
        out
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
