//! Running the per-rank lists as a runtime would: each rank in order, a receive blocking until
//! its send has happened (and the data has crossed), a pipeline-group collective until every
//! rank has reached it (an asynchronous one only where the reduced gradients are read, the
//! optimizer step or a data-parallel reduction, running beside the rank's work until then). With durations this is the simulator's timeline; with none it is the
//! validator's deadlock check. Linear in the number of instructions.

use rustc_hash::FxHashMap;

use crate::ir::{Dir, Group, Instr, Op, PlanIr};

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

pub fn run(ir: &PlanIr, durations: &dyn Durations) -> Result<Timeline, Deadlock> {
    let ranks = ir.ranks.len();
    let mut start: Vec<Vec<f64>> = ir.ranks.iter().map(|r| vec![0.0; r.instructions.len()]).collect();
    let mut end = start.clone();
    let mut pc = vec![0usize; ranks];
    let mut clock = vec![0.0f64; ranks];
    // Arrival time of every sent tensor at its receiver, and who waits for which.
    let mut arrived = Arrivals::new(ir.pipeline.microbatches);
    let mut waiting: FxHashMap<Key, usize> = FxHashMap::default();
    // The k-th pipeline-group collective: ranks arrived so far, their latest clock, and when it
    // ends; the group's collectives run one after another, each once all ranks are in.
    let mut collective: Vec<Collective> = Vec::new();
    let mut collectives_done = vec![0usize; ranks];
    let mut at_collective: Vec<Option<usize>> = vec![None; ranks];
    // Asynchronous collectives each rank started and has not waited for yet.
    let mut pending: Vec<Vec<usize>> = vec![Vec::new(); ranks];
    let mut ready: Vec<usize> = (0..ranks).rev().collect();
    while let Some(r) = ready.pop() {
        let list = &ir.ranks[r].instructions;
        while pc[r] < list.len() {
            let i = &list[pc[r]];
            let rank = r as u32;
            match i.op {
                Op::Recv => {
                    let Some(k) = key(rank, i) else { break };
                    let Some(t) = arrived.get(&k) else {
                        waiting.insert(k, r);
                        break;
                    };
                    start[r][pc[r]] = clock[r];
                    // What receiving costs once the message is there (the runtime's side).
                    clock[r] = clock[r].max(t) + durations.instruction(rank, i);
                }
                Op::Send => {
                    start[r][pc[r]] = clock[r];
                    clock[r] += durations.instruction(rank, i);
                    if let Some(k) = key(rank, i) {
                        arrived.insert(k, clock[r] + durations.transfer(rank, k.1, i));
                        if let Some(w) = waiting.remove(&k) {
                            ready.push(w);
                        }
                    }
                }
                Op::AllReduce if i.group == Some(Group::Pp) => {
                    let k = collectives_done[r];
                    if at_collective[r] != Some(k) {
                        at_collective[r] = Some(k);
                        if collective.len() <= k {
                            collective.resize(k + 1, Collective::default());
                        }
                        let c = &mut collective[k];
                        c.arrived += 1;
                        c.latest = c.latest.max(clock[r]);
                        if c.arrived == ranks {
                            let free = k.checked_sub(1).and_then(|j| collective[j].end).unwrap_or(0.0);
                            let c = &mut collective[k];
                            c.end = Some(c.latest.max(free) + durations.instruction(rank, i));
                            // The last to arrive releases the others.
                            ready.extend((0..ranks).filter(|&o| o != r));
                        }
                    }
                    if i.asynchronous {
                        pending[r].push(k);
                        start[r][pc[r]] = clock[r];
                        collectives_done[r] += 1;
                    } else {
                        let Some(done) = collective[k].end else { break };
                        start[r][pc[r]] = done - durations.instruction(rank, i);
                        clock[r] = done;
                        collectives_done[r] += 1;
                    }
                }
                // The optimizer and the data-parallel reductions read the reduced gradients.
                Op::OptimizerStep | Op::AllReduce if !pending[r].is_empty() => {
                    let Some(done) = pending[r].iter().map(|&k| collective[k].end).collect::<Option<Vec<f64>>>() else {
                        break;
                    };
                    clock[r] = done.into_iter().fold(clock[r], f64::max);
                    pending[r].clear();
                    start[r][pc[r]] = clock[r];
                    clock[r] += durations.instruction(rank, i);
                }
                _ => {
                    start[r][pc[r]] = clock[r];
                    clock[r] += durations.instruction(rank, i);
                }
            }
            end[r][pc[r]] = clock[r];
            pc[r] += 1;
        }
    }
    let blocked: Vec<(u32, usize)> =
        (0..ranks).filter(|&r| pc[r] < ir.ranks[r].instructions.len()).map(|r| (r as u32, pc[r])).collect();
    if blocked.is_empty() { Ok(Timeline { start, end }) } else { Err(Deadlock { blocked }) }
}
