//! torch's `ScheduleZBVZeroBubble`: two stages per rank in a V (rank r holds stages r and
//! 2P - 1 - r), split backward. Microbatch counts below 2P - 1 are padded and the padding
//! masked out, as torch does.

use super::{Shape, Task};
use crate::ir::Op;

pub fn order(shape: Shape) -> Vec<Vec<Task>> {
    (0..shape.ranks).map(|r| rank_order(shape, r)).collect()
}

fn rank_order(shape: Shape, rank: u32) -> Vec<Task> {
    let Shape { ranks: pp, microbatches: n, .. } = shape;
    let n_micro = (2 * pp - 1).max(n);
    let (c0, c1) = (rank, 2 * pp - 1 - rank);
    let (mut f0, mut f1, mut b0, mut b1) = (0, 0, 0, 0);
    let mut ops = Vec::new();
    let task = Task::new;
    for _ in 0..2 * (pp - rank) - 1 {
        ops.push(task(Op::Forward, c0, f0));
        f0 += 1;
    }
    for _ in 0..rank {
        ops.push(task(Op::Forward, c1, f1));
        f1 += 1;
        ops.push(task(Op::Forward, c0, f0));
        f0 += 1;
    }
    for _ in 0..pp - rank {
        ops.push(task(Op::Forward, c1, f1));
        f1 += 1;
        ops.push(task(Op::BackwardInput, c1, b1));
        ops.push(task(Op::BackwardWeight, c1, b1));
        b1 += 1;
    }
    while f1 < f0 || f0 < n_micro {
        if f0 < n_micro {
            ops.push(task(Op::Forward, c0, f0));
            f0 += 1;
        }
        ops.push(task(Op::BackwardInput, c0, b0));
        ops.push(task(Op::BackwardWeight, c0, b0));
        b0 += 1;
        ops.push(task(Op::Forward, c1, f1));
        f1 += 1;
        ops.push(task(Op::BackwardInput, c1, b1));
        ops.push(task(Op::BackwardWeight, c1, b1));
        b1 += 1;
    }
    let (mut w0, mut w1) = (b0, b1);
    for _ in 0..rank {
        ops.push(task(Op::BackwardInput, c0, b0));
        b0 += 1;
        ops.push(task(Op::BackwardInput, c1, b1));
        b1 += 1;
    }
    for _ in 0..pp - rank {
        ops.push(task(Op::BackwardInput, c0, b0));
        b0 += 1;
        ops.push(task(Op::BackwardWeight, c0, w0));
        w0 += 1;
    }
    while w1 < b1 {
        ops.push(task(Op::BackwardWeight, c1, w1));
        w1 += 1;
    }
    while w0 < b0 {
        ops.push(task(Op::BackwardWeight, c0, w0));
        w0 += 1;
    }
    ops.retain(|t| t.mb < n);
    ops
}
