//! The one way through the compiler: [`load`] a source and [`Loaded::check`] it (or [`compile`],
//! both at once) to a [`Compiled`] plan, [`build`] the plan once (derive, lower, validate) to a
//! [`Built`], and [`produce`] what a build writes and reports: the built plan, each target's
//! answer (its files, of the plan or of its nearest native plan, or why it cannot run it), and
//! the outputs ([`Products::files`]). The CLI, the language server, the tests and the benches
//! all go through [`produce`]. Sweeps and searches load once and check each variation of the
//! loaded source.

use crate::backend::native::{self, Verdict};
use crate::backend::{self, Request, Target};
use crate::diagnostics::{self, Diagnostic};
use crate::error::{BackendError, Error};
use crate::outputs::{self, Artifact, Output, PlanFormat};
use crate::plan::Plan;
use crate::resolve::loader::Loader;
use crate::resolve::{self, Program};

pub use crate::built::{Built, InvalidPlan, build};

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

/// Whether a build makes the targets' files or only says what they would report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Make {
    Files,
    Diagnostics,
}

/// One target's answer: its files (with [`Make::Files`]) and warnings, of the plan as written
/// or of its nearest native plan, or the diagnostics that refuse the plan.
pub struct Answer<'p> {
    pub target: Target,
    pub artifacts: Vec<Artifact>,
    pub diagnostics: Vec<Diagnostic>,
    pub refused: bool,
    /// The plan built in the target's nearest form, which the files are of; `None` for the
    /// plan as written.
    pub nearest: Option<Built<'p>>,
}

/// Everything a build makes of a checked plan: the built plan, what its simulation reports and
/// each target's answer, in the order asked.
pub struct Products<'p> {
    pub built: Built<'p>,
    pub answers: Vec<Answer<'p>>,
}

impl Products<'_> {
    /// What the build reports beyond the check: the simulation's diagnostics, then each
    /// target's.
    pub fn diagnostics(&self) -> Vec<Diagnostic> {
        let mut all = self.built.diagnostics();
        all.extend(self.answers.iter().flat_map(|a| a.diagnostics.iter().cloned()));
        all
    }

    /// Whether some target cannot run the plan: then nothing is to be written.
    pub fn refused(&self) -> bool {
        self.answers.iter().any(|a| a.refused)
    }

    /// Every file of the build, sorted by path: the plan's outputs and the targets' files.
    pub fn files(&self, format: PlanFormat) -> Vec<Output<'_>> {
        let mut files = outputs::outputs(&self.built, format);
        files.extend(self.answers.iter().flat_map(|a| a.artifacts.iter().cloned().map(Output::from)));
        files.sort_by(|a, b| a.path.cmp(&b.path));
        files
    }
}

/// Builds `plan` and answers each of `requests`. `wanted` is asked before the build, the
/// simulation and each target; `Ok(None)` as soon as it says no, so a caller whose input has
/// changed (the language server) stops paying for an answer it would throw away.
pub fn produce<'p>(
    plan: &'p Plan,
    requests: &[Request],
    make: Make,
    wanted: &dyn Fn() -> bool,
) -> Result<Option<Products<'p>>, InvalidPlan> {
    if !wanted() {
        return Ok(None);
    }
    let built = build(plan)?;
    if !wanted() {
        return Ok(None);
    }
    built.evaluate();
    let mut answers = Vec::with_capacity(requests.len());
    for &request in requests {
        if !wanted() {
            return Ok(None);
        }
        answers.push(answer(request, &built, make));
    }
    Ok(Some(Products { built, answers }))
}

/// What `request.target` makes of the built plan: its files as written, or those of its
/// nearest native plan (built here, with warning W0004 saying what changed and how the step
/// moved), or the diagnostics that refuse the plan.
fn answer<'p>(request: Request, built: &Built<'p>, make: Make) -> Answer<'p> {
    let files = |b: &Built| match make {
        Make::Files => backend::artifacts(request.target, b),
        Make::Diagnostics => Vec::new(),
    };
    let refuse = |diagnostic| Answer {
        target: request.target,
        artifacts: Vec::new(),
        diagnostics: vec![diagnostic],
        refused: true,
        nearest: None,
    };
    let form = match native::verdict(request, built) {
        Verdict::AsWritten => {
            return Answer {
                target: request.target,
                artifacts: files(built),
                diagnostics: Vec::new(),
                refused: false,
                nearest: None,
            };
        }
        Verdict::Impossible(diagnostic) => return refuse(diagnostic),
        Verdict::Nearest(form) => *form,
    };
    let span = form.changes[0].span;
    let changes = form.changes.iter().map(|c| c.what.clone()).collect();
    let nearest = match crate::built::nearest(built, form) {
        Ok(nearest) => nearest,
        Err(invalid) => return refuse(native::invalid_nearest(request, span, &invalid.problems)),
    };
    let step = (built.evaluate().report.step_time_s, nearest.evaluate().report.step_time_s);
    let name = request.target.name();
    let warning = Error::Backend(BackendError::NearestEmitted { span, target: request.span, name, changes, step })
        .to_diagnostic();
    let artifacts = files(&nearest);
    Answer { target: request.target, artifacts, diagnostics: vec![warning], refused: false, nearest: Some(nearest) }
}
