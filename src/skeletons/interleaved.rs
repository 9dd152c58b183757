//! torch's `ScheduleInterleaved1F1B` and `ScheduleInterleavedZeroBubble` (`_get_1f1b_rank_ops`),
//! stage s on rank s mod P. Without zero bubble this equals Megatron's interleaved schedule
//! with `microbatch_group_size_per_vp_stage` = microbatches per round.

use std::collections::HashMap;

use super::{Shape, Task};
use crate::ir::Op;

/// Microbatches run in rounds: rounds = max(1, M // P), per round = M // rounds. The checker
/// has made sure rounds divide M (E0309).
fn per_round(ranks: u32, n: u32) -> u32 {
    n / (n / ranks).max(1)
}

pub fn order(shape: Shape, zero_bubble: bool) -> Vec<Vec<Task>> {
    (0..shape.ranks).map(|r| rank_order(shape, r, zero_bubble)).collect()
}

fn rank_order(shape: Shape, rank: u32, zero_bubble: bool) -> Vec<Task> {
    let Shape { ranks: pp, chunks: nl, microbatches: n } = shape;
    let mpr = per_round(pp, n);
    let factor = if zero_bubble { 1 } else { 2 };
    let warmup = ((nl - 1) * mpr + factor * (pp - 1 - rank)).min(n * nl);
    let total = n * nl;
    let fwd_bwd = total - warmup;
    // warmup forwards, fwd_bwd steady pairs, then as many cooldown backwards as warmup forwards
    let steps = warmup + fwd_bwd + warmup;
    let forward_stage = |step: u32| ((step / mpr) % nl) * pp + rank;
    let backward_stage = |step: u32| (nl - 1 - ((step - warmup) / mpr) % nl) * pp + rank;
    let backward_op = if zero_bubble { Op::BackwardInput } else { Op::Backward };
    let num_1f1b = rank; // zero bubble: weights wait this many steady steps
    let mut counters: HashMap<(u32, Op), u32> = HashMap::new();
    let mut next = |stage: u32, op: Op| {
        let c = counters.entry((stage, op)).or_insert(0);
        *c += 1;
        *c - 1
    };
    let mut ops = Vec::with_capacity(3 * total as usize);
    let mut backward_steps: Vec<u32> = Vec::new();
    let mut weights_done = 0usize;
    for step in 0..steps {
        if step < warmup {
            let s = forward_stage(step);
            ops.push(Task::new(Op::Forward, s, next(s, Op::Forward)));
            continue;
        }
        if step < warmup + fwd_bwd {
            let s = forward_stage(step);
            ops.push(Task::new(Op::Forward, s, next(s, Op::Forward)));
        }
        let s = backward_stage(step);
        ops.push(Task::new(backward_op, s, next(s, backward_op)));
        backward_steps.push(step);
        if zero_bubble && step - warmup >= num_1f1b {
            let s = backward_stage(backward_steps[weights_done]);
            ops.push(Task::new(Op::BackwardWeight, s, next(s, Op::BackwardWeight)));
            weights_done += 1;
        }
    }
    while zero_bubble && weights_done < backward_steps.len() {
        let s = backward_stage(backward_steps[weights_done]);
        ops.push(Task::new(Op::BackwardWeight, s, next(s, Op::BackwardWeight)));
        weights_done += 1;
    }
    ops
}
