//! `build`: a checked plan to the files of its output directory, all in memory. The CLI
//! writes them (atomically); nothing here touches the file system.

use crate::check::spec::Plan;
use crate::cost::UnitCosts;
use crate::derive::{self, Derived};
use crate::ir::{csv, text, validate};

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
    let costs = UnitCosts::new(plan);
    let derived = derive::derive(plan, &costs);
    validate::validate(&derived.ir).map_err(|problems| InvalidPlan { problems, dump: text::render(&derived.ir) })?;
    Ok(derived)
}

pub fn artifacts(derived: &Derived) -> Vec<Artifact> {
    let ir = &derived.ir;
    let mut out = vec![
        Artifact { path: "plan.json".into(), contents: ir.to_json() },
        Artifact { path: "plan.txt".into(), contents: text::render(ir) },
    ];
    if let Some(schedule) = csv::render(ir) {
        out.push(Artifact { path: "schedule.csv".into(), contents: schedule });
    }
    out
}
