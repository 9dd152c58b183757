//! Measured against predicted: the torch runtime's per-instruction times on a plan's
//! miniature (`mpipec verify --profile`) become per-layer costs, the simulator runs the plan's
//! lists with them, and its step time is set beside the one the runtime measured. The analytic
//! cost model describes the plan's real hardware, not the machine the miniature ran on; this
//! checks the other half of a prediction, the schedule: dependencies, bubbles and waits.

use serde::Deserialize;

use crate::cost::{self, Costs};
use crate::ir::interpret::{self, Durations};
use crate::ir::{Instr, Op, PlanIr};
use crate::profile::HostSpeed;

/// What the runtime writes to `profile.json`.
#[derive(Debug, Deserialize)]
pub struct Profile {
    pub ranks: Vec<RankProfile>,
    /// The host's speed kernel the runtime timed before each step, on a CPU host.
    #[serde(default)]
    pub host_speed_kernel: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct RankProfile {
    pub rank: u32,
    pub steps: Vec<StepProfile>,
}

#[derive(Debug, Deserialize)]
pub struct StepProfile {
    /// From the step's start (all ranks together, after a barrier) to this rank's last instruction.
    pub seconds: f64,
    /// Per instruction of the rank's list, in order.
    pub instructions: Vec<f64>,
    /// The same in the rank's thread's CPU seconds (absent from older runtimes).
    #[serde(default)]
    pub cpu: Vec<f64>,
    /// The host's speed kernel's seconds, timed before the step (on a CPU host).
    #[serde(default)]
    pub host_speed: Option<f64>,
}

#[derive(Debug, PartialEq)]
pub struct Comparison {
    /// Median over the steps used of the slowest rank's step time, in seconds.
    pub measured: f64,
    /// The fastest of those steps: on a machine shared with other work, the step least
    /// disturbed by it.
    pub fastest: f64,
    /// The simulated step with the measured per-layer costs, in seconds.
    pub predicted: f64,
    /// Steps used: all but the first (warm-up) when there are several.
    pub steps: usize,
    /// The step's compute instructions over every rank, each its median over the steps used (as
    /// a profile's layer times are, `mpipec.torch.profile`), in the wall clock and in CPU
    /// seconds (where the runtime gave them).
    pub compute: f64,
    pub compute_cpu: Option<f64>,
    /// The host's speed kernel over the steps used, every rank's, where the runtime timed it.
    pub host_speed: Option<HostSpeed>,
}

impl Comparison {
    /// Predicted relative to measured, in percent.
    pub fn error_percent(&self) -> f64 {
        (self.predicted / self.measured - 1.0) * 100.0
    }
}

/// Per global layer: mean forward, backward-input (or whole backward) and backward-weight
/// seconds, from the compute instructions of the stages holding it.
struct MeasuredLayers {
    forward: Vec<f64>,
    backward_input: Vec<f64>,
    backward_weight: Vec<f64>,
}

impl Costs for MeasuredLayers {
    fn forward(&self, layers: std::ops::Range<u64>, _: u32) -> f64 {
        layers.map(|l| self.forward[l as usize]).sum()
    }
    fn backward_input(&self, layers: std::ops::Range<u64>, _: u32) -> f64 {
        layers.map(|l| self.backward_input[l as usize]).sum()
    }
    fn backward_weight(&self, layers: std::ops::Range<u64>, _: u32) -> f64 {
        layers.map(|l| self.backward_weight[l as usize]).sum()
    }
}

struct MeasuredDurations<'a> {
    ir: &'a PlanIr,
    layers: MeasuredLayers,
    /// Per rank and op: mean seconds of its non-compute instructions (reductions, the
    /// optimizer step, posting a send).
    local: Vec<Vec<(Op, f64)>>,
    /// A message's cost when nobody waits: the fastest receive measured.
    transfer: f64,
}

impl Durations for MeasuredDurations<'_> {
    fn instruction(&self, rank: u32, i: &Instr) -> f64 {
        if i.op.is_compute() {
            let s = &self.ir.stages[i.stage.unwrap_or(0) as usize];
            let layers = s.layers[0]..s.layers[1];
            return cost::compute_time(&self.layers, i.op, layers, i.mb.unwrap_or(0))
                * i.share(self.ir.pipeline.images);
        }
        if i.op == Op::Recv {
            return 0.0;
        }
        self.local[rank as usize].iter().find(|(op, _)| *op == i.op).map_or(0.0, |(_, t)| *t)
    }
    fn transfer(&self, _: u32, _: u32, _: &Instr) -> f64 {
        self.transfer
    }
}

fn mean(values: &[f64]) -> f64 {
    if values.is_empty() { 0.0 } else { values.iter().sum::<f64>() / values.len() as f64 }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => 0.0,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

pub fn compare(ir: &PlanIr, profile: &Profile) -> Result<Comparison, String> {
    let steps = profile.ranks.iter().map(|r| r.steps.len()).min().unwrap_or(0);
    if steps == 0 || profile.ranks.len() != ir.ranks.len() {
        return Err(format!(
            "the profile holds {} ranks and {steps} steps; the plan has {} ranks",
            profile.ranks.len(),
            ir.ranks.len()
        ));
    }
    let used = if steps > 1 { 1..steps } else { 0..steps };
    let layer_count = ir.stages.iter().map(|s| s.layers[1]).max().unwrap_or(0) as usize;
    // (stage, op) -> the measured times of its instructions, over ranks, steps and microbatches.
    let mut compute: std::collections::BTreeMap<(u32, Op), Vec<f64>> = Default::default();
    let mut local: Vec<std::collections::BTreeMap<Op, Vec<f64>>> = vec![Default::default(); ir.ranks.len()];
    let mut receives = Vec::new();
    let (mut compute_wall, mut compute_cpu) = (0.0, 0.0);
    let mut cpu_given = true;
    for rp in &profile.ranks {
        let list = &ir
            .ranks
            .get(rp.rank as usize)
            .ok_or_else(|| format!("the profile names rank {}, which the plan lacks", rp.rank))?
            .instructions;
        for step in &rp.steps[used.clone()] {
            if step.instructions.len() != list.len() {
                return Err(format!(
                    "rank {}: {} timings for {} instructions",
                    rp.rank,
                    step.instructions.len(),
                    list.len()
                ));
            }
            cpu_given &= step.cpu.len() == list.len();
            for (i, &t) in list.iter().zip(&step.instructions) {
                match i.op {
                    op if op.is_compute() => compute.entry((i.stage.unwrap_or(0), op)).or_default().push(t),
                    Op::Recv => receives.push(t),
                    op => local[rp.rank as usize].entry(op).or_default().push(t),
                }
            }
        }
        let steps = &rp.steps[used.clone()];
        compute_wall += typical_compute(list, steps, |s| &s.instructions);
        compute_cpu += typical_compute(list, steps, |s| &s.cpu);
    }
    let mut layers = MeasuredLayers {
        forward: vec![0.0; layer_count],
        backward_input: vec![0.0; layer_count],
        backward_weight: vec![0.0; layer_count],
    };
    for ((stage, op), times) in &compute {
        let s = &ir.stages[*stage as usize];
        let per_layer = mean(times) / (s.layers[1] - s.layers[0]).max(1) as f64;
        let into = match op {
            Op::Forward => &mut layers.forward,
            Op::BackwardWeight => &mut layers.backward_weight,
            _ => &mut layers.backward_input,
        };
        for l in s.layers[0]..s.layers[1] {
            into[l as usize] = per_layer;
        }
    }
    let durations = MeasuredDurations {
        ir,
        layers,
        local: local.into_iter().map(|m| m.into_iter().map(|(op, t)| (op, mean(&t))).collect()).collect(),
        transfer: receives.iter().cloned().reduce(f64::min).unwrap_or(0.0),
    };
    let timeline = interpret::run(ir, &durations).map_err(|d| format!("the plan deadlocks at {:?}", d.blocked))?;
    let steps: Vec<f64> =
        used.clone().map(|k| profile.ranks.iter().map(|r| r.steps[k].seconds).fold(0.0, f64::max)).collect();
    let fastest = steps.iter().cloned().fold(f64::INFINITY, f64::min);
    Ok(Comparison {
        measured: median(steps),
        fastest,
        predicted: timeline.makespan(),
        steps: used.len(),
        compute: compute_wall,
        compute_cpu: cpu_given.then_some(compute_cpu),
        host_speed: host_speed(profile, used),
    })
}

/// The host's speed kernel's median seconds over the steps `used` of every rank, where every
/// one of them timed it.
fn host_speed(profile: &Profile, used: std::ops::Range<usize>) -> Option<HostSpeed> {
    let kernel = profile.host_speed_kernel.clone()?;
    let seconds: Option<Vec<f64>> =
        profile.ranks.iter().flat_map(|r| r.steps[used.clone()].iter().map(|s| s.host_speed)).collect();
    Some(HostSpeed { kernel, seconds: median(seconds?) })
}

/// A rank's compute instructions, each its median over `steps` of the times `of` gives (a step
/// without them left out).
fn typical_compute(list: &[Instr], steps: &[StepProfile], of: impl Fn(&StepProfile) -> &Vec<f64>) -> f64 {
    let computes = list.iter().enumerate().filter(|(_, i)| i.op.is_compute());
    computes.map(|(k, _)| median(steps.iter().filter_map(|s| of(s).get(k).copied()).collect())).sum()
}
