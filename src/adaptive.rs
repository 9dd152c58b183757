//! `owner adaptive`: the plan is derived once, as every plan is (the static plan), and again for
//! each batch from that batch's per-microbatch image tokens. Only what depends on image sizes is
//! derived again: the resolved plan's form, chunk count and image splits stay, the body's
//! stages, their ranks and each rank's canonical order are kept from the static plan, and the
//! encoder's owners and slots are placed afresh in the body's idle time with the batch's own
//! encode times (owner.rs's quick search: the greedy owners and the least head delay). The per-batch plan is validated and checked against device memory, and both it
//! and the static plan are simulated on the batch: the faster runs, so adaptive is never slower
//! than static on any batch.

use crate::algebra::{Fill, OwnerSpec, Skeleton};
use crate::built::Built;
use crate::cost::model::CostModel;
use crate::derive::owner::Effort;
use crate::derive::resolved::{Choices, Resolved};
use crate::derive::{self, Derived, Placed};
use crate::ir::{interpret, validate};
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
}

/// `plan` with one batch's per-microbatch image tokens.
pub fn batch_of(plan: &Plan, tokens: &[u64]) -> Plan {
    let mut batch = plan.clone();
    batch.batch.image_tokens = tokens.to_vec();
    batch
}

/// The choices a batch is lowered with: the static plan's, with the owner schedule (owners,
/// head delay, slots) found again by `by_microbatch`'s min-max against the body's idle time,
/// with this batch's encode times, in the plan's own slack-filled form. `None` when the encoder
/// is not placed in idle time.
fn batch_choices(resolved: &Resolved) -> Option<Choices> {
    let written = resolved.plan.schedule.first()?.skeleton;
    let Skeleton::Transpose { fill: Fill::Slack, .. } = written else { return None };
    Some(Choices {
        encoder: Some(written),
        encoder_owner: Some(OwnerSpec::ByMicrobatch),
        encoder_schedule: None,
        ..resolved.choices.clone()
    })
}

/// A built plan placed again batch after batch: what does not depend on image sizes (the
/// stages and their ranks, each rank's body order) is kept from the static plan, and each
/// batch re-places only the encoder's work, with the quick owner search.
pub struct Adaptive<'b, 'p> {
    built: &'b Built<'p>,
    /// The choices and the placed body batches are lowered on; `None` when there is no
    /// encoder placed in idle time.
    kept: Option<(Choices, Placed)>,
}

impl<'b, 'p> Adaptive<'b, 'p> {
    pub fn new(built: &'b Built<'p>) -> Adaptive<'b, 'p> {
        let kept = batch_choices(&built.resolved).map(|choices| {
            let placed = derive::placed(&built.resolved.effective(), &built.costs, choices.chunks);
            (choices, placed)
        });
        Adaptive { built, kept }
    }

    /// The plan for one batch, given its image tokens per microbatch (a shorter list repeats,
    /// as `image_tokens` does).
    pub fn for_batch(&self, tokens: &[u64]) -> BatchPlan {
        let batch = batch_of(self.built.plan(), tokens);
        let model = CostModel::new(&batch);
        let static_s = makespan(&self.built.derived, &model);
        let Some((choices, placed)) = &self.kept else {
            return BatchPlan { derived: None, fallback: Some(Fallback::NoSlackEncoder), static_s, adaptive_s: None };
        };
        let resolved = Resolved { plan: &batch, choices: choices.clone() };
        let derived = derive::lower_batch(placed.clone(), &resolved, &model, Effort::Quick);
        if let Err(problems) = validate::validate(&derived.ir) {
            return BatchPlan {
                derived: None,
                fallback: Some(Fallback::Invalid(problems)),
                static_s,
                adaptive_s: None,
            };
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
}

/// The plan for one batch of `built`'s plan, given that batch's image tokens per microbatch;
/// [`Adaptive::for_batch`] without keeping what batches share, for a single batch.
pub fn for_batch(built: &Built, tokens: &[u64]) -> BatchPlan {
    Adaptive::new(built).for_batch(tokens)
}

/// A plan's lists timed by the interpreter with the cost model's durations: what `sim` reports
/// as the step.
pub fn makespan(derived: &Derived, model: &CostModel) -> f64 {
    interpret::run(&derived.ir, &ModelDurations::new(model, &derived.ir)).map_or(f64::INFINITY, |t| t.makespan())
}
