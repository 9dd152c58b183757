//! `exec_order.json`: each rank's steps exactly as HyperParallel's `ScheduleMPipeTranspose`
//! builds them (`construct_exec_order` in hyper_parallel/core/pipeline_parallel/mpipe/schedule.py
//! over the interleaved body of scheduler.py), with `pp_mpipe_transpose_overflow: full` and, for
//! a trainable tower, `pp_mpipe_owner_backward: true`: the rules, not its code.
//!
//! A rank's list is its transpose prefix, its body, and with a trainable tower the owner-backward
//! suffix. Prefix steps have stage `-1`. The body is the interleaved generator's slots scanned
//! column by column: in each column every rank's compute step, then the transfers of the even
//! ranks' steps, then the odd ranks', so an odd rank posts the receive from its upstream
//! neighbour before its own send. A forward crossing ranks ships the raw data and then the
//! activation; a receive carries the receiving stage.

use serde::Serialize;

use crate::ir::Op;
use crate::skeletons::{Shape, Task, hyperparallel};

/// A plan in the form HyperParallel's MPipe schedule runs: the tower replicated as one block
/// before each rank's pipeline, microbatch m encoded on rank m mod min(P, M), and an
/// interleaved body of `chunks` stages per rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Form {
    pub ranks: u32,
    pub chunks: u32,
    pub microbatches: u32,
    /// `pp_less_memory`: the shallow warmup, P-1-i forwards on rank i instead of 2(P-1-i).
    pub less_memory: bool,
    /// The tower trains: its parameters are broadcast and its owners run its backward.
    pub trainable: bool,
}

/// One `MetaStep`: its type, microbatch (`null` for the gradient reduce) and stage.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Step {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub micro_index: Option<u32>,
    pub stage_index: i64,
}

impl Step {
    fn new(kind: &'static str, mb: u32, stage: i64) -> Step {
        Step { kind, micro_index: Some(mb), stage_index: stage }
    }
}

/// The stage HyperParallel gives the transpose prefix.
const PREFIX: i64 = -1;

/// Every rank's steps, rank 0 first.
pub fn steps(form: &Form) -> Vec<Vec<Step>> {
    body(form)
        .into_iter()
        .enumerate()
        .map(|(rank, body)| {
            let rank = rank as u32;
            let mut out = prefix(form, rank);
            out.extend(body);
            if form.trainable {
                out.extend(owner_backward(form, rank));
            }
            out
        })
        .collect()
}

/// min(P, M): the ranks that own microbatches.
fn owner_ranks(form: &Form) -> u32 {
    form.ranks.min(form.microbatches)
}

fn owned(form: &Form, rank: u32) -> Vec<u32> {
    let nt = owner_ranks(form);
    (0..form.microbatches).filter(|mb| mb % nt == rank).collect()
}

/// Each owned microbatch loaded and encoded, then the transfers grouped by type (all data,
/// then all features) so that sender and rank 0 match their messages in order.
fn prefix(form: &Form, rank: u32) -> Vec<Step> {
    let mut out = Vec::new();
    if form.trainable {
        out.push(Step::new("MPIPE_PARAM_BROADCAST", rank, PREFIX));
    }
    let mine = owned(form, rank);
    for &mb in &mine {
        out.push(Step::new("DATA_LOAD", mb, PREFIX));
        out.push(Step::new("MPIPE_TRANSPOSE_FWD", mb, PREFIX));
    }
    let (shipped, kinds) = if rank == 0 {
        let others: Vec<u32> = (0..form.microbatches).filter(|mb| !mine.contains(mb)).collect();
        (others, ["DATA_RECV", "MPIPE_FWD_RECV"])
    } else {
        (mine, ["DATA_SEND", "MPIPE_FWD_SEND"])
    };
    for kind in kinds {
        out.extend(shipped.iter().map(|&mb| Step::new(kind, mb, PREFIX)));
    }
    out
}

/// After the body: rank 0 ships the feature gradient of every microbatch it does not own,
/// each owner runs the tower backward of each of its microbatches, and every rank sums the
/// tower gradients.
fn owner_backward(form: &Form, rank: u32) -> Vec<Step> {
    let nt = owner_ranks(form);
    let mut out: Vec<Step> = if rank == 0 {
        (0..form.microbatches).filter(|mb| mb % nt != 0).map(|mb| Step::new("MPIPE_GRAD_SEND", mb, 0)).collect()
    } else {
        owned(form, rank).into_iter().map(|mb| Step::new("MPIPE_GRAD_RECV_WITH_BACKWARD", mb, 0)).collect()
    };
    out.push(Step { kind: "MPIPE_GRAD_REDUCE", micro_index: None, stage_index: 0 });
    out
}

fn body(form: &Form) -> Vec<Vec<Step>> {
    let shape = Shape { ranks: form.ranks, chunks: form.chunks, microbatches: form.microbatches };
    let slots = hyperparallel::slots(shape, form.less_memory);
    let columns = slots.iter().map(Vec::len).max().unwrap_or(0);
    let mut out = vec![Vec::new(); form.ranks as usize];
    let scan: Vec<usize> = (0..slots.len()).step_by(2).chain((1..slots.len()).step_by(2)).collect();
    for t in 0..columns {
        let column: Vec<Option<Task>> = slots.iter().map(|rank| rank.get(t).copied().flatten()).collect();
        for (rank, task) in column.iter().enumerate() {
            if let Some(task) = task {
                let kind = if task.op == Op::Forward { "FWD" } else { "BWD" };
                out[rank].push(Step::new(kind, task.mb, i64::from(task.stage)));
            }
        }
        for &rank in &scan {
            if let Some(task) = column[rank] {
                transfers(task, shape, &mut out);
            }
        }
    }
    out
}

/// The sends of `task` on its rank and the matching receives on the peer's.
fn transfers(task: Task, shape: Shape, out: &mut [Vec<Step>]) {
    let (s, mb, ranks) = (task.stage, task.mb, shape.ranks);
    let rank = (s % ranks) as usize;
    let (to, sends, recvs): (u32, &[&'static str], &[&'static str]) = match task.op {
        Op::Forward if s + 1 < shape.stages() => (s + 1, &["DATA_SEND", "FWD_SEND"], &["DATA_RECV", "FWD_RECV"]),
        Op::Backward if s > 0 => (s - 1, &["BWD_SEND"], &["BWD_RECV"]),
        _ => return,
    };
    let peer = (to % ranks) as usize;
    if peer == rank {
        return;
    }
    out[rank].extend(sends.iter().map(|&k| Step::new(k, mb, i64::from(s))));
    out[peer].extend(recvs.iter().map(|&k| Step::new(k, mb, i64::from(to))));
}
