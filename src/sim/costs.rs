//! The cost model as the simulator's durations: what each instruction of the IR takes.

use std::collections::BTreeMap;
use std::ops::Range;

use crate::cost::model::CostModel;
use crate::cost::{self, Costs};
use crate::ir::interpret::{Durations, Shared};
use crate::ir::{Group, Instr, Op, PlanIr};

pub struct ModelDurations<'a> {
    pub model: &'a CostModel<'a>,
    stages: Vec<Range<u64>>,
    /// Per rank: the layers it holds, by region, for reductions and the optimizer.
    held: Vec<BTreeMap<String, Vec<Range<u64>>>>,
}

impl<'a> ModelDurations<'a> {
    pub fn new(model: &'a CostModel<'a>, ir: &PlanIr) -> ModelDurations<'a> {
        let stages = ir.stages.iter().map(|s| s.layers[0]..s.layers[1]).collect();
        let mut held = vec![BTreeMap::<String, Vec<Range<u64>>>::new(); ir.ranks.len()];
        for s in &ir.stages {
            for (r, h) in held.iter_mut().enumerate() {
                if s.rank.is_none_or(|x| x as usize == r) {
                    h.entry(s.region.clone()).or_default().push(s.layers[0]..s.layers[1]);
                }
            }
        }
        ModelDurations { model, stages, held }
    }

    pub fn stage_layers(&self, stage: u32) -> Range<u64> {
        self.stages[stage as usize].clone()
    }

    /// Every layer `rank` holds, of one region or of all.
    pub fn held(&self, rank: u32, region: Option<&str>) -> Vec<Range<u64>> {
        self.held[rank as usize]
            .iter()
            .filter(|(name, _)| region.is_none_or(|r| r == name.as_str()))
            .flat_map(|(_, l)| l.clone())
            .collect()
    }
}

impl ModelDurations<'_> {
    /// The gradient reduction of `layers` on `rank`'s ring: the profile's, else the formula's.
    fn all_reduce(&self, rank: u32, layers: Vec<Range<u64>>, group: Option<Group>) -> f64 {
        let m = self.model;
        let c = &m.plan().cluster;
        let (name, k) = if group == Some(Group::Pp) { ("pp", c.pp) } else { ("dp", c.dp) };
        if c.shard_weights && group != Some(Group::Pp) {
            // Sharded weights reduce-scatter beside the backward: what the step waits for.
            let order: Vec<u64> = layers.into_iter().flatten().collect();
            return m.sharded_collectives(&order, m.dp_link(rank));
        }
        let measured = m.measured().and_then(|p| p.all_reduce(&layers, name, k));
        measured.unwrap_or_else(|| {
            let grads: f64 = layers.into_iter().map(|l| m.grad_bytes(l)).sum();
            if group == Some(Group::Pp) {
                m.all_reduce(grads, k, m.pp_link())
            } else {
                m.all_reduce(grads, k, m.dp_link(rank))
            }
        })
    }

    fn optimizer(&self, rank: u32) -> f64 {
        let m = self.model;
        let held = self.held(rank, None);
        let measured = m.measured().and_then(|p| held.iter().map(|l| p.optimizer(l.clone())).sum());
        measured.unwrap_or_else(|| held.into_iter().map(|l| m.optimizer_time(l)).sum())
    }

    /// A compute instruction's kernels: its stage's layers, for its share of the microbatch's
    /// images, and with a profile, what its op costs once an instruction (0 for any other
    /// instruction).
    pub fn kernels(&self, i: &Instr) -> f64 {
        let share = i.share(self.model.plan().batch.images as u32);
        let call = self.model.measured().map_or(0.0, |p| p.call(i.op));
        call + cost::compute_time(self.model, i.op, self.stage_layers(i.stage.unwrap_or(0)), i.mb.unwrap_or(0)) * share
    }

    /// The instruction's own work, without what the runtime adds to every instruction.
    fn work(&self, rank: u32, i: &Instr) -> f64 {
        let m = self.model;
        match i.op {
            op if op.is_compute() => self.kernels(i),
            Op::Send if m.send_occupies() => self.transfer(rank, i.peer.unwrap_or(rank), i),
            Op::AllReduce => {
                let layers = match i.stage {
                    Some(bucket) => vec![self.stage_layers(bucket)],
                    None => self.held(rank, i.region.as_deref()),
                };
                self.all_reduce(rank, layers, i.group)
            }
            Op::OptimizerStep => self.optimizer(rank),
            _ => 0.0,
        }
    }
}

/// A step's compute: every rank's compute instructions' kernels, summed (a data-parallel
/// replica's, the same lists, not counted).
pub fn compute_seconds(model: &CostModel, ir: &PlanIr) -> f64 {
    let durations = ModelDurations::new(model, ir);
    ir.ranks.iter().flat_map(|r| &r.instructions).map(|i| durations.kernels(i)).sum()
}

impl Durations for ModelDurations<'_> {
    /// With a profile, every instruction also costs what the runtime spends on it beyond its
    /// work, a receive included when its message is already there.
    fn instruction(&self, rank: u32, i: &Instr) -> f64 {
        self.work(rank, i) + self.model.measured().map_or(0.0, |p| p.overhead(i.op))
    }

    /// A profile taken on a CPU: the ranks share its host's cores.
    fn shared(&self) -> Option<Shared> {
        self.model.measured()?.shared(self.model.plan().cluster.dp)
    }

    fn transfer(&self, from: u32, to: u32, i: &Instr) -> f64 {
        match (i.stage, i.mb) {
            (Some(s), Some(mb)) => {
                let share = i.share(self.model.plan().batch.images as u32);
                self.model.transfer(self.stage_layers(s), mb, share, from, to)
            }
            _ => 0.0,
        }
    }
}
