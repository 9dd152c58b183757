//! GPipe: every forward, then every backward (torch `ScheduleGPipe`). With several stages per
//! rank it is torch's `ScheduleLoopedBFS`: stage by stage forward, then backward in reverse,
//! microbatches descending.

use super::{Shape, Task};
use crate::ir::Op;

pub fn order(shape: Shape) -> Vec<Vec<Task>> {
    let Shape { ranks, chunks, microbatches: n } = shape;
    (0..ranks)
        .map(|r| {
            let stages: Vec<u32> = (0..chunks).map(|c| c * ranks + r).collect();
            let mut ops = Vec::new();
            for &s in &stages {
                ops.extend((0..n).map(|m| Task::new(Op::Forward, s, m)));
            }
            if chunks == 1 {
                ops.extend((0..n).map(|m| Task::new(Op::Backward, r, m)));
            } else {
                for &s in stages.iter().rev() {
                    ops.extend((0..n).rev().map(|m| Task::new(Op::Backward, s, m)));
                }
            }
            ops
        })
        .collect()
}
