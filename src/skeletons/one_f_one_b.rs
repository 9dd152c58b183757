//! Megatron's non-interleaved 1F1B (`forward_backward_pipelining_without_interleaving`, and the
//! order torch `Schedule1F1B` executes): rank r runs min(P - r - 1, M) warmup forwards, then
//! alternates one forward and one backward, then drains the backwards.

use super::{Shape, Task};
use crate::ir::Op;

pub fn order(shape: Shape) -> Vec<Vec<Task>> {
    let Shape { ranks, microbatches: n, .. } = shape;
    (0..ranks)
        .map(|r| {
            let warmup = (ranks - r - 1).min(n);
            let mut ops: Vec<Task> = (0..warmup).map(|m| Task::new(Op::Forward, r, m)).collect();
            for i in 0..n - warmup {
                ops.push(Task::new(Op::Forward, r, i + warmup));
                ops.push(Task::new(Op::Backward, r, i));
            }
            ops.extend((n - warmup..n).map(|m| Task::new(Op::Backward, r, m)));
            ops
        })
        .collect()
}
