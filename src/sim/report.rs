//! The simulator's verdict on a derived plan: step time against its lower bound, MFU, and per
//! rank busy and idle time, warmup slack, encoder work, spill and peak memory (report.json,
//! docs/plan-json.md). Memory comes from the actual order: an activation lives from its forward to the
//! backward that consumes it.

use serde::Serialize;

use super::costs::ModelDurations;
use crate::cost::model::CostModel;

use crate::derive::Derived;
use crate::ir::Op;
use crate::ir::interpret::{self, Durations, Timeline};

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RankReport {
    pub rank: u32,
    pub busy_s: f64,
    pub idle_s: f64,
    /// w_r: idle time before the rank's first body event, the body alone (no encoder work).
    pub warmup_slack_s: f64,
    /// E_r: encoder forward work the owner map gives this rank.
    pub encoder_s: f64,
    /// max(0, E_r − w_r).
    pub spill_s: f64,
    pub peak_memory_bytes: f64,
    pub static_memory_bytes: f64,
    /// Most microbatches whose activations this rank held at once.
    pub peak_live_microbatches: u32,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Compared {
    pub name: String,
    pub step_time_s: f64,
    /// Baseline step time over this plan's.
    pub speedup: f64,
    pub description: String,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    pub step_time_s: f64,
    /// The larger of the two bounds below: no schedule of this work can beat it.
    pub lower_bound_s: f64,
    /// Total compute of the step spread evenly over the pipeline ranks.
    pub lower_bound_work_s: f64,
    /// The longest chain of dependent events, with transfers, on unlimited ranks.
    pub lower_bound_critical_path_s: f64,
    pub mfu: f64,
    /// Idle share of all ranks' time.
    pub bubble_fraction: f64,
    pub model_flops: f64,
    /// With a transpose region: the exposed encoder work of the owner map, max_r spill_r.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner_spill_s: Option<f64>,
    /// With a transpose region, in compute time with transfers free: the body alone plus the
    /// first microbatch's encode (none with lookahead), a bound a schedule can reach when the
    /// other encodes fit the idle time, and the fluid relaxation, which none need reach.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transpose_floor_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transpose_relaxation_s: Option<f64>,
    /// With lookahead: the first step, whose prologue encodes its own batch first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_step_s: Option<f64>,
    pub ranks: Vec<RankReport>,
    /// Device memory exceeded: (rank, peak bytes).
    pub over_memory: Vec<(u32, f64)>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub compare: Vec<Compared>,
}

pub struct Simulation {
    pub timeline: Timeline,
    pub report: Report,
    /// Live bytes over time per rank: (time, bytes) at every change.
    pub memory: Vec<Vec<(f64, f64)>>,
}

pub fn simulate(derived: &Derived, model: &CostModel) -> Simulation {
    let ir = &derived.ir;
    let costs = ModelDurations::new(model, ir);
    let timeline = match model.measured().and_then(|m| m.profile.speed()) {
        Some(trace) => super::speed::run(ir, &costs, trace),
        None => interpret::run(ir, &costs),
    }
    .expect("validated plans run to the end");
    let step = timeline.makespan();
    let plan = model.plan();
    let p = ir.ranks.len();

    let mut ranks = Vec::with_capacity(p);
    let mut memory = Vec::with_capacity(p);
    let mut over_memory = Vec::new();
    let mut total_work = 0.0;
    for (r, list) in ir.ranks.iter().enumerate() {
        let busy: f64 =
            list.instructions.iter().filter(|i| i.op.is_compute()).map(|i| costs.instruction(r as u32, i)).sum();
        total_work += busy;
        let static_bytes: f64 = costs.held(r as u32, None).into_iter().map(|l| model.static_bytes(l)).sum();
        let (peak, live_peak, series) = live_memory(ir, r, &timeline, model, &costs, static_bytes);
        if peak > plan.cluster.hardware.hbm_bytes {
            over_memory.push((r as u32, peak));
        }
        let (slack, encoder) = match &derived.estimates.encoder {
            Some(t) => (t.slack[r], t.work[r]),
            None => (body_slack(derived, &timeline, r), 0.0),
        };
        ranks.push(RankReport {
            rank: r as u32,
            busy_s: busy,
            idle_s: step - busy,
            warmup_slack_s: slack,
            encoder_s: encoder,
            spill_s: (encoder - slack).max(0.0),
            peak_memory_bytes: peak,
            static_memory_bytes: static_bytes,
            peak_live_microbatches: live_peak,
        });
        memory.push(series);
    }
    let critical = derived.estimates.critical_path;
    let work = total_work / p as f64;
    let flops = model.model_flops();
    let c = &plan.cluster;
    let mfu = if step > 0.0 { flops / (step * c.devices as f64 * c.hardware.peak_bf16) } else { 0.0 };
    let busy_total: f64 = ranks.iter().map(|r| r.busy_s).sum();
    let owner_spill_s = derived.estimates.encoder.as_ref().map(|_| ranks.iter().map(|r| r.spill_s).fold(0.0, f64::max));
    let bounds = derived.estimates.encoder.as_ref().map(|t| t.bounds);
    // The prologue has no transfers: the first step waits for the rank that encodes longest.
    let prologue = ir
        .ranks
        .iter()
        .map(|r| r.prologue.iter().map(|i| costs.instruction(r.rank, i)).sum::<f64>())
        .fold(0.0, f64::max);
    let first_step_s = ir.ranks.iter().any(|r| !r.prologue.is_empty()).then_some(prologue + step);
    let report = Report {
        step_time_s: step,
        lower_bound_s: work.max(critical),
        lower_bound_work_s: work,
        lower_bound_critical_path_s: critical,
        mfu,
        bubble_fraction: if step > 0.0 { 1.0 - busy_total / (p as f64 * step) } else { 0.0 },
        model_flops: flops,
        owner_spill_s,
        transpose_floor_s: bounds.map(|b| b.floor),
        transpose_relaxation_s: bounds.map(|b| b.relaxation),
        first_step_s,
        ranks,
        over_memory,
        compare: Vec::new(),
    };
    Simulation { timeline, report, memory }
}

/// Idle time before a rank's first compute in the simulated step.
fn body_slack(derived: &Derived, timeline: &Timeline, r: usize) -> f64 {
    derived.ir.ranks[r].instructions.iter().position(|i| i.op.is_compute()).map_or(0.0, |k| timeline.start[r][k])
}

/// Peak bytes, peak live microbatches and the series of live bytes over time on rank `r`.
fn live_memory(
    ir: &crate::ir::PlanIr,
    r: usize,
    timeline: &Timeline,
    model: &CostModel,
    costs: &ModelDurations,
    static_bytes: f64,
) -> (f64, u32, Vec<(f64, f64)>) {
    let mut live = 0.0f64;
    let mut live_mbs: std::collections::BTreeMap<u32, u32> = Default::default();
    let (mut peak, mut peak_mbs) = (static_bytes, 0u32);
    // Outputs of a replicated region without backward (a frozen encoder's chunks and
    // features) keep no activations, but each lives until this rank hands it on: to its next
    // chunk, to the features' send, to the first body forward. With lookahead the next step's
    // features live to the end of the step, and this step's, encoded before, from its start.
    let kept_output = |s: u32| ir.stages[s as usize].rank.is_none() && !ir.stages[s as usize].backward;
    // A replicated chunk whose backward runs on another rank stays charged here to the end of
    // the step (what it sends lives until the receiver takes it, right before that backward);
    // the backward's rank holds the recomputed activations while it runs.
    let forwards: std::collections::HashSet<(u32, u32, Option<[u32; 2]>)> = ir.ranks[r]
        .instructions
        .iter()
        .filter(|i| i.op == Op::Forward)
        .filter_map(|i| Some((i.stage?, i.mb?, i.images)))
        .collect();
    let output = |s: u32, mb: u32| model.boundary_bytes(costs.stage_layers(s), mb);
    let mut held: std::collections::BTreeMap<(u32, u32, bool), f64> = Default::default();
    for i in ir.ranks[r].instructions.iter().filter(|i| i.step == Some(1)) {
        if let (Some(s), Some(mb)) = (i.stage, i.mb)
            && kept_output(s)
            && ir.stages.get(s as usize + 1).is_none_or(|next| next.region != ir.stages[s as usize].region)
        {
            held.insert((s, mb, false), output(s, mb));
            live += output(s, mb);
        }
    }
    let mut series = vec![(0.0, static_bytes + live)];
    for (k, i) in ir.ranks[r].instructions.iter().enumerate() {
        let (Some(s), Some(mb)) = (i.stage, i.mb) else { continue };
        let ahead = i.step == Some(1);
        let handed_on = match i.op {
            Op::Forward if s > 0 => held.remove(&(s - 1, mb, ahead)),
            Op::Send if i.dir == Some(crate::ir::Dir::Act) => held.remove(&(s, mb, false)),
            _ => None,
        };
        let share = i.share(ir.pipeline.images);
        let made = (i.op == Op::Forward && kept_output(s)).then(|| output(s, mb) * share);
        if let Some(bytes) = made {
            held.insert((s, mb, ahead), bytes);
        }
        if handed_on.is_some() || made.is_some() {
            live += made.unwrap_or(0.0) - handed_on.unwrap_or(0.0);
            series.push((timeline.end[r][k], static_bytes + live));
            peak = peak.max(static_bytes + live);
        }
        if !i.op.is_compute() || !ir.stages[s as usize].backward {
            continue;
        }
        let bytes = model.activation_bytes(costs.stage_layers(s), mb) * share;
        if i.op == Op::Backward && ir.stages[s as usize].rank.is_none() && !forwards.contains(&(s, mb, i.images)) {
            peak = peak.max(static_bytes + live + bytes);
            series.push((timeline.start[r][k], static_bytes + live + bytes));
            series.push((timeline.end[r][k], static_bytes + live));
            continue;
        }
        let freed = matches!(i.op, Op::Backward | Op::BackwardWeight);
        match i.op {
            Op::Forward => {
                live += bytes;
                *live_mbs.entry(mb).or_insert(0) += 1;
            }
            _ if freed => {
                live -= bytes;
                if let Some(n) = live_mbs.get_mut(&mb) {
                    *n -= 1;
                    if *n == 0 {
                        live_mbs.remove(&mb);
                    }
                }
            }
            _ => continue,
        }
        let t = if i.op == Op::Forward { timeline.start[r][k] } else { timeline.end[r][k] };
        series.push((t, static_bytes + live));
        peak = peak.max(static_bytes + live);
        peak_mbs = peak_mbs.max(live_mbs.len() as u32);
    }
    (peak, peak_mbs, series)
}
