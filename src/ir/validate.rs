//! The validator every build runs: independent of how the lists were derived, it checks that
//! they are a correct pipeline step. Each stage's forward and backward appear exactly once
//! per microbatch on the rank that holds the stage; every input is there before it is used
//! (activation before forward, forward and output gradient before backward, input gradient
//! before weight gradient, encoder features before the first body forward); every send has
//! exactly one receive; and the lists run to the end under blocking receives.

use std::collections::{HashMap, HashSet};

use super::{Dir, Instr, Op, PlanIr};

fn at(rank: u32, index: usize, i: &Instr) -> String {
    format!("rank {rank}, instruction {index} ({})", super::text::instr(i))
}

pub fn validate(ir: &PlanIr) -> Result<(), Vec<String>> {
    let mut problems = Vec::new();
    let p = ir.pipeline.ranks;
    let m = ir.pipeline.microbatches;
    if ir.ranks.len() != p as usize || ir.ranks.iter().enumerate().any(|(i, r)| r.rank != i as u32) {
        return Err(vec![format!("the plan has {} rank lists for {p} pipeline ranks", ir.ranks.len())]);
    }
    let region_of = |s: u32| ir.regions.iter().find(|r| r.name == ir.stage(s).region);
    let backward_of = |s: u32| region_of(s).is_some_and(|r| r.backward);
    let holds = |rank: u32, s: u32, mb: u32| {
        let stage = ir.stage(s);
        match stage.rank {
            Some(r) => r == rank,
            None => ir.owner.get(&stage.region).and_then(|o| o.get(mb as usize)).is_some_and(|o| *o == rank),
        }
    };
    let stages = ir.stages.len() as u32;
    let mut counts: HashMap<(u32, u32, Op), usize> = HashMap::new();
    for r in &ir.ranks {
        // What this rank has done or received so far, in list order.
        let mut done: HashSet<(Op, u32, u32)> = HashSet::new();
        let mut got: HashSet<(Dir, u32, u32)> = HashSet::new();
        for (index, i) in r.instructions.iter().enumerate() {
            let here = || at(r.rank, index, i);
            if !i.op.is_compute() {
                match (i.op, i.dir, i.stage, i.mb) {
                    (Op::Recv, Some(dir), Some(s), Some(mb)) => {
                        got.insert((dir, s, mb));
                    }
                    (Op::Send, Some(Dir::Act), Some(s), Some(mb)) if !done.contains(&(Op::Forward, s, mb)) => {
                        problems.push(format!("{}: sends an activation before computing it", here()));
                    }
                    (Op::Send, Some(Dir::Grad), Some(s), Some(mb))
                        if !done.contains(&(Op::Backward, s, mb)) && !done.contains(&(Op::BackwardInput, s, mb)) =>
                    {
                        problems.push(format!("{}: sends a gradient before computing it", here()));
                    }
                    _ => {}
                }
                continue;
            }
            let (Some(s), Some(mb)) = (i.stage, i.mb) else {
                problems.push(format!("{}: a compute instruction needs stage and mb", here()));
                continue;
            };
            if s >= stages || mb >= m {
                problems.push(format!("{}: no such stage or microbatch", here()));
                continue;
            }
            if !holds(r.rank, s, mb) {
                problems.push(format!("{}: this rank does not hold stage {s} for microbatch {mb}", here()));
            }
            *counts.entry((s, mb, i.op)).or_insert(0) += 1;
            let input_ready = |done: &HashSet<(Op, u32, u32)>, got: &HashSet<(Dir, u32, u32)>, dir: Dir, from: u32| {
                let local = if dir == Dir::Act {
                    done.contains(&(Op::Forward, from, mb))
                } else {
                    done.contains(&(Op::Backward, from, mb)) || done.contains(&(Op::BackwardInput, from, mb))
                };
                local || got.contains(&(dir, from, mb))
            };
            match i.op {
                Op::Forward => {
                    if s > 0 && !input_ready(&done, &got, Dir::Act, s - 1) {
                        problems.push(format!(
                            "{}: runs before its input (stage {} microbatch {mb}) is here",
                            here(),
                            s - 1
                        ));
                    }
                }
                Op::Backward | Op::BackwardInput => {
                    if !done.contains(&(Op::Forward, s, mb)) {
                        problems.push(format!("{}: runs before the forward of stage {s} microbatch {mb}", here()));
                    }
                    if s + 1 < stages && backward_of(s + 1) && !input_ready(&done, &got, Dir::Grad, s + 1) {
                        problems.push(format!(
                            "{}: runs before its output gradient (stage {} microbatch {mb}) is here",
                            here(),
                            s + 1
                        ));
                    }
                }
                Op::BackwardWeight => {
                    if !done.contains(&(Op::BackwardInput, s, mb)) {
                        problems
                            .push(format!("{}: runs before the backward-input of stage {s} microbatch {mb}", here()));
                    }
                }
                _ => unreachable!("compute ops only"),
            }
            done.insert((i.op, s, mb));
        }
    }
    for s in 0..stages {
        for mb in 0..m {
            let n = |op| counts.get(&(s, mb, op)).copied().unwrap_or(0);
            if n(Op::Forward) != 1 {
                problems.push(format!("stage {s} microbatch {mb}: {} forwards, expected 1", n(Op::Forward)));
            }
            let (b, bi, bw) = (n(Op::Backward), n(Op::BackwardInput), n(Op::BackwardWeight));
            let expected = usize::from(backward_of(s));
            if bi != bw || b + bi != expected {
                problems.push(format!("stage {s} microbatch {mb}: backward {b}, backward_input {bi}, backward_weight {bw}; expected {expected} backward in all"));
            }
        }
    }
    match super::graph::build(ir) {
        Err(mut more) => problems.append(&mut more),
        Ok(g) => {
            if let Err(node) = petgraph::algo::toposort(&g.graph, None) {
                let blocked = match g.graph[node.node_id()] {
                    super::graph::Node::Instr { rank, index } => {
                        at(rank, index, &ir.ranks[rank as usize].instructions[index])
                    }
                    super::graph::Node::Sync => "a collective".to_string(),
                };
                problems.push(format!("deadlock: the ranks wait on each other in a cycle through {blocked}"));
            }
        }
    }
    if problems.is_empty() { Ok(()) } else { Err(problems) }
}
