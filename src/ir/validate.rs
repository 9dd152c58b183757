//! The validator every build runs: independent of how the lists were derived, it checks that
//! they are a correct pipeline step. Each stage's forward and backward appear exactly once
//! per microbatch on the rank that holds the stage; every input is there before it is used
//! (activation before forward, forward and output gradient before backward, input gradient
//! before weight gradient, encoder features before the first body forward); every send has
//! exactly one receive; and the lists run to the end under blocking receives (ir::interpret).
//! What it finds is a [`Problem`] each, by kind; its text is the compiler-bug report's.

use std::fmt;

use rustc_hash::FxHashMap as HashMap;

use super::{Dir, Instr, Op, PlanIr, RankIr};

/// An instruction of a rank's list, by index, with its text as plan.txt writes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct At {
    pub rank: u32,
    pub index: usize,
    pub instr: String,
}

fn at(rank: u32, index: usize, i: &Instr) -> At {
    At { rank, index, instr: super::text::instr(i) }
}

impl fmt::Display for At {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rank {}, instruction {} ({})", self.rank, self.index, self.instr)
    }
}

/// One thing wrong with the lists. `stage` and `mb` name the cell the problem is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    RankLists { lists: usize, ranks: u32 },
    NoSuchCell { at: At },
    SendBeforeCompute { at: At, dir: Dir },
    ComputeWithoutCell { at: At },
    NotHeld { at: At, stage: u32, mb: u32 },
    BeforeInput { at: At, stage: u32, mb: u32 },
    BeforeForward { at: At, stage: u32, mb: u32 },
    BeforeOutputGradient { at: At, stage: u32, mb: u32 },
    BeforeBackwardInput { at: At, stage: u32, mb: u32 },
    PartsUncovered { stage: u32, mb: u32, images: u32 },
    Forwards { stage: u32, mb: u32, found: u32 },
    Backwards { stage: u32, mb: u32, backward: u32, input: u32, weight: u32, expected: u32 },
    PrologueOutOfOrder { rank: u32, index: usize, instr: String },
    PrologueMissing { rank: u32, stage: u32, mb: u32 },
    TransferIncomplete { at: At },
    InvalidPeer { at: At, peer: u32 },
    DuplicateTransfer { at: At, first_rank: u32, first_index: usize },
    NotReceived { at: At, peer: u32 },
    NotSent { at: At, peer: u32 },
    Collectives { counts: Vec<usize> },
    Deadlock { waits: Vec<At> },
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use Problem::*;
        match self {
            RankLists { lists, ranks } => write!(f, "the plan has {lists} rank lists for {ranks} pipeline ranks"),
            NoSuchCell { at } => write!(f, "{at}: no such stage or microbatch"),
            SendBeforeCompute { at, dir: Dir::Act } => write!(f, "{at}: sends an activation before computing it"),
            SendBeforeCompute { at, .. } => write!(f, "{at}: sends a gradient before computing it"),
            ComputeWithoutCell { at } => write!(f, "{at}: a compute instruction needs stage and mb"),
            NotHeld { at, stage, mb } => write!(f, "{at}: this rank does not hold stage {stage} for microbatch {mb}"),
            BeforeInput { at, stage, mb } => {
                write!(f, "{at}: runs before its input (stage {stage} microbatch {mb}) is here")
            }
            BeforeForward { at, stage, mb } => {
                write!(f, "{at}: runs before the forward of stage {stage} microbatch {mb}")
            }
            BeforeOutputGradient { at, stage, mb } => {
                write!(f, "{at}: runs before its output gradient (stage {stage} microbatch {mb}) is here")
            }
            BeforeBackwardInput { at, stage, mb } => {
                write!(f, "{at}: runs before the backward-input of stage {stage} microbatch {mb}")
            }
            PartsUncovered { stage, mb, images } => write!(
                f,
                "stage {stage} microbatch {mb}: its parts do not cover its {images} images once each, one part a rank"
            ),
            Forwards { stage, mb, found } => write!(f, "stage {stage} microbatch {mb}: {found} forwards, expected 1"),
            Backwards { stage, mb, backward, input, weight, expected } => write!(
                f,
                "stage {stage} microbatch {mb}: backward {backward}, backward_input {input}, backward_weight {weight}; expected {expected} backward in all"
            ),
            PrologueOutOfOrder { rank, index, instr } => write!(
                f,
                "rank {rank}, prologue instruction {index} ({instr}): not one of the step's carried encodes, in order"
            ),
            PrologueMissing { rank, stage, mb } => {
                write!(f, "rank {rank}: the prologue does not encode stage {stage} microbatch {mb}")
            }
            TransferIncomplete { at } => write!(f, "{at}: a transfer needs peer, dir, stage and mb"),
            InvalidPeer { at, peer } => write!(f, "{at}: invalid peer {peer}"),
            DuplicateTransfer { at, first_rank, first_index } => write!(
                f,
                "{at}: the same transfer appears again (first at rank {first_rank}, instruction {first_index})"
            ),
            NotReceived { at, peer } => write!(f, "{at}: no rank {peer} receives it"),
            NotSent { at, peer } => write!(f, "{at}: rank {peer} never sends it"),
            Collectives { counts } => {
                write!(f, "the ranks run different numbers of pipeline-group all-reduces: {counts:?}")
            }
            Deadlock { waits } => {
                let waits: Vec<String> = waits.iter().map(At::to_string).collect();
                write!(f, "deadlock: under blocking receives the ranks stop waiting at {}", waits.join("; "))
            }
        }
    }
}

pub fn validate(ir: &PlanIr) -> Result<(), Vec<Problem>> {
    let p = ir.pipeline.ranks;
    if ir.ranks.len() != p as usize || ir.ranks.iter().enumerate().any(|(i, r)| r.rank != i as u32) {
        return Err(vec![Problem::RankLists { lists: ir.ranks.len(), ranks: p }]);
    }
    let mut walk = Walk::new(ir);
    for r in &ir.ranks {
        walk.rank(r);
    }
    let mut problems = walk.finish();
    pair_transfers(ir, &mut problems);
    if problems.is_empty()
        && let Err(deadlock) = crate::ir::interpret::run(ir, &crate::ir::interpret::Untimed)
    {
        let waits =
            deadlock.blocked.iter().take(4).map(|&(r, k)| at(r, k, &ir.ranks[r as usize].instructions[k])).collect();
        problems.push(Problem::Deadlock { waits });
    }
    if problems.is_empty() { Ok(()) } else { Err(problems) }
}

const FORWARD: u8 = 1;
const BACKWARD: u8 = 2;
const INPUT: u8 = 4;
const WEIGHT: u8 = 8;

fn bit(op: Op) -> u8 {
    match op {
        Op::Forward => FORWARD,
        Op::Backward => BACKWARD,
        Op::BackwardInput => INPUT,
        _ => WEIGHT,
    }
}

fn arrived(dir: Dir) -> u8 {
    if dir == Dir::Act { FORWARD } else { BACKWARD }
}

/// Parts of an encode, by (stage, microbatch, op): (images, rank) of each.
type Parts = std::collections::BTreeMap<(u32, u32, u8), Vec<([u32; 2], u32)>>;

/// The walk over every rank's list, with what it has seen per (stage, microbatch) cell. Flat
/// vectors rather than sets: the validator runs on every build, over every instruction.
struct Walk<'a> {
    ir: &'a PlanIr,
    m: u32,
    stages: u32,
    images: u32,
    backward: Vec<bool>,
    /// Over all ranks: forwards, backwards, backward-inputs and backward-weights per cell.
    counts: Vec<[u32; 4]>,
    parts: Parts,
    /// On the rank walked: the compute ops run, the tensors arrived, the images of each
    /// stage's output gathered (a gather is complete when its parts sum to all of them), and
    /// what the step before encoded (lookahead), here from the start.
    done: Vec<u8>,
    got: Vec<u8>,
    gathered: Vec<u32>,
    carried: Vec<bool>,
    problems: Vec<Problem>,
}

impl<'a> Walk<'a> {
    fn new(ir: &'a PlanIr) -> Walk<'a> {
        let (m, stages) = (ir.pipeline.microbatches, ir.stages.len() as u32);
        let cells = (stages * m) as usize;
        Walk {
            ir,
            m,
            stages,
            images: ir.pipeline.images,
            backward: ir.stages.iter().map(|st| st.backward).collect(),
            counts: vec![[0; 4]; cells],
            parts: Parts::new(),
            done: vec![0; cells],
            got: vec![0; cells],
            gathered: vec![0; cells],
            carried: vec![false; cells],
            problems: Vec::new(),
        }
    }

    fn slot(&self, s: u32, mb: u32) -> usize {
        (s * self.m + mb) as usize
    }

    fn rank(&mut self, r: &RankIr) {
        self.done.iter_mut().for_each(|d| *d = 0);
        self.got.iter_mut().for_each(|g| *g = 0);
        self.gathered.iter_mut().for_each(|h| *h = 0);
        self.carried.iter_mut().for_each(|c| *c = false);
        for i in r.instructions.iter().filter(|i| i.step == Some(1)) {
            if let (Some(s), Some(mb)) = (i.stage, i.mb)
                && s < self.stages
                && mb < self.m
            {
                let cell = self.slot(s, mb);
                self.carried[cell] = true;
            }
        }
        prologue(self.ir, r, &self.carried, &mut self.problems);
        for (index, i) in r.instructions.iter().enumerate() {
            if i.op.is_compute() {
                self.compute(r.rank, index, i);
            } else {
                self.transfer(r.rank, index, i);
            }
        }
    }

    /// A send or a receive: what arrives, and that nothing leaves before it is computed.
    fn transfer(&mut self, rank: u32, index: usize, i: &Instr) {
        let (Some(dir), Some(s), Some(mb)) = (i.dir, i.stage, i.mb) else { return };
        if s >= self.stages || mb >= self.m {
            self.problems.push(Problem::NoSuchCell { at: at(rank, index, i) });
            return;
        }
        let cell = self.slot(s, mb);
        let d = self.done[cell];
        let share = i.images.map_or(self.images, |[lo, hi]| hi.saturating_sub(lo));
        match (i.op, dir) {
            (Op::Recv, Dir::Act) => {
                self.got[cell] |= FORWARD;
                self.gathered[cell] += share;
            }
            (Op::Recv, dir) => self.got[cell] |= arrived(dir),
            (Op::Send, Dir::Act) if d & FORWARD == 0 && !self.carried[cell] => {
                self.problems.push(Problem::SendBeforeCompute { at: at(rank, index, i), dir })
            }
            (Op::Send, Dir::Grad) if d & (BACKWARD | INPUT) == 0 => {
                self.problems.push(Problem::SendBeforeCompute { at: at(rank, index, i), dir })
            }
            _ => {}
        }
    }

    /// A compute op: on a rank that holds its stage, counted, and after its inputs.
    fn compute(&mut self, rank: u32, index: usize, i: &Instr) {
        let (Some(s), Some(mb)) = (i.stage, i.mb) else {
            self.problems.push(Problem::ComputeWithoutCell { at: at(rank, index, i) });
            return;
        };
        if s >= self.stages || mb >= self.m {
            self.problems.push(Problem::NoSuchCell { at: at(rank, index, i) });
            return;
        }
        if !holds(self.ir, rank, i, s, mb) {
            self.problems.push(Problem::NotHeld { at: at(rank, index, i), stage: s, mb });
        }
        let cell = self.slot(s, mb);
        match i.images {
            Some(range) => self.parts.entry((s, mb, bit(i.op))).or_default().push((range, rank)),
            None => self.counts[cell][bit(i.op).trailing_zeros() as usize] += 1,
        }
        let missing = self.missing_inputs(i, s, mb, || at(rank, index, i));
        self.problems.extend(missing);
        self.done[cell] |= bit(i.op);
        if i.op == Op::Forward {
            self.gathered[cell] += i.images.map_or(self.images, |[lo, hi]| hi.saturating_sub(lo));
        }
    }

    /// The inputs of compute op `i` (stage `s`, microbatch `mb`) not here yet, as problems at
    /// its place (`here`).
    fn missing_inputs(&self, i: &Instr, s: u32, mb: u32, here: impl Fn() -> At) -> Vec<Problem> {
        let this_step = i.step.is_none();
        let ready = |dir: Dir, from: u32| {
            let local = if dir == Dir::Act { FORWARD } else { BACKWARD | INPUT };
            self.done[self.slot(from, mb)] & local != 0
                || self.got[self.slot(from, mb)] & arrived(dir) != 0
                || (this_step && dir == Dir::Act && self.carried[self.slot(from, mb)])
        };
        // A whole forward needs every image of its input: all parts gathered.
        let gathered = |from: u32| {
            i.images.is_some()
                || self.gathered[self.slot(from, mb)] >= self.images
                || !this_step
                || self.carried[self.slot(from, mb)]
        };
        let mut missing = Vec::new();
        match i.op {
            Op::Forward if s > 0 && (!ready(Dir::Act, s - 1) || !gathered(s - 1)) => {
                missing.push(Problem::BeforeInput { at: here(), stage: s - 1, mb })
            }
            Op::Backward | Op::BackwardInput => {
                // A replicated stage's backward away from its forward recomputes it from its
                // input: the previous stage's output, received, or the model's input data.
                let replicated = self.ir.stages[s as usize].ranks.is_some();
                let recomputed =
                    replicated && i.op == Op::Backward && (s == 0 || self.got[self.slot(s - 1, mb)] & FORWARD != 0);
                if self.done[self.slot(s, mb)] & FORWARD == 0 && !recomputed {
                    missing.push(Problem::BeforeForward { at: here(), stage: s, mb });
                }
                if s + 1 < self.stages && self.backward[(s + 1) as usize] && !ready(Dir::Grad, s + 1) {
                    missing.push(Problem::BeforeOutputGradient { at: here(), stage: s + 1, mb });
                }
            }
            Op::BackwardWeight if self.done[self.slot(s, mb)] & INPUT == 0 => {
                missing.push(Problem::BeforeBackwardInput { at: here(), stage: s, mb })
            }
            _ => {}
        }
        missing
    }

    /// The counts over all ranks: each encode's parts cover its images once, and every cell
    /// has one forward and its backward.
    fn finish(mut self) -> Vec<Problem> {
        let images = self.images;
        for ((s, mb, op), list) in &mut self.parts {
            list.sort();
            let tiles = list.iter().try_fold(0, |next, ([lo, hi], _)| (*lo == next && hi > lo).then_some(*hi));
            let mut ranks: Vec<u32> = list.iter().map(|(_, r)| *r).collect();
            ranks.sort_unstable();
            ranks.dedup();
            if tiles != Some(images) || ranks.len() != list.len() {
                self.problems.push(Problem::PartsUncovered { stage: *s, mb: *mb, images });
            }
            let cell = (*s * self.m + *mb) as usize;
            self.counts[cell][op.trailing_zeros() as usize] += 1;
        }
        for s in 0..self.stages {
            for mb in 0..self.m {
                let [f, b, bi, bw] = self.counts[self.slot(s, mb)];
                if f != 1 {
                    self.problems.push(Problem::Forwards { stage: s, mb, found: f });
                }
                let expected = u32::from(self.backward[s as usize]);
                if bi != bw || b + bi != expected {
                    self.problems.push(Problem::Backwards {
                        stage: s,
                        mb,
                        backward: b,
                        input: bi,
                        weight: bw,
                        expected,
                    });
                }
            }
        }
        self.problems
    }
}

/// Whether `rank` holds stage `s` for microbatch `mb` when it runs `i`.
fn holds(ir: &PlanIr, rank: u32, i: &Instr, s: u32, mb: u32) -> bool {
    let stage = ir.stage(s);
    match stage.rank {
        Some(r) => r == rank,
        // A part of an encode runs on any replica, and so does a backward (recomputing
        // away from the forward); a whole forward on the microbatch's owner.
        None if i.images.is_some() || i.op == Op::Backward => true,
        None => ir.owner.get(&stage.region).and_then(|o| o.get(mb as usize)).is_some_and(|o| *o == rank),
    }
}

/// The prologue encodes, before the first step, exactly what the steady step's lists carry
/// over from the step before: the same forwards on the same rank, each once, inputs first.
fn prologue(ir: &PlanIr, r: &RankIr, carried: &[bool], problems: &mut Vec<Problem>) {
    let m = ir.pipeline.microbatches;
    let mut ran = vec![false; carried.len()];
    for (index, i) in r.prologue.iter().enumerate() {
        let (Some(s), Some(mb)) = (i.stage, i.mb) else { continue };
        let cell = (s * m + mb) as usize;
        let input_here = s == 0 || ran.get(cell - m as usize).copied().unwrap_or(false);
        if i.op != Op::Forward || !carried.get(cell).copied().unwrap_or(false) || ran[cell] || !input_here {
            problems.push(Problem::PrologueOutOfOrder { rank: r.rank, index, instr: super::text::instr(i) });
        }
        if cell < ran.len() {
            ran[cell] = true;
        }
    }
    if let Some(cell) = (0..carried.len()).find(|c| carried[*c] && !ran[*c]) {
        let (s, mb) = (cell as u32 / m, cell as u32 % m);
        problems.push(Problem::PrologueMissing { rank: r.rank, stage: s, mb });
    }
}

/// Every send has exactly one receive of the same tensor and back; pipeline-group
/// collectives run the same number of times on every rank.
fn pair_transfers(ir: &PlanIr, problems: &mut Vec<Problem>) {
    type Key = (u32, u32, Dir, u32, u32);
    let mut sends: HashMap<Key, (u32, usize)> = HashMap::default();
    let mut recvs: HashMap<Key, (u32, usize)> = HashMap::default();
    let mut collectives = vec![0usize; ir.ranks.len()];
    for r in &ir.ranks {
        for (index, i) in r.instructions.iter().enumerate() {
            if i.op == Op::AllReduce && i.group == Some(super::Group::Pp) {
                collectives[r.rank as usize] += 1;
            }
            if !matches!(i.op, Op::Send | Op::Recv) {
                continue;
            }
            let (Some(peer), Some(dir), Some(stage), Some(mb)) = (i.peer, i.dir, i.stage, i.mb) else {
                problems.push(Problem::TransferIncomplete { at: at(r.rank, index, i) });
                continue;
            };
            if peer == r.rank || peer >= ir.pipeline.ranks {
                problems.push(Problem::InvalidPeer { at: at(r.rank, index, i), peer });
                continue;
            }
            let (key, table) = if i.op == Op::Send {
                ((r.rank, peer, dir, stage, mb), &mut sends)
            } else {
                ((peer, r.rank, dir, stage, mb), &mut recvs)
            };
            if let Some((first_rank, first_index)) = table.insert(key, (r.rank, index)) {
                problems.push(Problem::DuplicateTransfer { at: at(r.rank, index, i), first_rank, first_index });
            }
        }
    }
    let mut unmatched: Vec<(Key, (u32, usize), bool)> = Vec::new();
    for (k, v) in &sends {
        if !recvs.contains_key(k) {
            unmatched.push((*k, *v, true));
        }
    }
    for (k, v) in &recvs {
        if !sends.contains_key(k) {
            unmatched.push((*k, *v, false));
        }
    }
    unmatched.sort_by_key(|(_, (r, i), _)| (*r, *i));
    for (key, (rank, index), is_send) in unmatched {
        let i = &ir.ranks[rank as usize].instructions[index];
        let at = at(rank, index, i);
        problems.push(if is_send {
            Problem::NotReceived { at, peer: key.1 }
        } else {
            Problem::NotSent { at, peer: key.0 }
        });
    }
    if collectives.iter().any(|c| *c != collectives[0]) {
        problems.push(Problem::Collectives { counts: collectives });
    }
}
