//! Time over an order graph: the (max,+) view of a pipeline. Every node starts when all its
//! predecessors have finished (plus any edge latency) and runs for its own duration; the
//! makespan is the longest path. A cycle means the order cannot run: a deadlock.

use petgraph::Direction;
use petgraph::graph::{DiGraph, EdgeIndex, NodeIndex};
use petgraph::visit::EdgeRef;

use super::order::OrderGraph;
use super::placement::Placement;
use crate::cost::{self, Costs};
use crate::plan::Plan;

/// Start and end of every node, by node index.
#[derive(Clone, Debug, PartialEq)]
pub struct Times {
    pub start: Vec<f64>,
    pub end: Vec<f64>,
}

impl Times {
    pub fn makespan(&self) -> f64 {
        self.end.iter().cloned().fold(0.0, f64::max)
    }
}

/// Longest-path times; `Err(node)` names a node on a cycle.
pub fn longest_path<N, E>(
    graph: &DiGraph<N, E>,
    duration: impl Fn(NodeIndex) -> f64,
    latency: impl Fn(EdgeIndex) -> f64,
) -> Result<Times, NodeIndex> {
    let order = petgraph::algo::toposort(graph, None).map_err(|cycle| cycle.node_id())?;
    let n = graph.node_count();
    let (mut start, mut end) = (vec![0.0; n], vec![0.0; n]);
    for node in order {
        let mut s: f64 = 0.0;
        for edge in graph.edges_directed(node, Direction::Incoming) {
            s = s.max(end[edge.source().index()] + latency(edge.id()));
        }
        start[node.index()] = s;
        end[node.index()] = s + duration(node);
    }
    Ok(Times { start, end })
}

/// Longest-path times over `order`'s data edges and each chain's program order, with every
/// hand-off free; `None` when the order has a cycle. Each start is the largest end before it,
/// which no order of visiting changes: the times are those of [`longest_path`] over the graph
/// with an edge between consecutive events of each chain, without building that graph.
pub fn chain_times(order: &OrderGraph, duration: impl Fn(NodeIndex) -> f64) -> Option<Times> {
    let g = &order.graph;
    let n = g.node_count();
    // Program order as a successor list per node: a collective stands on every chain.
    let pairs = || order.chains.iter().flat_map(|c| c.windows(2).map(|p| (p[0].index(), p[1].index())));
    let mut first = vec![0usize; n + 1];
    for (a, _) in pairs() {
        first[a + 1] += 1;
    }
    for i in 0..n {
        first[i + 1] += first[i];
    }
    let mut next = vec![0usize; first[n]];
    let mut fill = first.clone();
    let mut waits = vec![0u32; n];
    for (a, b) in pairs() {
        next[fill[a]] = b;
        fill[a] += 1;
        waits[b] += 1;
    }
    for e in g.edge_references() {
        waits[e.target().index()] += 1;
    }
    let (mut start, mut end) = (vec![0.0f64; n], vec![0.0f64; n]);
    let mut ready: Vec<usize> = (0..n).filter(|&i| waits[i] == 0).collect();
    let mut done = 0;
    while let Some(i) = ready.pop() {
        done += 1;
        end[i] = start[i] + duration(NodeIndex::new(i));
        let data = g.neighbors_directed(NodeIndex::new(i), Direction::Outgoing).map(|m| m.index());
        for m in data.chain(next[first[i]..first[i + 1]].iter().copied()) {
            start[m] = start[m].max(end[i]);
            waits[m] -= 1;
            if waits[m] == 0 {
                ready.push(m);
            }
        }
    }
    (done == n).then_some(Times { start, end })
}

/// The longest chain of data dependencies in `order`, each event at its duration and each
/// cross-rank hand-off at its transfer time: what unlimited ranks could not beat.
pub fn data_path(order: &OrderGraph, placement: &Placement, plan: &Plan, costs: &dyn Costs) -> f64 {
    let g = &order.graph;
    let mut data = DiGraph::<(), f64>::with_capacity(g.node_count(), g.edge_count());
    for _ in 0..g.node_count() {
        data.add_node(());
    }
    let stages = &placement.stages;
    let images = plan.batch.images as u32;
    for e in g.edge_indices() {
        let (a, b) = g.edge_endpoints(e).expect("an edge has ends");
        let (ra, rb) = (g[a].rank, g[b].rank);
        let latency = match (ra, rb, g[a].instr.stage, g[a].instr.mb) {
            (Some(x), Some(y), Some(s), Some(mb)) if x != y => {
                costs.transfer(stages[s as usize].layers.clone(), mb, g[a].instr.share(images), x, y)
            }
            _ => 0.0,
        };
        data.add_edge(a, b, latency);
    }
    let duration = |n: NodeIndex| {
        let i = &g[n].instr;
        match (i.stage, i.mb) {
            (Some(s), Some(mb)) if i.op.is_compute() => {
                cost::compute_time(costs, i.op, stages[s as usize].layers.clone(), mb) * i.share(images)
            }
            _ => 0.0,
        }
    };
    longest_path(&data, duration, |e| data[e]).map(|t| t.makespan()).unwrap_or(0.0)
}
