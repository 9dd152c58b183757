//! The one way through the compiler: [`load`] a source and [`Loaded::check`] it (or [`compile`],
//! both at once) to a [`Compiled`] plan, [`build`] the plan once (derive, lower, validate) to a
//! [`Built`], and [`Built::evaluate`] it with the cost model it was derived with. Sweeps and
//! searches load once and check each variation of the loaded source; backends take the `Built`.

use std::sync::OnceLock;

use crate::cost::model::CostModel;
use crate::derive::{self, Derived};
use crate::diagnostics::{self, Diagnostic};
use crate::error::{Error, Warning};
use crate::ir::{text, validate};
use crate::plan::Plan;
use crate::resolve::loader::Loader;
use crate::resolve::{self, Program};
use crate::sim::report::{self, Simulation};

/// A source loaded and resolved, with its imports, but not yet checked: what a sweep or a
/// search checks again under each set of overrides without reading or parsing anything twice.
#[derive(Clone)]
pub struct Loaded {
    program: Program,
    errors: Vec<Error>,
}

/// Loads and resolves the file `key` (shown as `display`) whose bytes are given.
pub fn load(key: &str, display: &str, bytes: Vec<u8>, loader: &dyn Loader) -> Loaded {
    let (program, errors) = resolve::load(key, display, bytes, loader);
    Loaded { program, errors }
}

/// Loads, resolves and checks a source in one call.
pub fn compile(key: &str, display: &str, bytes: Vec<u8>, loader: &dyn Loader) -> Compiled {
    load(key, display, bytes, loader).check(loader, &[])
}

impl Loaded {
    /// Checks the source with `--set KEY=VALUE` overrides applied first; `loader` reads the
    /// data files the plan names.
    pub fn check(self, loader: &dyn Loader, overrides: &[(String, String)]) -> Compiled {
        let Loaded { mut program, mut errors } = self;
        if !overrides.is_empty() && program.modules[0].ast.is_some() {
            errors.extend(crate::overrides::apply(&mut program, overrides));
        }
        let (plan, check_errors) = crate::check::check(&program, Some(loader));
        errors.extend(check_errors);
        let mut diagnostics: Vec<Diagnostic> = errors.iter().map(Error::to_diagnostic).collect();
        diagnostics::sort(&mut diagnostics);
        let plan = plan.filter(|_| !diagnostics.iter().any(Diagnostic::is_error));
        Compiled { program, plan, diagnostics }
    }
}

/// A source and everything checking it found: the files read, the checked plan (when it is
/// one and has no errors) and every diagnostic, sorted by position.
pub struct Compiled {
    pub program: Program,
    pub plan: Option<Plan>,
    pub diagnostics: Vec<Diagnostic>,
}

impl Compiled {
    pub fn has_errors(&self) -> bool {
        self.diagnostics.iter().any(Diagnostic::is_error)
    }
}

/// Derivation produced lists the validator rejects: a compiler bug, reported with a dump.
#[derive(Clone, Debug)]
pub struct InvalidPlan {
    pub problems: Vec<String>,
    pub dump: String,
}

/// A checked plan built once: its cost model, and its per-rank lists derived with that model
/// and validated. The simulation is run the first time it is asked for and kept, so the
/// CLI, the backends and the diagnostics share one.
pub struct Built<'p> {
    pub plan: &'p Plan,
    pub costs: CostModel<'p>,
    pub derived: Derived,
    simulation: OnceLock<Simulation>,
}

/// Derives `plan` with its cost model and validates the lists.
pub fn build(plan: &Plan) -> Result<Built<'_>, InvalidPlan> {
    let costs = CostModel::new(plan);
    let derived = derive::derive(plan, &costs);
    validate::validate(&derived.ir).map_err(|problems| InvalidPlan { problems, dump: text::render(&derived.ir) })?;
    Ok(Built { plan, costs, derived, simulation: OnceLock::new() })
}

impl Built<'_> {
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
        let hardware = &self.plan.cluster.hardware;
        let ranks = self.evaluate().report.over_memory.clone();
        if ranks.is_empty() {
            return Vec::new();
        }
        let warning = Warning::OverMemory { ranks, hbm: hardware.hbm_bytes, hardware: hardware.name.clone() };
        vec![Error::Warning(warning).to_diagnostic()]
    }
}
