//! The canonical per-rank compute orders of the sharded skeletons, each identical (idle slots
//! dropped) to the published implementation it names: Megatron-LM's non-interleaved and
//! interleaved schedules, torch.distributed.pipelining's GPipe, LoopedBFS, Interleaved1F1B,
//! InterleavedZeroBubble, ZBVZeroBubble and DualPipeV. Stages are numbered within the body
//! (the sharded stages, in depth order); `mapping` says which rank holds which.
//! `interleaved` with one chunk (no plan writes it; the `hyperparallel` baseline does) is the
//! body of HyperParallel's MPipe schedule, whose slots `hyperparallel` gives.

mod dualpipev;
mod gpipe;
pub mod hyperparallel;
mod interleaved;
mod one_f_one_b;
mod zbv;

use crate::algebra::Skeleton;
use crate::ir::{Mapping, Op};

/// One compute event of the body.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Task {
    pub op: Op,
    pub stage: u32,
    pub mb: u32,
    /// Half of an overlapped forward/backward pair.
    pub overlap: bool,
}

impl Task {
    pub fn new(op: Op, stage: u32, mb: u32) -> Task {
        Task { op, stage, mb, overlap: false }
    }

    /// torch's action string: `2F0`, `1B3`, `0I1`, `3W2`.
    pub fn torch(&self) -> String {
        format!("{}{}{}", self.stage, self.op.torch_letter(), self.mb)
    }
}

/// The body of a plan: `ranks` pipeline ranks holding `chunks` stages each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub ranks: u32,
    pub chunks: u32,
    pub microbatches: u32,
}

impl Shape {
    pub fn stages(&self) -> u32 {
        self.ranks * self.chunks
    }
}

pub fn mapping(skeleton: Skeleton) -> Mapping {
    match skeleton {
        Skeleton::Zbv | Skeleton::DualPipeV => Mapping::V,
        _ => Mapping::Loop,
    }
}

/// The rank holding body stage `stage` (torch's `generate_stage_to_rank_mapping`).
pub fn rank_of(mapping: Mapping, ranks: u32, stage: u32) -> u32 {
    match mapping {
        Mapping::Loop => stage % ranks,
        Mapping::V => {
            let (chunk, pos) = (stage / ranks, stage % ranks);
            if chunk % 2 == 0 { pos } else { ranks - 1 - pos }
        }
    }
}

/// The compute order of every rank, with or without backward events.
pub fn order(skeleton: Skeleton, shape: Shape, backward: bool) -> Vec<Vec<Task>> {
    let orders = match skeleton {
        Skeleton::Gpipe => gpipe::order(shape),
        Skeleton::OneFOneB if shape.chunks == 1 => one_f_one_b::order(shape),
        Skeleton::OneFOneB | Skeleton::Interleaved { .. } => interleaved::order(shape, false),
        Skeleton::Zb1p { .. } => interleaved::order(shape, true),
        Skeleton::Zbv => zbv::order(shape),
        Skeleton::DualPipeV => dualpipev::order(shape),
        Skeleton::Transpose { .. } => unreachable!("transpose is not a sharded skeleton"),
    };
    if backward {
        orders
    } else {
        // Nothing upstream is trainable and the body is frozen: a forward-only pipeline keeps
        // the canonical order of its forwards.
        orders
            .into_iter()
            .map(|r| r.into_iter().filter(|t| t.op == Op::Forward).map(|t| Task { overlap: false, ..t }).collect())
            .collect()
    }
}

#[cfg(test)]
pub(crate) fn render(orders: &[Vec<Task>]) -> Vec<String> {
    orders
        .iter()
        .map(|r| {
            let mut out: Vec<String> = Vec::new();
            let mut i = 0;
            while i < r.len() {
                if r[i].overlap && i + 1 < r.len() && r[i + 1].overlap {
                    out.push(format!("({};{})OVERLAP_F_B", r[i].torch(), r[i + 1].torch()));
                    i += 2;
                } else {
                    out.push(r[i].torch());
                    i += 1;
                }
            }
            out.join(",")
        })
        .collect()
}

#[cfg(test)]
mod tests;
