//! Ranks that are processes on one host's CPU, sharing its cores: the rank's own work (its
//! instructions' durations, what the runtime spends on a message included) needs a core, a
//! wait (for a message in flight, a collective's group) needs none. The host shares its cores
//! among the processes working, as an operating system's scheduler does over time: with `n`
//! processes working on `c` cores, each runs at `min(1, c / n)` of its own speed. The ranks
//! advance in time order, so that who works at each moment is known.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use super::{Machine, Next};

/// Where the ranks share a host: its cores, the threads each process computes with (the
/// measured times were taken with that many), the processes each simulated rank stands for
/// (its data-parallel replicas, which run the same list at the same times) and the core time a
/// process's other threads spend on each message it receives (charged to the receive: with
/// the cores all taken it is the rank's time as much as its own instructions are).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Shared {
    pub cores: f64,
    pub threads: f64,
    pub replicas: f64,
    pub message_cpu: f64,
}

impl Shared {
    /// The ranks' processes at full speed at once: the cores' worth of them.
    fn capacity(self) -> f64 {
        self.cores / (self.threads * self.replicas)
    }

    /// Whether `ranks` working at once would slow each other down.
    pub fn contended(self, ranks: usize) -> bool {
        (ranks as f64) > self.capacity()
    }
}

/// A time, ordered (the simulator's times are finite).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Time(f64);

impl Eq for Time {}

impl PartialOrd for Time {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Time {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// The work on the host's cores: each working rank and the seconds of work it has left.
struct Cores {
    capacity: f64,
    now: f64,
    working: Vec<(usize, f64)>,
}

impl Cores {
    /// The speed of each working rank, as a fraction of its own.
    fn rate(&self) -> f64 {
        (self.capacity / self.working.len() as f64).min(1.0)
    }

    /// The rank whose work ends first, and when (the lowest rank on a tie).
    fn next(&self) -> Option<(f64, usize)> {
        let rate = self.rate();
        self.working
            .iter()
            .map(|&(r, left)| (self.now + left.max(0.0) / rate, r))
            .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)))
    }

    fn advance(&mut self, to: f64) {
        if to > self.now && !self.working.is_empty() {
            let done = (to - self.now) * self.rate();
            for (_, left) in &mut self.working {
                *left -= done;
            }
        }
        self.now = self.now.max(to);
    }
}

/// Where a rank is between the driver's steps.
#[derive(Clone, Copy, PartialEq)]
enum State {
    /// In the queue, to begin its next instruction.
    Queued,
    /// In the queue, to start this much work when its wait ends.
    Waiting(f64),
    Working,
    Blocked,
}

/// The ranks in time order: the earliest of the next rank to begin an instruction and the next
/// work to end is taken first, so the cores are shared among the ranks working at that moment.
pub(super) fn run(m: &mut Machine, shared: Shared) {
    let ranks = m.ir.ranks.len();
    m.message_cpu = shared.message_cpu;
    let mut cores = Cores { capacity: shared.capacity(), now: 0.0, working: Vec::new() };
    let mut state = vec![State::Queued; ranks];
    let mut queue: BinaryHeap<Reverse<(Time, usize)>> = (0..ranks).map(|r| Reverse((Time(0.0), r))).collect();
    loop {
        let queued = queue.peek().map(|Reverse((t, r))| (t.0, *r));
        let ending = cores.next().filter(|&(t, _)| queued.is_none_or(|(u, _)| t <= u));
        if let Some((t, r)) = ending {
            cores.advance(t);
            cores.working.retain(|&(w, _)| w != r);
            m.finish(r, t);
            state[r] = State::Queued;
            queue.push(Reverse((Time(t), r)));
        } else if let Some((t, r)) = queued {
            queue.pop();
            cores.advance(t);
            state[r] = match state[r] {
                State::Waiting(work) => {
                    cores.working.push((r, work));
                    State::Working
                }
                _ => step(m, r, t, &mut cores, &mut queue),
            };
        } else {
            break;
        }
        for w in m.woken.drain(..) {
            if state[w] == State::Blocked {
                state[w] = State::Queued;
                queue.push(Reverse((Time(m.clock[w].max(cores.now)), w)));
            }
        }
    }
}

/// Rank `r` at time `now` runs what takes it no core time, up to its next work or wait.
fn step(
    m: &mut Machine,
    r: usize,
    now: f64,
    cores: &mut Cores,
    queue: &mut BinaryHeap<Reverse<(Time, usize)>>,
) -> State {
    while !m.done(r) {
        match m.begin(r) {
            Next::Blocked => return State::Blocked,
            Next::Work { at, work } if work > 0.0 && at > now => {
                queue.push(Reverse((Time(at), r)));
                return State::Waiting(work);
            }
            Next::Work { work, .. } if work > 0.0 => {
                cores.working.push((r, work));
                return State::Working;
            }
            Next::Work { at: end, .. } | Next::Until(end) => {
                m.finish(r, end);
                if end > now {
                    queue.push(Reverse((Time(end), r)));
                    return State::Queued;
                }
            }
        }
    }
    State::Queued
}
