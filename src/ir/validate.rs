//! The validator every build runs: independent of how the lists were derived, it checks that
//! they are a correct pipeline step. Each stage's forward and backward appear exactly once
//! per microbatch on the rank that holds the stage; every input is there before it is used
//! (activation before forward, forward and output gradient before backward, input gradient
//! before weight gradient, encoder features before the first body forward); every send has
//! exactly one receive; and the lists run to the end under blocking receives (ir::interpret).

use rustc_hash::FxHashMap as HashMap;

use super::{Dir, Instr, Op, PlanIr};

fn at(rank: u32, index: usize, i: &Instr) -> String {
    format!("rank {rank}, instruction {index} ({})", super::text::instr(i))
}

/// The prologue encodes, before the first step, exactly what the steady step's lists carry
/// over from the step before: the same forwards on the same rank, each once, inputs first.
fn prologue(ir: &PlanIr, r: &super::RankIr, carried: &[bool], problems: &mut Vec<String>) {
    let m = ir.pipeline.microbatches;
    let mut ran = vec![false; carried.len()];
    for (index, i) in r.prologue.iter().enumerate() {
        let (Some(s), Some(mb)) = (i.stage, i.mb) else { continue };
        let cell = (s * m + mb) as usize;
        let input_here = s == 0 || ran.get(cell - m as usize).copied().unwrap_or(false);
        if i.op != Op::Forward || !carried.get(cell).copied().unwrap_or(false) || ran[cell] || !input_here {
            problems.push(format!(
                "rank {}, prologue instruction {index} ({}): not one of the step's carried encodes, in order",
                r.rank,
                super::text::instr(i)
            ));
        }
        if cell < ran.len() {
            ran[cell] = true;
        }
    }
    if let Some(cell) = (0..carried.len()).find(|c| carried[*c] && !ran[*c]) {
        let (s, mb) = (cell as u32 / m, cell as u32 % m);
        problems.push(format!("rank {}: the prologue does not encode stage {s} microbatch {mb}", r.rank));
    }
}

pub fn validate(ir: &PlanIr) -> Result<(), Vec<String>> {
    let mut problems = Vec::new();
    let p = ir.pipeline.ranks;
    let m = ir.pipeline.microbatches;
    if ir.ranks.len() != p as usize || ir.ranks.iter().enumerate().any(|(i, r)| r.rank != i as u32) {
        return Err(vec![format!("the plan has {} rank lists for {p} pipeline ranks", ir.ranks.len())]);
    }
    let backward: Vec<bool> = ir.stages.iter().map(|st| st.backward).collect();
    let holds = |rank: u32, i: &Instr, s: u32, mb: u32| {
        let stage = ir.stage(s);
        match stage.rank {
            Some(r) => r == rank,
            // A part of an encode runs on any replica, and so does a backward (recomputing
            // away from the forward); a whole forward on the microbatch's owner.
            None if i.images.is_some() || i.op == Op::Backward => true,
            None => ir.owner.get(&stage.region).and_then(|o| o.get(mb as usize)).is_some_and(|o| *o == rank),
        }
    };
    let images = ir.pipeline.images;
    // Parts of an encode, by (stage, microbatch, op): (images, rank) of each.
    type Parts = std::collections::BTreeMap<(u32, u32, u8), Vec<([u32; 2], u32)>>;
    let mut parts = Parts::new();
    let stages = ir.stages.len() as u32;
    // Flags per (stage, microbatch): which compute ops ran, which tensors arrived. Flat
    // vectors rather than sets: the validator runs on every build, over every instruction.
    let slot = |s: u32, mb: u32| (s * m + mb) as usize;
    let cells = (stages * m) as usize;
    let mut counts = vec![[0u32; 4]; cells];
    let mut done = vec![0u8; cells];
    let mut got = vec![0u8; cells];
    const FORWARD: u8 = 1;
    const BACKWARD: u8 = 2;
    const INPUT: u8 = 4;
    const WEIGHT: u8 = 8;
    let bit = |op: Op| match op {
        Op::Forward => FORWARD,
        Op::Backward => BACKWARD,
        Op::BackwardInput => INPUT,
        _ => WEIGHT,
    };
    let arrived = |dir: Dir| if dir == Dir::Act { FORWARD } else { BACKWARD };
    // How many of a microbatch's images of each stage's output a rank has: a gather is
    // complete when the parts sum to all of them.
    let mut gathered_images = vec![0u32; cells];
    for r in &ir.ranks {
        done.iter_mut().for_each(|d| *d = 0);
        got.iter_mut().for_each(|g| *g = 0);
        gathered_images.iter_mut().for_each(|h| *h = 0);
        // What this rank encoded the step before (lookahead) is here from the start, for this
        // step's work; the prologue encoded it before the first step.
        let mut carried: Vec<bool> = vec![false; cells];
        for i in r.instructions.iter().filter(|i| i.step == Some(1)) {
            if let (Some(s), Some(mb)) = (i.stage, i.mb)
                && s < stages
                && mb < m
            {
                carried[slot(s, mb)] = true;
            }
        }
        prologue(ir, r, &carried, &mut problems);
        for (index, i) in r.instructions.iter().enumerate() {
            let here = || at(r.rank, index, i);
            if !i.op.is_compute() {
                let (Some(dir), Some(s), Some(mb)) = (i.dir, i.stage, i.mb) else { continue };
                if s >= stages || mb >= m {
                    problems.push(format!("{}: no such stage or microbatch", here()));
                    continue;
                }
                let d = done[slot(s, mb)];
                let share = i.images.map_or(images, |[lo, hi]| hi.saturating_sub(lo));
                match (i.op, dir) {
                    (Op::Recv, Dir::Act) => {
                        got[slot(s, mb)] |= FORWARD;
                        gathered_images[slot(s, mb)] += share;
                    }
                    (Op::Recv, dir) => got[slot(s, mb)] |= arrived(dir),
                    (Op::Send, Dir::Act) if d & FORWARD == 0 && !carried[slot(s, mb)] => {
                        problems.push(format!("{}: sends an activation before computing it", here()))
                    }
                    (Op::Send, Dir::Grad) if d & (BACKWARD | INPUT) == 0 => {
                        problems.push(format!("{}: sends a gradient before computing it", here()))
                    }
                    _ => {}
                }
                continue;
            }
            let (Some(s), Some(mb)) = (i.stage, i.mb) else {
                problems.push(format!("{}: a compute instruction needs stage and mb", here()));
                continue;
            };
            if s >= stages || mb >= m {
                problems.push(format!("{}: no such stage or microbatch", here()));
                continue;
            }
            if !holds(r.rank, i, s, mb) {
                problems.push(format!("{}: this rank does not hold stage {s} for microbatch {mb}", here()));
            }
            match i.images {
                Some(range) => parts.entry((s, mb, bit(i.op))).or_default().push((range, r.rank)),
                None => counts[slot(s, mb)][bit(i.op).trailing_zeros() as usize] += 1,
            }
            let this_step = i.step.is_none();
            let ready = |dir: Dir, from: u32| {
                let local = if dir == Dir::Act { FORWARD } else { BACKWARD | INPUT };
                done[slot(from, mb)] & local != 0
                    || got[slot(from, mb)] & arrived(dir) != 0
                    || (this_step && dir == Dir::Act && carried[slot(from, mb)])
            };
            // A whole forward needs every image of its input: all parts gathered.
            let gathered = |from: u32| {
                i.images.is_some() || gathered_images[slot(from, mb)] >= images || !this_step || carried[slot(from, mb)]
            };
            match i.op {
                Op::Forward => {
                    if s > 0 && (!ready(Dir::Act, s - 1) || !gathered(s - 1)) {
                        problems.push(format!(
                            "{}: runs before its input (stage {} microbatch {mb}) is here",
                            here(),
                            s - 1
                        ));
                    }
                }
                Op::Backward | Op::BackwardInput => {
                    // A replicated stage's backward away from its forward recomputes it from its
                    // input: the previous stage's output, received, or the model's input data.
                    let replicated = ir.stages[s as usize].ranks.is_some();
                    let recomputed =
                        replicated && i.op == Op::Backward && (s == 0 || got[slot(s - 1, mb)] & FORWARD != 0);
                    if done[slot(s, mb)] & FORWARD == 0 && !recomputed {
                        problems.push(format!("{}: runs before the forward of stage {s} microbatch {mb}", here()));
                    }
                    if s + 1 < stages && backward[(s + 1) as usize] && !ready(Dir::Grad, s + 1) {
                        problems.push(format!(
                            "{}: runs before its output gradient (stage {} microbatch {mb}) is here",
                            here(),
                            s + 1
                        ));
                    }
                }
                Op::BackwardWeight => {
                    if done[slot(s, mb)] & INPUT == 0 {
                        problems
                            .push(format!("{}: runs before the backward-input of stage {s} microbatch {mb}", here()));
                    }
                }
                _ => unreachable!("compute ops only"),
            }
            done[slot(s, mb)] |= bit(i.op);
            if i.op == Op::Forward {
                gathered_images[slot(s, mb)] += i.images.map_or(images, |[lo, hi]| hi.saturating_sub(lo));
            }
        }
    }
    for ((s, mb, op), list) in &mut parts {
        list.sort();
        let tiles = list.iter().try_fold(0, |next, ([lo, hi], _)| (*lo == next && hi > lo).then_some(*hi));
        let mut ranks: Vec<u32> = list.iter().map(|(_, r)| *r).collect();
        ranks.sort_unstable();
        ranks.dedup();
        if tiles != Some(images) || ranks.len() != list.len() {
            problems.push(format!(
                "stage {s} microbatch {mb}: its parts do not cover its {images} images once each, one part a rank"
            ));
        }
        counts[slot(*s, *mb)][op.trailing_zeros() as usize] += 1;
    }
    for s in 0..stages {
        for mb in 0..m {
            let [f, b, bi, bw] = counts[slot(s, mb)];
            if f != 1 {
                problems.push(format!("stage {s} microbatch {mb}: {f} forwards, expected 1"));
            }
            let expected = u32::from(backward[s as usize]);
            if bi != bw || b + bi != expected {
                problems.push(format!("stage {s} microbatch {mb}: backward {b}, backward_input {bi}, backward_weight {bw}; expected {expected} backward in all"));
            }
        }
    }
    pair_transfers(ir, &mut problems);
    if problems.is_empty()
        && let Err(deadlock) = crate::ir::interpret::run(ir, &crate::ir::interpret::Untimed)
    {
        let waits: Vec<String> =
            deadlock.blocked.iter().take(4).map(|&(r, k)| at(r, k, &ir.ranks[r as usize].instructions[k])).collect();
        problems.push(format!("deadlock: under blocking receives the ranks stop waiting at {}", waits.join("; ")));
    }
    if problems.is_empty() { Ok(()) } else { Err(problems) }
}

/// Every send has exactly one receive of the same tensor and back; pipeline-group
/// collectives run the same number of times on every rank.
fn pair_transfers(ir: &PlanIr, problems: &mut Vec<String>) {
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
                problems.push(format!("{}: a transfer needs peer, dir, stage and mb", at(r.rank, index, i)));
                continue;
            };
            if peer == r.rank || peer >= ir.pipeline.ranks {
                problems.push(format!("{}: invalid peer {peer}", at(r.rank, index, i)));
                continue;
            }
            let (key, table) = if i.op == Op::Send {
                ((r.rank, peer, dir, stage, mb), &mut sends)
            } else {
                ((peer, r.rank, dir, stage, mb), &mut recvs)
            };
            if let Some((other_rank, other)) = table.insert(key, (r.rank, index)) {
                problems.push(format!(
                    "{}: the same transfer appears again (first at rank {other_rank}, instruction {other})",
                    at(r.rank, index, i)
                ));
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
        if is_send {
            problems.push(format!("{}: no rank {} receives it", at(rank, index, i), key.1));
        } else {
            problems.push(format!("{}: rank {} never sends it", at(rank, index, i), key.0));
        }
    }
    if collectives.iter().any(|c| *c != collectives[0]) {
        problems.push(format!("the ranks run different numbers of pipeline-group all-reduces: {collectives:?}"));
    }
}
