//! Ranks that are processes on one host's CPU, sharing its cores: the rank's own work (its
//! instructions' durations, what the runtime spends on a message included) needs a core, a
//! wait (for a message in flight, a collective's group) needs none. The ranks advance in time
//! order, so that who works at each moment is known.
//!
//! The host shares its cores as Linux's scheduler does when they are busy. Each process works on
//! one core (a place, a core's worth of the ranks' capacity) and the places with work share
//! their capacity among the processes working: with `n` processes on `c` cores, all of them
//! used, each runs at `min(1, c / n)` of its own speed. A process that goes on working stays on
//! its place. One that wakes takes its own place or its waker's if idle; else its waker's where
//! the waker works there alone (a synchronous wake-up expects the waker to wait next), else
//! the less crowded of the two: a busy host's wake-up looks no further for an idle core. A place
//! left idle while another holds several processes takes one of them only at the scheduler's next
//! balancing, every `balance` seconds (an idle core does not pull a process that has just run).
//! The balancings' phase against the step is unknown: the step is run at four phases and the
//! second fastest of the four kept, so that a step that happens to fall in step with the
//! balancings is not what the simulator reports.
//!
//! Where the host's time slice is known, the working processes take turns instead of sharing
//! the capacity evenly: as many run at full speed as the places with work hold, the rest wait.
//! The kernel switches a process whose slice has run out when it next makes a system call,
//! which the runtime makes between instructions (its clocks, its sends) and hardly within
//! one, so a rank that ends an instruction after running a slice or more goes behind the
//! waiting ones, and one that ends it sooner goes on in its turn. The timer tick, which
//! would switch a rank within an instruction longer than it, is left out.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use super::{Deadlock, Durations, Machine, Next, Timeline};
use crate::ir::PlanIr;

/// Where the ranks share a host: its cores, the threads each process computes with (the
/// measured times were taken with that many), the processes each simulated rank stands for
/// (its data-parallel replicas, which run the same list at the same times), the core time a
/// process's other threads spend on each message it receives (charged to the receive: with
/// the cores all taken it is the rank's time as much as its own instructions are), the
/// seconds between the scheduler's balancings of its cores (0: an idle core takes a waiting
/// process at once) and its time slice (0: the processes working share the cores evenly).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Shared {
    pub cores: f64,
    pub threads: f64,
    pub replicas: f64,
    pub message_cpu: f64,
    pub balance: f64,
    pub slice: f64,
    /// How long a message waits, at most, for its sender's sending thread while the sender
    /// computes (`send_wait_s`; 0: it leaves at once).
    pub send_wait: f64,
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

/// The balancings' phases the step is run at, as fractions of the interval.
pub const PHASES: [f64; 4] = [0.0, 0.25, 0.5, 0.75];

/// The step on the shared host: at each of the balancings' phases, the run whose step ends
/// second of the four (the lower middle); one run where the host balances at once.
pub(super) fn run(ir: &PlanIr, durations: &dyn Durations, shared: Shared) -> Result<Timeline, Deadlock> {
    let phases: &[f64] = if shared.balance > 0.0 { &PHASES } else { &PHASES[..1] };
    super::middle(phases.iter().map(|&phase| run_phase(ir, durations, shared, phase)).collect())
}

/// The step with the balancings at `phase`, a fraction of their interval.
pub(super) fn run_phase(
    ir: &PlanIr,
    durations: &dyn Durations,
    shared: Shared,
    phase: f64,
) -> Result<Timeline, Deadlock> {
    let mut m = Machine::new(ir, durations);
    run_at(&mut m, shared, phase * shared.balance);
    m.timeline()
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

/// The work on the host's cores: each working rank and the seconds of work it has left (in
/// turn order where the ranks take turns), the place each rank last worked on and how many
/// work on each place now.
struct Cores {
    capacity: f64,
    now: f64,
    working: Vec<(usize, f64)>,
    home: Vec<Option<usize>>,
    load: Vec<usize>,
    /// The balancings: every `interval` seconds from `phase`.
    interval: f64,
    phase: f64,
    /// The slice (0: no turns), each rank's time running in its turn and where in the turn
    /// order it stood when its last work ended.
    slice: f64,
    turn: Vec<f64>,
    stood: Vec<usize>,
}

impl Cores {
    fn new(shared: Shared, ranks: usize, phase: f64) -> Cores {
        let capacity = shared.capacity();
        Cores {
            capacity,
            now: 0.0,
            working: Vec::new(),
            home: vec![None; ranks],
            load: vec![0; (capacity.floor() as usize).max(1)],
            interval: shared.balance,
            phase,
            slice: shared.slice,
            turn: vec![0.0; ranks],
            stood: vec![0; ranks],
        }
    }

    /// How many of the working ranks run, the first in `working`, and the speed of each, as a
    /// fraction of its own: with turns, as many as the capacity of the places with work holds,
    /// at full speed; else all of them, sharing it.
    fn running(&self) -> (usize, f64) {
        let used = self.load.iter().filter(|&&n| n > 0).count() as f64;
        let capacity = self.capacity * used / self.load.len() as f64;
        let n = self.working.len();
        let k = if self.slice > 0.0 { (capacity.floor() as usize).clamp(1, n.max(1)) } else { n };
        (k, (capacity / k as f64).min(1.0))
    }

    /// Rank `r` starts `work`, `waking` from a wait (its message from `waker`) or going on.
    fn start(&mut self, r: usize, work: f64, waking: bool, waker: Option<usize>) {
        let place = match self.home[r] {
            Some(home) if !waking => home,
            _ => self.wake_place(r, waker),
        };
        self.home[r] = Some(place);
        self.load[place] += 1;
        // Going on within its turn, a rank keeps its place in the turn order; one that wakes,
        // or whose turn has run a slice, goes behind the others.
        if self.slice > 0.0 && !waking && self.turn[r] < self.slice {
            self.working.insert(self.stood[r].min(self.working.len()), (r, work));
        } else {
            self.turn[r] = 0.0;
            self.working.push((r, work));
        }
    }

    /// Where rank `r` wakes: its place or its waker's if idle, its waker's where the waker
    /// works there alone, else the less crowded of the two (its own on a tie); the first
    /// idle place, or one by its number, for a rank with neither.
    fn wake_place(&self, r: usize, waker: Option<usize>) -> usize {
        let idle = |p: &usize| self.load[*p] == 0;
        let (home, theirs) = (self.home[r], waker.and_then(|w| self.home[w]));
        let alone = waker.is_some_and(|w| self.is_working(w)) && theirs.is_some_and(|t| self.load[t] == 1);
        let fewer = match (home, theirs) {
            (Some(h), Some(t)) => Some(if self.load[t] < self.load[h] { t } else { h }),
            (h, t) => h.or(t),
        };
        home.filter(idle)
            .or(theirs.filter(idle))
            .or(theirs.filter(|_| alone))
            .or(fewer)
            .unwrap_or_else(|| (0..self.load.len()).find(idle).unwrap_or(r % self.load.len()))
    }

    fn is_working(&self, r: usize) -> bool {
        self.working.iter().any(|&(w, _)| w == r)
    }

    fn stop(&mut self, r: usize) {
        if let Some(at) = self.working.iter().position(|&(w, _)| w == r) {
            self.stood[r] = at;
            self.working.remove(at);
        }
        if let Some(place) = self.home[r] {
            self.load[place] -= 1;
        }
    }

    fn uneven(&self) -> bool {
        self.load.contains(&0) && self.load.iter().any(|&n| n > 1)
    }

    /// The next balancing, while a place is idle and another holds several ranks.
    fn balancing(&self) -> Option<f64> {
        let next = match self.interval {
            0.0 => self.now,
            every => ((self.now - self.phase) / every).ceil() * every + self.phase,
        };
        self.uneven().then_some(next)
    }

    /// The latest rank to start on the most crowded place moves to the first idle one.
    fn rebalance(&mut self) {
        let idle = self.load.iter().position(|&n| n == 0);
        let crowded = (0..self.load.len()).max_by_key(|&p| (self.load[p], Reverse(p)));
        if let (Some(idle), Some(crowded)) = (idle, crowded) {
            let moved = self.working.iter().rev().map(|&(r, _)| r).find(|&r| self.home[r] == Some(crowded));
            if let Some(r) = moved {
                self.home[r] = Some(idle);
                self.load[crowded] -= 1;
                self.load[idle] += 1;
            }
        }
    }

    /// The rank whose work ends first, and when (the lowest rank on a tie).
    fn next(&self) -> Option<(f64, usize)> {
        let (k, rate) = self.running();
        self.working
            .iter()
            .take(k)
            .map(|&(r, left)| (self.now + left.max(0.0) / rate, r))
            .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)))
    }

    fn advance(&mut self, to: f64) {
        if to > self.now && !self.working.is_empty() {
            let (k, rate) = self.running();
            for (r, left) in self.working.iter_mut().take(k) {
                *left -= (to - self.now) * rate;
                self.turn[*r] += to - self.now;
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

/// The ranks in time order: the earliest of the next balancing, the next work to end and the
/// next rank to begin an instruction is taken first, so the cores are shared among the ranks
/// working at that moment.
fn run_at(m: &mut Machine, shared: Shared, phase: f64) {
    let ranks = m.ir.ranks.len();
    m.message_cpu = shared.message_cpu;
    let mut cores = Cores::new(shared, ranks, phase);
    let mut state = vec![State::Queued; ranks];
    // When each rank's work last ended: one that starts work later has waited.
    let mut stopped = vec![f64::NEG_INFINITY; ranks];
    let mut queue: BinaryHeap<Reverse<(Time, usize)>> = (0..ranks).map(|r| Reverse((Time(0.0), r))).collect();
    loop {
        let queued = queue.peek().map(|Reverse((t, r))| (t.0, *r));
        let ending = cores.next().filter(|&(t, _)| queued.is_none_or(|(u, _)| t <= u));
        let first = ending.or(queued).map_or(f64::INFINITY, |(t, _)| t);
        if let Some(t) = cores.balancing().filter(|&t| t <= first) {
            cores.advance(t);
            cores.rebalance();
        } else if let Some((t, r)) = ending {
            cores.advance(t);
            cores.stop(r);
            stopped[r] = t;
            m.finish(r, t);
            state[r] = State::Queued;
            queue.push(Reverse((Time(t), r)));
        } else if let Some((t, r)) = queued {
            queue.pop();
            cores.advance(t);
            state[r] = match state[r] {
                State::Waiting(work) => {
                    cores.start(r, work, true, m.sender(r));
                    State::Working
                }
                _ => step(m, r, t, &mut cores, &mut queue, stopped[r]),
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

/// Rank `r` at time `now` runs what takes it no core time, up to its next work or wait; it
/// wakes for that work where its last work ended before `now`, woken by the sender of the
/// last message it received on the way.
fn step(
    m: &mut Machine,
    r: usize,
    now: f64,
    cores: &mut Cores,
    queue: &mut BinaryHeap<Reverse<(Time, usize)>>,
    stopped: f64,
) -> State {
    let mut waker = None;
    while !m.done(r) {
        waker = m.sender(r).or(waker);
        match m.begin(r) {
            Next::Blocked => return State::Blocked,
            Next::Work { at, work } if work > 0.0 && at > now => {
                queue.push(Reverse((Time(at), r)));
                return State::Waiting(work);
            }
            Next::Work { work, .. } if work > 0.0 => {
                cores.start(r, work, now > stopped, waker);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A host of `cores` cores, one thread a process, balanced every `balance` s, in turns of
    /// `slice` s.
    fn host(cores: f64, balance: f64, slice: f64) -> Shared {
        Shared { cores, threads: 1.0, replicas: 1.0, message_cpu: 0.0, balance, slice, send_wait: 0.0 }
    }

    /// Two cores, three ranks, balancings every 10 ms from 0.
    fn two_cores() -> Cores {
        let shared = host(2.0, 0.01, 0.0);
        Cores::new(shared, 3, 0.0)
    }

    #[test]
    fn a_waking_rank_joins_its_waker_working_alone_until_the_next_balancing() {
        let mut c = two_cores();
        c.advance(0.005);
        c.start(0, 1.0, true, None);
        c.start(1, 1.0, true, Some(0));
        assert_eq!((c.home[1], c.load.clone()), (Some(0), vec![2, 0]));
        // The two share one core while the other idles, until the balancing at 10 ms.
        assert_eq!((c.running().1, c.balancing()), (0.5, Some(0.01)));
        c.advance(0.01);
        c.rebalance();
        assert_eq!((c.home[1], c.load.clone(), c.running().1, c.balancing()), (Some(1), vec![1, 1], 1.0, None));
    }

    #[test]
    fn a_rank_going_on_keeps_its_core_and_one_waking_takes_its_own_if_idle() {
        let mut c = two_cores();
        c.start(0, 1.0, true, None);
        c.start(1, 1.0, true, Some(0));
        c.rebalance();
        c.stop(1);
        // Rank 0 ends its work and goes on with more: it stays on core 0 with rank 2 there.
        c.start(2, 1.0, true, Some(0));
        c.stop(0);
        c.start(0, 1.0, false, None);
        assert_eq!((c.home[0], c.load.clone()), (Some(0), vec![2, 0]));
        // Rank 1 wakes, its own core idle: it takes it, and the cores are even again.
        c.start(1, 1.0, true, Some(2));
        assert_eq!((c.home[1], c.load.clone(), c.balancing()), (Some(1), vec![2, 1], None));
    }

    #[test]
    fn with_a_slice_ranks_take_turns_at_the_ends_of_their_work() {
        let shared = host(1.0, 0.0, 1.0);
        let mut c = Cores::new(shared, 2, 0.0);
        c.start(0, 0.5, true, None);
        c.start(1, 3.0, true, None);
        // One core: rank 0 runs at full speed, rank 1 waits its turn.
        assert_eq!((c.running(), c.next()), ((1, 1.0), Some((0.5, 0))));
        c.advance(0.5);
        c.stop(0);
        // Half a slice into its turn, rank 0 goes on with its next work.
        c.start(0, 2.0, false, None);
        assert_eq!(c.next(), Some((2.5, 0)));
        c.advance(2.5);
        c.stop(0);
        // Its turn has run 2.5 s, past the slice: it goes behind rank 1, which runs its 3 s.
        c.start(0, 1.0, false, None);
        assert_eq!(c.next(), Some((5.5, 1)));
    }

    #[test]
    fn where_both_cores_are_crowded_a_waking_rank_takes_the_less_crowded() {
        let shared = host(2.0, 0.01, 0.0);
        let mut c = Cores::new(shared, 6, 0.0);
        for (r, place) in [(0, 0), (1, 0), (5, 0), (2, 1), (3, 1), (4, 0)] {
            c.home[r] = Some(place);
        }
        for r in [0, 1, 5, 2, 3] {
            c.start(r, 1.0, false, None);
        }
        // Rank 4's core holds three, its waker's (rank 2, with rank 3) two.
        c.start(4, 1.0, true, Some(2));
        assert_eq!((c.home[4], c.load.clone()), (Some(1), vec![3, 3]));
    }
}
