//! `owner adaptive`: the plan is derived once, as every plan is (the static plan), and again for
//! each batch from that batch's per-microbatch image tokens. Only what depends on image sizes is
//! derived again: the resolved plan's form, chunk count and image splits stay, the body's
//! stages, their ranks and each rank's canonical order are kept from the static plan, and the
//! encoder's owners and slots are placed afresh in the body's idle time with the batch's own
//! encode times (owner.rs's quick search: the greedy owners and the least head delay, and
//! where encoder work runs past the body's end one pass of moving jobs). The body's order
//! stays up to which microbatch runs at each of its places: the microbatches of least
//! encoder work go where the body leaves their encoder least room (the first to need
//! features, and with a trainable encoder the last to give the gradient back); the batch is
//! also placed in the order it came, and the faster of the two kept. The per-batch plan is
//! validated and checked against device memory, and both it and the static plan are
//! simulated on the batch: the faster runs, so adaptive is never slower than static on any
//! batch.

use std::ops::Range;

use crate::algebra::{Fill, OwnerSpec, Skeleton};
use crate::built::Built;
use crate::cost::Costs;
use crate::cost::model::CostModel;
use crate::derive::owner::Effort;
use crate::derive::resolved::{Choices, Resolved};
use crate::derive::transpose::Room;
use crate::derive::{self, Derived, Placed};
use crate::ir::{PlanIr, interpret, validate};
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
    /// The microbatch the per-batch plan runs at each place of the static plan's body order
    /// (`0, 1, …` where it keeps the static order), whether or not that plan runs.
    pub order: Vec<u32>,
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
/// stages and their ranks, each rank's body order up to which microbatch runs where) is kept
/// from the static plan, and each batch re-places only the encoder's work, with the quick
/// owner search.
pub struct Adaptive<'b, 'p> {
    built: &'b Built<'p>,
    /// What batches are lowered on; `None` when there is no encoder placed in idle time.
    kept: Option<Kept>,
}

struct Kept {
    choices: Choices,
    placed: Placed,
    /// The room each place of the body order leaves the encoder, with the static plan's costs.
    room: Room,
}

impl<'b, 'p> Adaptive<'b, 'p> {
    pub fn new(built: &'b Built<'p>) -> Adaptive<'b, 'p> {
        let kept = batch_choices(&built.resolved).and_then(|choices| {
            let placed = derive::placed(&built.resolved.effective(), &built.costs, choices.chunks);
            let room = placed.room(&built.costs)?;
            Some(Kept { choices, placed, room })
        });
        Adaptive { built, kept }
    }

    /// The plan for one batch, given its image tokens per microbatch (a shorter list repeats,
    /// as `image_tokens` does).
    pub fn for_batch(&self, tokens: &[u64]) -> BatchPlan {
        let m = self.built.plan().batch.microbatches as usize;
        let batch = batch_of(self.built.plan(), tokens);
        let model = CostModel::new(&batch);
        let static_s = makespan(&self.built.derived, &model);
        let Some(kept) = &self.kept else {
            let order = (0..m as u32).collect();
            return BatchPlan { fallback: Some(Fallback::NoSlackEncoder), order, ..ran_static(static_s) };
        };
        let work: Vec<(f64, f64)> = (0..m as u32).map(|mb| kept.placed.encoder_work(&model, mb)).collect();
        // The room order weighs each place's room alone, where the places share the idle time:
        // some batches run faster in the order they came, so both are placed.
        let sorted = order(&kept.room, &work);
        let came: Vec<u32> = (0..m as u32).collect();
        let orders = if sorted == came { vec![sorted] } else { vec![sorted, came] };
        let tried = orders.into_iter().map(|order| placed(kept, (&batch, &model), order, static_s));
        // The fastest that can run; failing that, the first, to say why.
        let best = tried.reduce(|a, b| match (&a.fallback, &b.fallback) {
            (Some(_), None) => b,
            (None, None) if b.adaptive_s < a.adaptive_s => b,
            _ => a,
        });
        let mut plan = best.expect("at least the room order");
        if plan.fallback.is_none() && plan.adaptive_s.is_some_and(|s| s >= static_s) {
            (plan.fallback, plan.derived) = (Some(Fallback::NotFaster), None);
        }
        plan
    }
}

/// The batch placed with the microbatches in `order`: its lists when they are valid and fit
/// device memory, before it is weighed against the static plan's `static_s`.
fn placed(kept: &Kept, (batch, model): (&Plan, &CostModel), order: Vec<u32>, static_s: f64) -> BatchPlan {
    let derived = lowered(kept, batch, model, &order);
    if let Err(problems) = validate::validate(&derived.ir) {
        return BatchPlan { fallback: Some(Fallback::Invalid(problems)), order, ..ran_static(static_s) };
    }
    let simulated = report::simulate(&derived, model).report;
    let adaptive_s = Some(simulated.step_time_s);
    if !simulated.over_memory.is_empty() {
        let fallback = Some(Fallback::OverMemory(simulated.over_memory));
        return BatchPlan { fallback, adaptive_s, order, ..ran_static(static_s) };
    }
    BatchPlan { derived: Some(derived), fallback: None, static_s, adaptive_s, order }
}

/// A batch that runs the static plan, before saying why.
fn ran_static(static_s: f64) -> BatchPlan {
    BatchPlan { derived: None, fallback: None, static_s, adaptive_s: None, order: Vec::new() }
}

/// The batch's lists on the kept body, each place running the microbatch `order` gives it: the
/// body is lowered with the costs of the microbatch at each place, then each place named by
/// its microbatch.
fn lowered(kept: &Kept, batch: &Plan, model: &CostModel, order: &[u32]) -> Derived {
    let resolved = Resolved { plan: batch, choices: kept.choices.clone() };
    let costs = AtPlaces { costs: model, order };
    let mut derived = derive::lower_batch(kept.placed.clone(), &resolved, &costs, Effort::Quick);
    rename(&mut derived.ir, order);
    derived
}

/// The batch's costs with each place of the body order standing for the microbatch that runs
/// there.
struct AtPlaces<'a> {
    costs: &'a dyn Costs,
    order: &'a [u32],
}

impl Costs for AtPlaces<'_> {
    fn forward(&self, layers: Range<u64>, place: u32) -> f64 {
        self.costs.forward(layers, self.order[place as usize])
    }
    fn backward_input(&self, layers: Range<u64>, place: u32) -> f64 {
        self.costs.backward_input(layers, self.order[place as usize])
    }
    fn backward_weight(&self, layers: Range<u64>, place: u32) -> f64 {
        self.costs.backward_weight(layers, self.order[place as usize])
    }
    fn backward(&self, layers: Range<u64>, place: u32) -> f64 {
        self.costs.backward(layers, self.order[place as usize])
    }
    fn transfer(&self, layers: Range<u64>, place: u32, share: f64, from: u32, to: u32) -> f64 {
        self.costs.transfer(layers, self.order[place as usize], share, from, to)
    }
    fn send_occupies(&self) -> bool {
        self.costs.send_occupies()
    }
}

/// Which microbatch runs at each place of the body order: the microbatches by their encoder
/// work, least first, to the places by their room, least first. A place's room is the time
/// before the first body stage needs its features, in encodes of the batch's mean, and with
/// a trainable encoder at most the time from the gradient's return to the body's end, in
/// backwards of the batch's mean: whichever end is tighter. Microbatches of equal work keep
/// their order, so a batch of equal microbatches keeps the static order.
fn order(room: &Room, work: &[(f64, f64)]) -> Vec<u32> {
    let m = work.len();
    let mean = |part: fn(&(f64, f64)) -> f64| work.iter().map(part).sum::<f64>() / m.max(1) as f64;
    let (forward, backward) = (mean(|w| w.0), mean(|w| w.1));
    let of = |time: Option<f64>, mean: f64| time.filter(|_| mean > 0.0).map_or(f64::INFINITY, |t| t / mean);
    let places_room: Vec<f64> = (0..m).map(|k| of(room.before[k], forward).min(of(room.after[k], backward))).collect();
    let mut places: Vec<usize> = (0..m).collect();
    places.sort_by(|&a, &b| places_room[a].total_cmp(&places_room[b]).then(a.cmp(&b)));
    let size = |mb: usize| work[mb].0 + work[mb].1;
    let mut mbs: Vec<usize> = (0..m).collect();
    mbs.sort_by(|&a, &b| size(a).total_cmp(&size(b)).then(a.cmp(&b)));
    let mut order = vec![0; m];
    let mut taken = 0;
    for equal in mbs.chunk_by(|&a, &b| size(a) == size(b)) {
        let mut at = places[taken..taken + equal.len()].to_vec();
        at.sort_unstable();
        for (&k, &mb) in at.iter().zip(equal) {
            order[k] = mb as u32;
        }
        taken += equal.len();
    }
    order
}

/// `ir` lowered with each place of the body order standing for a microbatch, each place named
/// by the microbatch `order` runs there.
fn rename(ir: &mut PlanIr, order: &[u32]) {
    for rank in &mut ir.ranks {
        for instr in rank.instructions.iter_mut().chain(rank.prologue.iter_mut()) {
            if let Some(mb) = instr.mb.as_mut() {
                *mb = order[*mb as usize];
            }
        }
    }
    for owners in ir.owner.values_mut() {
        let by_place = owners.clone();
        for (k, owner) in by_place.into_iter().enumerate() {
            owners[order[k] as usize] = owner;
        }
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
