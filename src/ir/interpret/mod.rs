//! Running the per-rank lists as a runtime would: each rank in order, a receive blocking until
//! its send has happened (and the data has crossed), a pipeline-group collective until every
//! rank has reached it (an asynchronous one only where the reduced gradients are read, the
//! optimizer step or a data-parallel reduction, running beside the rank's work until then). With durations this is the simulator's timeline; with none it is the
//! validator's deadlock check. Linear in the number of instructions where every rank has a
//! device of its own; where the ranks are processes sharing a host's cores (`Shared`), the
//! ranks advance in time order and share the cores as the host's scheduler places them, the
//! step run at four phases of its balancings (`host.rs`).

mod host;

use rustc_hash::FxHashMap;

use crate::ir::{Dir, Group, Instr, Op, PlanIr};

pub use host::{PHASES, Shared};

/// Start and end of every instruction, by rank and index.
#[derive(Clone, Debug, PartialEq)]
pub struct Timeline {
    pub start: Vec<Vec<f64>>,
    pub end: Vec<Vec<f64>>,
}

impl Timeline {
    pub fn makespan(&self) -> f64 {
        self.end.iter().flatten().cloned().fold(0.0, f64::max)
    }
}

/// A pipeline-group collective as the ranks reach it.
#[derive(Clone, Default)]
struct Collective {
    arrived: usize,
    latest: f64,
    /// Once every rank is in: when it ends, after the group's previous collective.
    end: Option<f64>,
}

/// Where the lists stop for good: each rank that could not finish, at the instruction it waits in.
#[derive(Clone, Debug, PartialEq)]
pub struct Deadlock {
    pub blocked: Vec<(u32, usize)>,
}

/// How long things take: a compute or local instruction on its rank, and a transfer's flight.
pub trait Durations {
    fn instruction(&self, rank: u32, instr: &Instr) -> f64;
    fn transfer(&self, from: u32, to: u32, instr: &Instr) -> f64;
    /// The cores the ranks share, where they are processes on one host's CPU; `None` where
    /// each has a device of its own.
    fn shared(&self) -> Option<Shared> {
        None
    }
}

/// Every instruction takes no time: for the deadlock check.
pub struct Untimed;

impl Durations for Untimed {
    fn instruction(&self, _: u32, _: &Instr) -> f64 {
        0.0
    }
    fn transfer(&self, _: u32, _: u32, _: &Instr) -> f64 {
        0.0
    }
}

type Key = (u32, u32, Dir, u32, u32);

fn key(rank: u32, i: &Instr) -> Option<Key> {
    let (peer, dir, stage, mb) = (i.peer?, i.dir?, i.stage?, i.mb?);
    match i.op {
        Op::Send => Some((rank, peer, dir, stage, mb)),
        Op::Recv => Some((peer, rank, dir, stage, mb)),
        _ => None,
    }
}

/// What a rank's next instruction does once begun.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Next {
    /// It waits for a message or a collective that has not come.
    Blocked,
    /// The rank's own work (it occupies a core) of `work` seconds from `at`, after any wait.
    Work { at: f64, work: f64 },
    /// It ends at this time without work of the rank's own (a collective's group time).
    Until(f64),
}

/// When each sent tensor arrives at its receiver, by key; a later send of the same key replaces
/// the time. Kept per microbatch, each a short list looked through from its latest entry: one
/// hash map of every transfer of the step missed the cache on nearly every send and receive,
/// and the microbatches a pipeline has in flight at once are few.
struct Arrivals {
    by_microbatch: Vec<Vec<(Key, f64)>>,
    /// Keys of microbatches past the pipeline's count, which only an invalid plan has.
    beyond: FxHashMap<Key, f64>,
}

impl Arrivals {
    fn new(microbatches: u32) -> Arrivals {
        Arrivals { by_microbatch: vec![Vec::new(); microbatches as usize], beyond: FxHashMap::default() }
    }

    fn get(&self, k: &Key) -> Option<f64> {
        match self.by_microbatch.get(k.4 as usize) {
            Some(list) => list.iter().rev().find(|(key, _)| key == k).map(|(_, t)| *t),
            None => self.beyond.get(k).copied(),
        }
    }

    fn insert(&mut self, k: Key, t: f64) {
        let Some(list) = self.by_microbatch.get_mut(k.4 as usize) else {
            self.beyond.insert(k, t);
            return;
        };
        match list.iter_mut().rev().find(|(key, _)| *key == k) {
            Some(entry) => entry.1 = t,
            None => list.push((k, t)),
        }
    }
}

/// The ranks' state between instructions: what every rank has done, the messages in flight,
/// the collectives; `woken` lists the ranks an instruction released, for the driver to run.
struct Machine<'a> {
    ir: &'a PlanIr,
    durations: &'a dyn Durations,
    start: Vec<Vec<f64>>,
    end: Vec<Vec<f64>>,
    pc: Vec<usize>,
    clock: Vec<f64>,
    // Arrival time of every sent tensor at its receiver, and who waits for which.
    arrived: Arrivals,
    waiting: FxHashMap<Key, usize>,
    // The k-th pipeline-group collective: ranks arrived so far, their latest clock, and when it
    // ends; the group's collectives run one after another, each once all ranks are in.
    collective: Vec<Collective>,
    collectives_done: Vec<usize>,
    at_collective: Vec<Option<usize>>,
    // Asynchronous collectives each rank started and has not waited for yet.
    pending: Vec<Vec<usize>>,
    woken: Vec<usize>,
    /// Core time a receive costs beyond its instruction on a shared host (`Shared`).
    message_cpu: f64,
    /// How long a sent message waits, at most, for its sender's thread (`Shared`; else 0).
    send_wait: f64,
}

impl<'a> Machine<'a> {
    fn new(ir: &'a PlanIr, durations: &'a dyn Durations) -> Machine<'a> {
        let ranks = ir.ranks.len();
        let start: Vec<Vec<f64>> = ir.ranks.iter().map(|r| vec![0.0; r.instructions.len()]).collect();
        Machine {
            ir,
            durations,
            end: start.clone(),
            start,
            pc: vec![0; ranks],
            clock: vec![0.0; ranks],
            arrived: Arrivals::new(ir.pipeline.microbatches),
            waiting: FxHashMap::default(),
            collective: Vec::new(),
            collectives_done: vec![0; ranks],
            at_collective: vec![None; ranks],
            pending: vec![Vec::new(); ranks],
            woken: Vec::new(),
            message_cpu: 0.0,
            send_wait: durations.shared().map_or(0.0, |s| s.send_wait),
        }
    }

    fn done(&self, r: usize) -> bool {
        self.pc[r] >= self.ir.ranks[r].instructions.len()
    }

    /// Begins rank `r`'s next instruction: records its start and says what it does.
    fn begin(&mut self, r: usize) -> Next {
        let i = &self.ir.ranks[r].instructions[self.pc[r]];
        let (rank, pc) = (r as u32, self.pc[r]);
        match i.op {
            Op::Recv => {
                let Some(k) = key(rank, i) else { return Next::Blocked };
                let Some(t) = self.arrived.get(&k) else {
                    self.waiting.insert(k, r);
                    return Next::Blocked;
                };
                self.start[r][pc] = self.clock[r];
                // What receiving costs once the message is there (the runtime's side).
                Next::Work { at: self.clock[r].max(t), work: self.durations.instruction(rank, i) + self.message_cpu }
            }
            Op::AllReduce if i.group == Some(Group::Pp) => self.collective(r, i),
            // The optimizer and the data-parallel reductions read the reduced gradients.
            Op::OptimizerStep | Op::AllReduce if !self.pending[r].is_empty() => {
                let Some(done) = self.pending[r].iter().map(|&k| self.collective[k].end).collect::<Option<Vec<f64>>>()
                else {
                    return Next::Blocked;
                };
                let at = done.into_iter().fold(self.clock[r], f64::max);
                self.pending[r].clear();
                self.start[r][pc] = at;
                Next::Work { at, work: self.durations.instruction(rank, i) }
            }
            _ => {
                self.start[r][pc] = self.clock[r];
                Next::Work { at: self.clock[r], work: self.durations.instruction(rank, i) }
            }
        }
    }

    /// A pipeline-group collective: the rank arrives, the last to arrive releases the others.
    fn collective(&mut self, r: usize, i: &Instr) -> Next {
        let (rank, pc, ranks) = (r as u32, self.pc[r], self.ir.ranks.len());
        let k = self.collectives_done[r];
        if self.at_collective[r] != Some(k) {
            self.at_collective[r] = Some(k);
            if self.collective.len() <= k {
                self.collective.resize(k + 1, Collective::default());
            }
            let c = &mut self.collective[k];
            c.arrived += 1;
            c.latest = c.latest.max(self.clock[r]);
            if c.arrived == ranks {
                let free = k.checked_sub(1).and_then(|j| self.collective[j].end).unwrap_or(0.0);
                let c = &mut self.collective[k];
                c.end = Some(c.latest.max(free) + self.durations.instruction(rank, i));
                self.woken.extend((0..ranks).filter(|&o| o != r));
            }
        }
        if i.asynchronous {
            self.pending[r].push(k);
            self.start[r][pc] = self.clock[r];
            self.collectives_done[r] += 1;
            return Next::Until(self.clock[r]);
        }
        let Some(done) = self.collective[k].end else { return Next::Blocked };
        self.start[r][pc] = done - self.durations.instruction(rank, i);
        self.collectives_done[r] += 1;
        Next::Until(done)
    }

    /// The rank whose message rank `r`'s current instruction receives, if it is a receive.
    fn sender(&self, r: usize) -> Option<usize> {
        let i = self.ir.ranks[r].instructions.get(self.pc[r])?;
        (i.op == Op::Recv).then_some(i.peer? as usize)
    }

    /// Ends rank `r`'s current instruction at `end`; a send's message leaves then.
    fn finish(&mut self, r: usize, end: f64) {
        let (rank, pc) = (r as u32, self.pc[r]);
        let i = &self.ir.ranks[r].instructions[pc];
        self.clock[r] = end;
        self.end[r][pc] = end;
        self.pc[r] += 1;
        if i.op == Op::Send
            && let Some(k) = key(rank, i)
        {
            let leaves = end + self.send_wait(r, end);
            self.arrived.insert(k, leaves + self.durations.transfer(rank, k.1, i));
            if let Some(w) = self.waiting.remove(&k) {
                self.woken.push(w);
            }
        }
    }

    /// How long a message rank `r` posted at `end` waits for its process's sending thread,
    /// which on a CPU host needs a core: the rank's own thread goes on with its list, and the
    /// sending thread runs once that thread waits (for a message not yet there, a collective,
    /// the list's end) or after the profile's `send_wait` (what a message whose sender went on
    /// computing took beyond one whose sender waited), whichever is first.
    fn send_wait(&self, r: usize, end: f64) -> f64 {
        let rank = r as u32;
        let mut busy = 0.0;
        for next in &self.ir.ranks[r].instructions[self.pc[r]..] {
            // Checked first: without a wait (every plan the analytic model times) a send looks
            // at nothing.
            if busy >= self.send_wait {
                break;
            }
            let waits = match next.op {
                // A message whose send has not been run yet counts as not there: where each
                // rank has a device the ranks run in turns, each as far as it can.
                Op::Recv => key(rank, next).and_then(|k| self.arrived.get(&k)).is_none_or(|t| t > end + busy),
                Op::AllReduce => true,
                _ => false,
            };
            if waits {
                break;
            }
            busy += self.durations.instruction(rank, next);
        }
        busy.min(self.send_wait)
    }

    fn timeline(self) -> Result<Timeline, Deadlock> {
        let blocked: Vec<(u32, usize)> =
            (0..self.ir.ranks.len()).filter(|&r| !self.done(r)).map(|r| (r as u32, self.pc[r])).collect();
        if blocked.is_empty() { Ok(Timeline { start: self.start, end: self.end }) } else { Err(Deadlock { blocked }) }
    }
}

pub fn run(ir: &PlanIr, durations: &dyn Durations) -> Result<Timeline, Deadlock> {
    match contended(ir, durations) {
        Some(shared) => host::run(ir, durations, shared),
        None => run_devices(ir, durations),
    }
}

/// The host the ranks share, where they are more than its cores run at full speed at once.
fn contended(ir: &PlanIr, durations: &dyn Durations) -> Option<Shared> {
    durations.shared().filter(|s| s.contended(ir.ranks.len()))
}

/// One run with a shared host's balancings at `phase`, a fraction of their interval (one of
/// [`PHASES`]); as `run` where each rank has a device of its own.
pub fn run_at_phase(ir: &PlanIr, durations: &dyn Durations, phase: f64) -> Result<Timeline, Deadlock> {
    match contended(ir, durations) {
        Some(shared) => host::run_phase(ir, durations, shared, phase),
        None => run_devices(ir, durations),
    }
}

/// Of several runs of one step, the one whose step is the middle (the lower middle of an even
/// count), a run that deadlocked counting as the slowest.
pub fn middle(mut runs: Vec<Result<Timeline, Deadlock>>) -> Result<Timeline, Deadlock> {
    runs.sort_by(|a, b| match (a, b) {
        (Ok(a), Ok(b)) => a.makespan().total_cmp(&b.makespan()),
        (a, b) => b.is_ok().cmp(&a.is_ok()),
    });
    runs.swap_remove((runs.len() - 1) / 2)
}

fn run_devices(ir: &PlanIr, durations: &dyn Durations) -> Result<Timeline, Deadlock> {
    let mut m = Machine::new(ir, durations);
    devices(&mut m);
    m.timeline()
}

/// A device per rank: each rank runs until it waits, in any order, since no rank's times
/// depend on what another does at the same moment.
fn devices(m: &mut Machine) {
    let mut ready: Vec<usize> = (0..m.ir.ranks.len()).rev().collect();
    while let Some(r) = ready.pop() {
        while !m.done(r) {
            match m.begin(r) {
                Next::Blocked => break,
                Next::Work { at, work } => m.finish(r, at + work),
                Next::Until(end) => m.finish(r, end),
            }
            ready.append(&mut m.woken);
        }
    }
}
