//! Time over an order graph: the (max,+) view of a pipeline. Every node starts when all its
//! predecessors have finished (plus any edge latency) and runs for its own duration; the
//! makespan is the longest path. A cycle means the order cannot run: a deadlock.

use petgraph::Direction;
use petgraph::graph::{DiGraph, EdgeIndex, NodeIndex};

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
            use petgraph::visit::EdgeRef;
            s = s.max(end[edge.source().index()] + latency(edge.id()));
        }
        start[node.index()] = s;
        end[node.index()] = s + duration(node);
    }
    Ok(Times { start, end })
}
