//! A checked plan built once: derived with its cost model, lowered and validated, and simulated
//! on first use. What the backends and the outputs take; [`crate::driver`] makes it.

use std::sync::OnceLock;

use crate::cost::model::CostModel;
use crate::derive::resolved::Resolved;
use crate::derive::{self, Derived, choose};
use crate::diagnostics::Diagnostic;
use crate::error::{Error, Warning};
use crate::ir::{text, validate};
use crate::plan::Plan;
use crate::sim::report::{self, Simulation};

/// Derivation produced lists the validator rejects: a compiler bug, reported with a dump.
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
        self.evaluate()
            .report
            .over_memory
            .iter()
            .map(|&(rank, peak)| {
                Error::Warning(Warning::OverMemory {
                    rank,
                    peak,
                    hbm: hardware.hbm_bytes,
                    hardware: hardware.name.clone(),
                })
                .to_diagnostic()
            })
            .collect()
    }
}
