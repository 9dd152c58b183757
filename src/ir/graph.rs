//! The instruction graph of a lowered plan: every instruction a node, edges along each rank's
//! list, from each send to its receive, and through one sync node per collective. Acyclic
//! exactly when the lists run to the end under blocking receives; its longest path is the
//! simulator's makespan.

use std::collections::HashMap;

use petgraph::graph::{DiGraph, NodeIndex};

use super::{Dir, Group, Instr, Op, PlanIr};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Edge {
    Program,
    /// A send to its matching receive.
    Transfer,
    /// Into or out of a collective's sync node.
    Sync,
}

/// A node: an instruction (rank, index), or the sync point of a collective.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Node {
    Instr { rank: u32, index: usize },
    Sync,
}

pub struct InstrGraph {
    pub graph: DiGraph<Node, Edge>,
    /// Node of each instruction, by rank and index.
    pub nodes: Vec<Vec<NodeIndex>>,
}

/// What identifies a transfer: sender, receiver, direction, producing stage, microbatch.
type TransferKey = (u32, u32, Dir, u32, u32);

fn describe(rank: u32, index: usize, i: &Instr) -> String {
    format!("rank {rank}, instruction {index} ({})", super::text::instr(i))
}

pub fn build(ir: &PlanIr) -> Result<InstrGraph, Vec<String>> {
    let mut graph = DiGraph::new();
    let mut problems = Vec::new();
    let nodes: Vec<Vec<NodeIndex>> = ir
        .ranks
        .iter()
        .map(|r| (0..r.instructions.len()).map(|index| graph.add_node(Node::Instr { rank: r.rank, index })).collect())
        .collect();
    for chain in &nodes {
        for pair in chain.windows(2) {
            graph.add_edge(pair[0], pair[1], Edge::Program);
        }
    }
    let mut sends: HashMap<TransferKey, (u32, usize)> = HashMap::new();
    let mut recvs: HashMap<TransferKey, (u32, usize)> = HashMap::new();
    let mut collectives: HashMap<Group, Vec<Vec<usize>>> = HashMap::new();
    for r in &ir.ranks {
        for (index, i) in r.instructions.iter().enumerate() {
            match i.op {
                Op::Send | Op::Recv => {
                    let (Some(peer), Some(dir), Some(stage), Some(mb)) = (i.peer, i.dir, i.stage, i.mb) else {
                        problems
                            .push(format!("{}: a transfer needs peer, dir, stage and mb", describe(r.rank, index, i)));
                        continue;
                    };
                    if peer == r.rank || peer >= ir.pipeline.ranks {
                        problems.push(format!("{}: invalid peer {peer}", describe(r.rank, index, i)));
                        continue;
                    }
                    let (key, table) = if i.op == Op::Send {
                        ((r.rank, peer, dir, stage, mb), &mut sends)
                    } else {
                        ((peer, r.rank, dir, stage, mb), &mut recvs)
                    };
                    if let Some((other_rank, other)) = table.insert(key, (r.rank, index)) {
                        problems.push(format!(
                            "{}: the same transfer appears again (first at rank {other_rank}, instruction {other})",
                            describe(r.rank, index, i)
                        ));
                    }
                }
                Op::AllReduce if i.group == Some(Group::Pp) => {
                    let per_rank = collectives.entry(Group::Pp).or_insert_with(|| vec![Vec::new(); ir.ranks.len()]);
                    per_rank[r.rank as usize].push(index);
                }
                _ => {}
            }
        }
    }
    let mut keys: Vec<&TransferKey> = sends.keys().collect();
    keys.sort();
    for key in keys {
        let (from, si) = sends[key];
        match recvs.remove(key) {
            Some((to, ri)) => {
                graph.add_edge(nodes[from as usize][si], nodes[to as usize][ri], Edge::Transfer);
            }
            None => {
                let i = &ir.ranks[from as usize].instructions[si];
                problems.push(format!("{}: no rank {} receives it", describe(from, si, i), key.1));
            }
        }
    }
    let mut unmatched: Vec<(TransferKey, (u32, usize))> = recvs.into_iter().collect();
    unmatched.sort();
    for (key, (to, ri)) in unmatched {
        let i = &ir.ranks[to as usize].instructions[ri];
        problems.push(format!("{}: rank {} never sends it", describe(to, ri, i), key.0));
    }
    if let Some(per_rank) = collectives.get(&Group::Pp) {
        let count = per_rank[0].len();
        if per_rank.iter().any(|c| c.len() != count) {
            let counts: Vec<usize> = per_rank.iter().map(Vec::len).collect();
            problems.push(format!("the ranks run different numbers of pipeline-group all-reduces: {counts:?}"));
        } else {
            for k in 0..count {
                let sync = graph.add_node(Node::Sync);
                for (rank, indices) in per_rank.iter().enumerate() {
                    let index = indices[k];
                    if index > 0 {
                        graph.add_edge(nodes[rank][index - 1], sync, Edge::Sync);
                    }
                    graph.add_edge(sync, nodes[rank][index], Edge::Sync);
                }
            }
        }
    }
    if problems.is_empty() { Ok(InstrGraph { graph, nodes }) } else { Err(problems) }
}
