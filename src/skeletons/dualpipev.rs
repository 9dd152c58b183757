//! torch's `ScheduleDualPipeV`: the V mapping, eight phases, and overlapped forward/backward
//! pairs (torch's `OVERLAP_F_B`), here two tasks marked `overlap`, forward first.

use std::collections::{HashMap, VecDeque};

use super::{Shape, Task};
use crate::ir::Op;

pub fn order(shape: Shape) -> Vec<Vec<Task>> {
    (0..shape.ranks).map(|r| rank_order(shape, r)).collect()
}

struct Builder {
    ops: Vec<Task>,
    counters: HashMap<(u32, Op), u32>,
    weights: VecDeque<(u32, u32)>,
}

impl Builder {
    fn count(&self, stage: u32, op: Op) -> u32 {
        self.counters.get(&(stage, op)).copied().unwrap_or(0)
    }

    fn bump(&mut self, stage: u32, op: Op) {
        *self.counters.entry((stage, op)).or_insert(0) += 1;
    }

    /// A full backward counts as both its input and its weight half.
    fn bump_backward(&mut self, stage: u32) {
        self.bump(stage, Op::BackwardInput);
        self.bump(stage, Op::BackwardWeight);
    }

    fn action(&mut self, stage: u32, op: Op) {
        let key = if op == Op::Backward { Op::BackwardInput } else { op };
        let mb = self.count(stage, key);
        self.ops.push(Task::new(op, stage, mb));
        if op == Op::Backward {
            self.bump_backward(stage);
        } else {
            if op == Op::BackwardInput {
                self.weights.push_back((stage, mb));
            }
            self.bump(stage, key);
        }
    }

    fn overlap(&mut self, forward: u32, backward: u32) {
        let fmb = self.count(forward, Op::Forward);
        let bmb = self.count(backward, Op::BackwardInput);
        self.ops.push(Task { op: Op::Forward, stage: forward, mb: fmb, overlap: true });
        self.ops.push(Task { op: Op::Backward, stage: backward, mb: bmb, overlap: true });
        self.bump(forward, Op::Forward);
        self.bump_backward(backward);
    }

    fn pending_weight(&mut self) {
        if let Some((stage, mb)) = self.weights.pop_front() {
            self.ops.push(Task::new(Op::BackwardWeight, stage, mb));
            self.bump(stage, Op::BackwardWeight);
        }
    }
}

fn rank_order(shape: Shape, rank: u32) -> Vec<Task> {
    let Shape { ranks: pp, microbatches: n, .. } = shape;
    let (s0, s1) = (rank, 2 * pp - 1 - rank);
    let mut b = Builder { ops: Vec::new(), counters: HashMap::new(), weights: VecDeque::new() };
    for _ in 0..(pp - rank - 1) * 2 {
        b.action(s0, Op::Forward);
    }
    for _ in 0..rank + 1 {
        b.action(s0, Op::Forward);
        b.action(s1, Op::Forward);
    }
    for _ in 0..pp - rank - 1 {
        b.action(s1, Op::BackwardInput);
        b.pending_weight();
        b.action(s1, Op::Forward);
    }
    // The checker guarantees n >= 2P, so this count is not negative.
    for i in 0..n + rank + 1 - 2 * pp {
        if i == 0 && rank == pp - 1 {
            b.action(s0, Op::Forward);
            b.action(s1, Op::Backward);
        } else {
            b.overlap(s0, s1);
        }
        b.overlap(s1, s0);
    }
    for _ in 0..pp - rank - 1 {
        b.action(s1, Op::Backward);
        b.overlap(s1, s0);
    }
    let step6 = rank + 1;
    let mut zero_bubble = false;
    for i in 0..step6 {
        if i == step6 / 2 && rank % 2 == 1 {
            zero_bubble = true;
        }
        b.action(s1, if zero_bubble { Op::BackwardInput } else { Op::Backward });
        if i == step6 / 2 && rank.is_multiple_of(2) {
            zero_bubble = true;
        }
        b.action(s0, if zero_bubble { Op::BackwardInput } else { Op::Backward });
    }
    for _ in 0..pp - rank - 1 {
        b.pending_weight();
        b.action(s0, if zero_bubble { Op::BackwardInput } else { Op::Backward });
    }
    for _ in 0..rank + 1 {
        b.pending_weight();
    }
    b.ops
}
