//! `mpipec build PLAN -o OUT/`

use std::path::{Path, PathBuf};

use mpipe::driver::Make;
use mpipe::outputs::PlanFormat;

use super::report::Reporter;
use super::{EXIT_INPUT, EXIT_USAGE, Global, output};

pub const EXIT_INTERNAL: u8 = 101;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PlanFormatArg {
    Readable,
    Compact,
    Auto,
}

impl From<&PlanFormatArg> for PlanFormat {
    fn from(arg: &PlanFormatArg) -> PlanFormat {
        match arg {
            PlanFormatArg::Readable => PlanFormat::Readable,
            PlanFormatArg::Compact => PlanFormat::Compact,
            PlanFormatArg::Auto => PlanFormat::Auto,
        }
    }
}

/// What to build, besides the plan: `mpipec build`'s options.
pub struct Request<'a> {
    pub out: &'a Path,
    pub force: bool,
    pub targets: &'a [String],
    pub nearest: bool,
    pub format: PlanFormat,
}

pub fn run(global: &Global, plan: &Path, request: &Request) -> u8 {
    match build(global, plan, request, &mut Reporter::new(global)) {
        Ok(names) => {
            eprintln!("wrote {} ({})", request.out.display(), names.join(", "));
            0
        }
        Err(status) => status,
    }
}

/// The whole build, from reading the plan to the last output in place: what `mpipec build`
/// runs and `mpipec bench` times. `Ok` holds the files written.
pub fn build(global: &Global, plan: &Path, request: &Request, reporter: &mut Reporter) -> Result<Vec<String>, u8> {
    let (checked, plan_spec) = super::check::load_plan(global, plan, reporter)?;
    let requests = match mpipe::backend::requests(&plan_spec, request.targets, request.nearest) {
        Ok(r) => r,
        Err(unknown) => {
            reporter.plain_error(&format!(
                "unknown target `{unknown}`: targets are {}",
                mpipe::plan::Target::NAMES.join(", ")
            ));
            reporter.finish();
            return Err(EXIT_USAGE);
        }
    };
    let products = mpipe::driver::produce(&plan_spec, &requests, Make::Files, &|| true)
        .map_err(|invalid| internal_error(&invalid))?
        .expect("a build nobody cancels runs to the end");
    reporter.emit(&products.diagnostics(), &checked.program.sources);
    // Every target is emitted (or refused) before anything is written: one that cannot run
    // the plan leaves the output directory as it was.
    if products.refused() {
        reporter.finish();
        eprintln!("nothing was written to {}", request.out.display());
        return Err(EXIT_INPUT);
    }
    let files = products.files(request.format);
    let names: Vec<String> = files.iter().map(|f| f.path.clone()).collect();
    if let Err(message) = output::write_atomically(request.out, files, request.force) {
        reporter.plain_error(&message);
        reporter.finish();
        return Err(EXIT_USAGE);
    }
    reporter.finish();
    Ok(names)
}

/// A derived plan the validator rejected: a compiler bug, reported with a dump.
pub fn internal_error(invalid: &mpipe::driver::InvalidPlan) -> u8 {
    eprintln!(
        "error: internal compiler error: the derived plan failed validation ({} problems)",
        invalid.problems.len()
    );
    for p in invalid.problems.iter().take(20) {
        eprintln!("  - {p}");
    }
    eprintln!(
        "note: this is a bug in mpipec {}; nothing was written. The derived lists follow:\n{}",
        mpipe::VERSION,
        invalid.dump
    );
    EXIT_INTERNAL
}

pub fn default_out() -> PathBuf {
    PathBuf::from("out")
}
