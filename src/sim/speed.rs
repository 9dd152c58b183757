//! The host's speed as a profile's run saw it (`Profile::speed_trace`). A host shared with other
//! work slows down in stretches: one rank's instructions run long for a while and the ranks
//! that wait for its messages wait longer. Over a pipeline's dependencies that costs more than
//! the instructions' typical times say, since a step waits for whichever rank was slow: on
//! the 2-core VM one `llm_1f1b` run on 2 ranks, replayed with each instruction's median time,
//! gave a 75 ms step, and 84 ms measured. So the step is run `DRAWS` times, each rank taking
//! its instructions' typical times through a stretch of the trace drawn for it, and the
//! median run is kept, as a run's measured step is its median step.

use std::cell::RefCell;

use crate::ir::interpret::{self, Deadlock, Durations, PHASES, Shared, Timeline};
use crate::ir::{Instr, PlanIr};
use crate::random::Lcg;

/// Runs drawn: enough that the median's draw-to-draw spread (1.25 σ/√n for a spread σ of the
/// runs' steps of 10 %) stays near 1.5 %.
const DRAWS: usize = 63;

/// The draws' seed: the same plan and profile give the same step.
const SEED: u64 = 0x5eed_5bee_d7ac_e000;

/// One rank's stretch of the trace: (typical seconds, ratio) pieces from a point, wrapping
/// round at the end.
struct Tape<'a> {
    pieces: &'a [(f64, f64)],
    /// The typical seconds before each piece, and in all.
    before: Vec<f64>,
    total: f64,
    /// What the whole trace takes, once round.
    round: f64,
    at: f64,
}

impl<'a> Tape<'a> {
    fn new(pieces: &'a [(f64, f64)], from: f64) -> Tape<'a> {
        // Each piece ends exactly where the next begins (the same sums), so a point before the
        // total always lies within a piece of some length.
        let mut total = 0.0;
        let before = pieces
            .iter()
            .map(|&(s, _)| {
                let b = total;
                total += s;
                b
            })
            .collect();
        let round = pieces.iter().map(|(s, x)| s * x).sum();
        Tape { pieces, before, total, round, at: from * total }
    }

    /// What `seconds` of typical work take through the tape from where it is.
    fn take(&mut self, seconds: f64) -> f64 {
        if self.total <= 0.0 {
            return seconds;
        }
        // Whole rounds at once: a trace far shorter than the work is walked once at most.
        let rounds = (seconds / self.total).floor();
        let (mut left, mut taken) = (seconds - rounds * self.total, rounds * self.round);
        while left > 0.0 {
            self.at %= self.total;
            let k = self.before.partition_point(|&b| b <= self.at) - 1;
            let (len, ratio) = self.pieces[k];
            let part = (self.before[k] + len - self.at).min(left);
            taken += part * ratio;
            left -= part;
            self.at += part;
        }
        taken
    }
}

/// The durations with each rank's compute through its tape.
struct Drawn<'a> {
    durations: &'a dyn Durations,
    tapes: RefCell<Vec<Tape<'a>>>,
}

impl Durations for Drawn<'_> {
    fn instruction(&self, rank: u32, i: &Instr) -> f64 {
        let typical = self.durations.instruction(rank, i);
        if !i.op.is_compute() {
            return typical;
        }
        self.tapes.borrow_mut().get_mut(rank as usize).map_or(typical, |t| t.take(typical))
    }
    fn transfer(&self, from: u32, to: u32, i: &Instr) -> f64 {
        self.durations.transfer(from, to, i)
    }
    fn shared(&self) -> Option<Shared> {
        self.durations.shared()
    }
}

/// The median of `DRAWS` runs, each rank's compute through a stretch of one of the trace's
/// ranks from a point drawn at random, a shared host's balancings at each phase in turn. The
/// interpreter asks each compute instruction's duration once, in its rank's order.
pub fn run(ir: &PlanIr, durations: &dyn Durations, trace: &[Vec<(f64, f64)>]) -> Result<Timeline, Deadlock> {
    let mut rng = Lcg::new(SEED);
    let runs = (0..DRAWS)
        .map(|k| {
            let tapes = ir.ranks.iter().map(|_| Tape::new(&trace[rng.below(trace.len())], rng.uniform())).collect();
            let drawn = Drawn { durations, tapes: RefCell::new(tapes) };
            interpret::run_at_phase(ir, &drawn, PHASES[k % PHASES.len()])
        })
        .collect();
    interpret::middle(runs)
}

#[cfg(test)]
mod tests {
    use super::Tape;

    /// Four typical seconds, the first two at the typical speed and the last two at a third of
    /// it, entered a quarter of the way in: 1 s at 1 and 1 s at 3, then 1 s at 3 and, round
    /// again, 2 s at 1; ten seconds from there are two whole rounds (16 s) and 2 s more at 3.
    #[test]
    fn a_tape_takes_its_pieces_in_turn_and_wraps_round() {
        let pieces = [(2.0, 1.0), (2.0, 3.0)];
        let mut tape = Tape::new(&pieces, 0.25);
        assert_eq!(tape.take(2.0), 4.0);
        assert_eq!(tape.take(3.0), 5.0);
        assert_eq!(tape.take(10.0), 22.0);
        assert_eq!(Tape::new(&[], 0.5).take(7.0), 7.0);
    }
}
