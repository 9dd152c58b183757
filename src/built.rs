//! A checked plan built once: derived with its cost model, lowered and validated, and simulated
//! on first use. What the backends and the outputs take; [`crate::driver`] makes it.

use std::sync::OnceLock;

use crate::cost::model::CostModel;
use crate::derive::nearest::TargetForm;
use crate::derive::resolved::Resolved;
use crate::derive::{self, Derived, choose};
use crate::diagnostics::Diagnostic;
use crate::error::{Error, Warning};
use crate::ir::{text, validate};
use crate::plan::Plan;
use crate::sim::report::{self, Simulation};

/// Derive chose what the checker's rules reject, or produced lists the validator rejects: a
/// compiler bug, reported with a dump (the choices, or the lists).
#[derive(Clone, Debug)]
pub struct InvalidPlan {
    pub problems: Vec<String>,
    pub dump: String,
}

/// A checked plan built once: its cost model, the plan resolved with that model (the plan as
/// written and every choice derive made), and its per-rank lists lowered from it and
/// validated. The simulation is run the first time it is asked for and kept, so the
/// CLI, the backends and the diagnostics share one.
pub struct Built<'p> {
    pub resolved: Resolved<'p>,
    pub costs: CostModel<'p>,
    pub derived: Derived,
    simulation: OnceLock<Simulation>,
}

/// Chooses what `plan` leaves open with its cost model, lowers the resolved plan and validates
/// the lists.
pub fn build(plan: &Plan) -> Result<Built<'_>, InvalidPlan> {
    let costs = CostModel::new(plan);
    let resolved = choose::choose(plan, &costs);
    lowered(resolved, costs)
}

/// The built plan in `form`, a target's nearest form of it: chosen for that form, lowered and
/// validated.
pub fn nearest<'p>(built: &Built<'p>, form: TargetForm) -> Result<Built<'p>, InvalidPlan> {
    let resolved = choose::nearest(&built.resolved, form, &built.costs);
    lowered(resolved, CostModel::new(built.plan()))
}

/// Checks a resolved plan with the checker's rules, lowers it with the model it was chosen
/// with, and validates the lists. Either finding something is a compiler bug.
fn lowered<'p>(resolved: Resolved<'p>, costs: CostModel<'p>) -> Result<Built<'p>, InvalidPlan> {
    let problems = resolved.problems();
    if !problems.is_empty() {
        return Err(InvalidPlan {
            problems: problems.iter().map(|e| format!("the resolved plan: {}", e.to_diagnostic().message)).collect(),
            dump: resolved.describe().join("\n"),
        });
    }
    let derived = derive::lower(&resolved, &costs);
    validate::validate(&derived.ir).map_err(|problems| InvalidPlan {
        problems: problems.iter().map(ToString::to_string).collect(),
        dump: text::render(&derived.ir),
    })?;
    Ok(Built { resolved, costs, derived, simulation: OnceLock::new() })
}

impl<'p> Built<'p> {
    /// The plan as written.
    pub fn plan(&self) -> &'p Plan {
        self.resolved.plan
    }

    /// The lists simulated with the cost model they were derived with.
    pub fn evaluate(&self) -> &Simulation {
        self.simulation.get_or_init(|| report::simulate(&self.derived, &self.costs))
    }

    /// The lists and their simulation, for a caller done with the build.
    pub fn into_simulated(self) -> (Derived, Simulation) {
        self.evaluate();
        let simulation = self.simulation.into_inner().expect("evaluated above");
        (self.derived, simulation)
    }

    /// What the simulation has to say to the user: ranks that exceed their device's memory.
    pub fn diagnostics(&self) -> Vec<Diagnostic> {
        let hardware = &self.plan().cluster.hardware;
        let ranks = self.evaluate().report.over_memory.clone();
        if ranks.is_empty() {
            return Vec::new();
        }
        let warning = Warning::OverMemory { ranks, hbm: hardware.hbm_bytes, hardware: hardware.name.clone() };
        vec![Error::Warning(warning).to_diagnostic()]
    }
}
