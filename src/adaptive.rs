//! `owner adaptive`: the plan is derived once, as every plan is (the static plan), and again for
//! each batch from that batch's per-microbatch image tokens. Only what depends on image sizes is
//! derived again: the resolved plan's form, chunk count and image splits stay, so the body's
//! stages, their ranks and each rank's canonical order are those of the static plan, and the
//! encoder's owners and slots are placed afresh in the body's idle time with the batch's own
//! encode times. The per-batch plan is validated and checked against device memory, and both it
//! and the static plan are simulated on the batch: the faster runs, so adaptive is never slower
//! than static on any batch.

use crate::algebra::{Fill, OwnerSpec, Skeleton};
use crate::built::Built;
use crate::cost::model::CostModel;
use crate::derive::resolved::{Choices, Resolved};
use crate::derive::{self, Derived};
use crate::ir::{StageIr, interpret, validate};
use crate::plan::Plan;
use crate::sim::costs::ModelDurations;
use crate::sim::report;

/// The plan one batch runs, and both steps it was chosen between.
pub struct BatchPlan {
    /// The per-batch lists when they run; `None` when the static plan runs.
    pub derived: Option<Derived>,
    /// Why the static plan runs instead, when it does.
    pub fallback: Option<Fallback>,
    /// The static plan's step on this batch, simulated.
    pub static_s: f64,
    /// The per-batch plan's step, simulated, when it was derived and valid.
    pub adaptive_s: Option<f64>,
}

impl BatchPlan {
    /// The step of the plan that runs.
    pub fn step_s(&self) -> f64 {
        self.adaptive_s.filter(|_| self.fallback.is_none()).unwrap_or(self.static_s)
    }
}

/// Why a batch runs the static plan.
#[derive(Clone, Debug, PartialEq)]
pub enum Fallback {
    /// No encoder whose owners are placed in the body's idle time: nothing to re-place.
    NoSlackEncoder,
    /// The per-batch lists failed the validator (a compiler bug, kept from running).
    Invalid(Vec<validate::Problem>),
    /// The per-batch plan exceeds device memory on these ranks (rank, peak bytes).
    OverMemory(Vec<(u32, f64)>),
    /// The per-batch plan simulates no faster than the static one.
    NotFaster,
    /// The batch's costs cut the body's stages elsewhere than the static plan's.
    OtherStages,
}

/// `plan` with one batch's per-microbatch image tokens.
pub fn batch_of(plan: &Plan, tokens: &[u64]) -> Plan {
    let mut batch = plan.clone();
    batch.batch.image_tokens = tokens.to_vec();
    batch
}

/// The choices a batch is lowered with: the static plan's, with the owner schedule (owners,
/// head delay, slots) found again by `by_microbatch`'s min-max against the body's idle time,
/// with this batch's encode times, in the plan's own slack-filled form, and the static plan's
/// encoder chunks (`stages`: its stages), which the batch's costs would split elsewhere. `None`
/// when the encoder is not placed in idle time.
fn batch_choices(resolved: &Resolved, stages: &[StageIr]) -> Option<Choices> {
    let written = resolved.plan.schedule.first()?.skeleton;
    let Skeleton::Transpose { fill: Fill::Slack, .. } = written else { return None };
    let encoder = &resolved.plan.cut.regions.first()?.name;
    let encoder_split = stages.iter().filter(|s| &s.region == encoder).map(|s| s.layers[1] - s.layers[0]).collect();
    Some(Choices {
        encoder: Some(written),
        encoder_owner: Some(OwnerSpec::ByMicrobatch),
        encoder_schedule: None,
        encoder_split,
        ..resolved.choices.clone()
    })
}

/// The plan for one batch of `built`'s plan, given that batch's image tokens per microbatch (a
/// shorter list repeats, as `image_tokens` does).
pub fn for_batch(built: &Built, tokens: &[u64]) -> BatchPlan {
    let batch = batch_of(built.plan(), tokens);
    let model = CostModel::new(&batch);
    let static_s = makespan(&built.derived, &model);
    let Some(choices) = batch_choices(&built.resolved, &built.derived.ir.stages) else {
        return BatchPlan { derived: None, fallback: Some(Fallback::NoSlackEncoder), static_s, adaptive_s: None };
    };
    let derived = derive::lower(&Resolved { plan: &batch, choices }, &model);
    if derived.ir.stages != built.derived.ir.stages {
        // The stage modules are cut once, as the static plan's stages: a plan that cuts them
        // elsewhere (a body split the batch's costs move) cannot run on them.
        return BatchPlan { derived: None, fallback: Some(Fallback::OtherStages), static_s, adaptive_s: None };
    }
    if let Err(problems) = validate::validate(&derived.ir) {
        return BatchPlan { derived: None, fallback: Some(Fallback::Invalid(problems)), static_s, adaptive_s: None };
    }
    let simulated = report::simulate(&derived, &model).report;
    let adaptive_s = Some(simulated.step_time_s);
    let fallback = if !simulated.over_memory.is_empty() {
        Some(Fallback::OverMemory(simulated.over_memory))
    } else if simulated.step_time_s >= static_s {
        Some(Fallback::NotFaster)
    } else {
        None
    };
    BatchPlan { derived: fallback.is_none().then_some(derived), fallback, static_s, adaptive_s }
}

/// A plan's lists timed by the interpreter with the cost model's durations: what `sim` reports
/// as the step.
pub fn makespan(derived: &Derived, model: &CostModel) -> f64 {
    interpret::run(&derived.ir, &ModelDurations::new(model, &derived.ir)).map_or(f64::INFINITY, |t| t.makespan())
}
