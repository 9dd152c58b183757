//! HyperParallel's `ScheduleInterleaved1F1B` (hyper_parallel/core/pipeline_parallel/scheduler.py),
//! the body its `ScheduleMPipeTranspose` runs, stage s on rank s mod P. Rank i runs
//! (V-1)·R + 2(P-1-i) warmup forwards (R: microbatches of the first round), or (V-1)·R + (P-1-i)
//! in the `less_memory` variant, capped at V·M; then one forward and one backward at a time;
//! then the remaining backwards, each after an idle slot.
//!
//! HyperParallel places its sends and receives by scanning these orders column by column, so
//! the idle slots (`None`) are part of the schedule: they decide where each transfer lands.
//! Without them, one chunk and `less_memory` give Megatron's 1F1B and the classic warmup gives
//! the interleaved order with one chunk (see the tests).

use super::{Shape, Task};
use crate::ir::Op;

/// Each rank's time slots, `None` where the rank idles.
pub fn slots(shape: Shape, less_memory: bool) -> Vec<Vec<Option<Task>>> {
    let rounds = Rounds::new(shape);
    (0..shape.ranks).map(|rank| rank_slots(shape, &rounds, rank, less_memory)).collect()
}

/// The compute order of every rank, idle slots dropped.
pub fn order(shape: Shape, less_memory: bool) -> Vec<Vec<Task>> {
    slots(shape, less_memory).into_iter().map(|r| r.into_iter().flatten().collect()).collect()
}

/// Microbatches by round: max(1, M // P) rounds, the M mod P extra microbatches spread over
/// the first rounds; with M < P one round of M.
struct Rounds {
    sizes: Vec<u32>,
    /// Ops before each round: V times the microbatches of the rounds before it.
    starts: Vec<u32>,
    chunks: u32,
}

impl Rounds {
    fn new(shape: Shape) -> Rounds {
        let Shape { ranks: p, chunks, microbatches: m } = shape;
        let count = (m / p).max(1);
        let sizes: Vec<u32> = if m < p {
            vec![m]
        } else {
            let extra = m % p;
            (0..count).map(|i| p + extra / count + u32::from(i < extra % count)).collect()
        };
        let starts = sizes.iter().scan(0, |acc, s| Some(std::mem::replace(acc, *acc + s * chunks))).collect();
        Rounds { sizes, starts, chunks }
    }

    /// The chunk the `op`-th forward of a rank runs.
    fn chunk(&self, op: u32) -> u32 {
        let round = self.starts.partition_point(|&s| s <= op) - 1;
        (op - self.starts[round]) / self.sizes[round]
    }
}

fn rank_slots(shape: Shape, rounds: &Rounds, rank: u32, less_memory: bool) -> Vec<Option<Task>> {
    let Shape { ranks: p, chunks: v, microbatches: m } = shape;
    let depth = p - 1 - rank;
    let stagger = if less_memory { depth } else { 2 * depth };
    let total_forwards = v * m;
    let warmup = ((v - 1) * rounds.sizes[0] + stagger).min(total_forwards);
    let forward_stage = |op: u32| rounds.chunk(op) * p + rank;
    let backward_stage = |op: u32| (rounds.chunks - 1 - rounds.chunk(op)) * p + rank;
    // With fewer microbatches than ranks the last microbatch of each chunk leaves P - M slots
    // idle; the doubled pad keeps the chunk wrap-around gradient after its producer.
    let short = m < p;
    let pad = p.saturating_sub(m);
    let mut next = vec![[0u32; 2]; (p * v) as usize];
    let mut take = |stage: u32, op: Op| {
        let counter = &mut next[stage as usize][usize::from(op != Op::Forward)];
        *counter += 1;
        Task::new(op, stage, *counter - 1)
    };
    let mut out: Vec<Option<Task>> = vec![None; rank as usize];
    for op in 0..warmup {
        let task = take(forward_stage(op), Op::Forward);
        out.push(Some(task));
        if short && task.mb == m - 1 && (op != warmup - 1 || rank == p - 1) {
            out.extend(std::iter::repeat_n(None, pad as usize));
        }
    }
    let idle = stagger.saturating_sub(m) + depth;
    out.extend(std::iter::repeat_n(None, idle as usize));
    for op in warmup..total_forwards {
        out.push(Some(take(forward_stage(op), Op::Forward)));
        let task = take(backward_stage(op - warmup), Op::Backward);
        out.push(Some(task));
        if short && task.mb == m - 1 && rank == p - 1 {
            out.extend(std::iter::repeat_n(None, 2 * pad as usize));
        }
    }
    for op in total_forwards..total_forwards + warmup {
        out.push(None);
        let task = take(backward_stage(op - warmup), Op::Backward);
        out.push(Some(task));
        if short && task.mb == m - 1 {
            out.extend(std::iter::repeat_n(None, 2 * pad as usize));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algebra::Skeleton;
    use crate::skeletons::{order as canonical, render};

    fn shape(ranks: u32, chunks: u32, microbatches: u32) -> Shape {
        Shape { ranks, chunks, microbatches }
    }

    /// Slots as text: `.` idle, `F0.1` forward of stage 0, microbatch 1.
    fn text(rank: &[Option<Task>]) -> String {
        rank.iter()
            .map(|s| match s {
                None => ".".to_string(),
                Some(t) => format!("{}{}.{}", t.op.torch_letter(), t.stage, t.mb),
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    // By hand from the rules in the module header: P = 3, M = 4, one chunk. Rank i idles i
    // slots, runs its warmup, idles the stagger beyond M plus P-1-i more, alternates, and
    // ends with its warmup's backwards, each after an idle slot.
    #[test]
    fn classic_3x4_by_hand() {
        let s = slots(shape(3, 1, 4), false);
        assert_eq!(text(&s[0]), "F0.0 F0.1 F0.2 F0.3 . . . B0.0 . B0.1 . B0.2 . B0.3");
        assert_eq!(text(&s[1]), ". F1.0 F1.1 . F1.2 B1.0 F1.3 B1.1 . B1.2 . B1.3");
        assert_eq!(text(&s[2]), ". . F2.0 B2.0 F2.1 B2.1 F2.2 B2.2 F2.3 B2.3");
    }

    #[test]
    fn less_memory_3x4_by_hand() {
        let s = slots(shape(3, 1, 4), true);
        assert_eq!(text(&s[0]), "F0.0 F0.1 . . F0.2 B0.0 F0.3 B0.1 . B0.2 . B0.3");
        assert_eq!(text(&s[1]), ". F1.0 . F1.1 B1.0 F1.2 B1.1 F1.3 B1.2 . B1.3");
        assert_eq!(text(&s[2]), ". . F2.0 B2.0 F2.1 B2.1 F2.2 B2.2 F2.3 B2.3");
    }

    // M < P: the last microbatch's forward pads P - M idle slots unless it ends the warmup
    // (except on the last rank), and the last microbatch's backward pads 2(P - M).
    #[test]
    fn short_3x2_by_hand() {
        let s = slots(shape(3, 1, 2), false);
        assert_eq!(text(&s[0]), "F0.0 F0.1 . . . . . B0.0 . B0.1 . .");
        assert_eq!(text(&s[1]), ". F1.0 F1.1 . . B1.0 . B1.1 . .");
        assert_eq!(text(&s[2]), ". . F2.0 B2.0 F2.1 B2.1 . .");
    }

    #[test]
    fn less_memory_one_chunk_is_megatron_1f1b() {
        for (p, m) in [(2, 4), (3, 4), (4, 8), (4, 10), (8, 16), (4, 3), (3, 7)] {
            assert_eq!(
                render(&order(shape(p, 1, m), true)),
                render(&canonical(Skeleton::OneFOneB, shape(p, 1, m), true)),
                "{p}x{m}"
            );
        }
    }

    #[test]
    fn classic_is_the_interleaved_order() {
        for (p, v, m) in [(2, 1, 3), (3, 1, 4), (4, 1, 9), (4, 1, 2), (2, 2, 4), (4, 2, 8), (4, 2, 12), (3, 3, 9)] {
            assert_eq!(
                render(&order(shape(p, v, m), false)),
                render(&canonical(Skeleton::Interleaved { v }, shape(p, v, m), true)),
                "{p}x{v}x{m}"
            );
        }
    }
}
