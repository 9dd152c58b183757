//! `build`: a checked plan to the files of its output directory, all in memory. The CLI
//! writes them (atomically); nothing here touches the file system.

use crate::check::spec::Plan;
use crate::cost::Costs;
use crate::cost::model::CostModel;
use crate::derive::{self, Derived};
use crate::diagnostics::Diagnostic;
use crate::error::Error;
use crate::ir::{csv, text, validate};
use crate::sim::{self, report::Simulation, timeline};

/// One output file: its path relative to the output directory, and its bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct Artifact {
    pub path: String,
    pub contents: String,
}

/// Derivation produced lists the validator rejects: a compiler bug, reported with a dump.
#[derive(Clone, Debug)]
pub struct InvalidPlan {
    pub problems: Vec<String>,
    pub dump: String,
}

pub fn derive_checked(plan: &Plan) -> Result<Derived, InvalidPlan> {
    let costs = CostModel::new(plan);
    derive_with(plan, &costs)
}

/// Derives with the given costs and validates.
pub fn derive_with(plan: &Plan, costs: &dyn Costs) -> Result<Derived, InvalidPlan> {
    let derived = derive::derive(plan, costs);
    validate::validate(&derived.ir).map_err(|problems| InvalidPlan { problems, dump: text::render(&derived.ir) })?;
    Ok(derived)
}

/// The derived plan simulated with the plan's cost model.
pub fn simulate(plan: &Plan, derived: &Derived) -> Simulation {
    sim::report::simulate(derived, &CostModel::new(plan))
}

/// What the simulation has to say to the user: ranks that exceed their device's memory.
pub fn diagnostics(plan: &Plan, simulation: &Simulation) -> Vec<Diagnostic> {
    let hbm = plan.cluster.hardware.hbm_bytes;
    simulation
        .report
        .over_memory
        .iter()
        .map(|&(rank, peak)| {
            Error::OverMemory { rank, peak, hbm, hardware: plan.cluster.hardware.name.clone() }.to_diagnostic()
        })
        .collect()
}

/// Above this many instructions the timeline pictures are left out: nobody reads a trace of
/// millions of boxes, and writing one costs more than deriving the plan.
pub const PICTURE_INSTRUCTIONS: usize = 200_000;

/// Whether `artifacts` draws the timeline of `ir`.
pub fn pictured(ir: &crate::ir::PlanIr) -> bool {
    ir.ranks.iter().map(|r| r.instructions.len()).sum::<usize>() <= PICTURE_INSTRUCTIONS
}

pub fn artifacts(derived: &Derived, simulation: &Simulation) -> Vec<Artifact> {
    let ir = &derived.ir;
    let mut report = serde_json::to_string_pretty(&simulation.report).expect("the report serialises");
    report.push('\n');
    let mut out = vec![
        Artifact { path: "plan.json".into(), contents: ir.to_json() },
        Artifact { path: "plan.txt".into(), contents: text::render(ir) },
        Artifact { path: "report.json".into(), contents: report },
    ];
    if pictured(ir) {
        out.push(Artifact {
            path: "timeline.json".into(),
            contents: timeline::trace(ir, &simulation.timeline, &simulation.memory),
        });
        out.push(Artifact {
            path: "timeline.svg".into(),
            contents: timeline::svg(ir, &simulation.timeline, &ir.source),
        });
    }
    if let Some(schedule) = csv::render(ir) {
        out.push(Artifact { path: "schedule.csv".into(), contents: schedule });
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}
