//! `mpipec build PLAN -o OUT/`

use std::path::{Path, PathBuf};

use mpipe::driver::Make;
use mpipe::outputs::PlanFormat;

use super::progress::Ticker;
use super::report::Reporter;
use super::{EXIT_INPUT, EXIT_USAGE, Global, estimate, output};

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
    /// Write past [`estimate::LARGE_OUTPUT`] bytes.
    pub large_output: bool,
}

pub fn run(global: &Global, plan: &Path, request: &Request) -> u8 {
    match build(global, plan, request, &mut Reporter::new(global)) {
        Ok(names) => {
            eprintln!("wrote {} ({})", request.out.display(), summary(&names));
            0
        }
        Err(status) => status,
    }
}

/// The files written, as the `wrote` line names them: a folder two levels down holding more
/// than four of them (the torch target's Python package) as `folder/ (N files)` in the place
/// of its first file, so the line stays one a person reads.
fn summary(names: &[String]) -> String {
    let folder = |name: &str| {
        let parts: Vec<&str> = name.splitn(3, '/').collect();
        (parts.len() == 3).then(|| format!("{}/{}/", parts[0], parts[1]))
    };
    let mut counts = std::collections::BTreeMap::new();
    for f in names.iter().filter_map(|n| folder(n)) {
        *counts.entry(f).or_insert(0usize) += 1;
    }
    let mut shown = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for name in names {
        match folder(name).filter(|f| counts[f] > 4) {
            Some(f) if seen.insert(f.clone()) => shown.push(format!("{f} ({} files)", counts[&f])),
            Some(_) => {}
            None => shown.push(name.clone()),
        }
    }
    shown.join(", ")
}

/// The whole build, from reading the plan to the last output in place: what `mpipec build`
/// runs and `mpipec bench` times. `Ok` holds the files written.
pub fn build(global: &Global, plan: &Path, request: &Request, reporter: &mut Reporter) -> Result<Vec<String>, u8> {
    let source = super::check::read_source(global, plan, reporter)?;
    let (checked, plan_spec) = super::check::plan_of(source.check(global, &[]), plan, reporter)?;
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
    let ticker = guard(global, &source, &plan_spec, request, reporter)?;
    let products = mpipe::driver::produce(&plan_spec, &requests, Make::Files, &|| true)
        .map_err(|invalid| internal_error(&invalid))?
        .expect("a build nobody cancels runs to the end");
    ticker.stage("writing");
    ticker.aside(|| reporter.emit(&products.diagnostics(), &checked.program.sources));
    // Every target is emitted (or refused) before anything is written: one that cannot run
    // the plan leaves the output directory as it was.
    if products.refused() {
        reporter.finish();
        eprintln!("nothing was written to {}", request.out.display());
        return Err(EXIT_INPUT);
    }
    let mut files = products.files(request.format);
    files.extend(adaptive_command(global, plan, &plan_spec, &requests));
    files.sort_by(|a, b| a.path.cmp(&b.path));
    let names: Vec<String> = files.iter().map(|f| f.path.clone()).collect();
    let written = output::write_atomically(request.out, files, request.force);
    drop(ticker);
    if let Err(message) = written {
        reporter.plain_error(&message);
        reporter.finish();
        return Err(EXIT_USAGE);
    }
    reporter.finish();
    Ok(names)
}

/// For the torch target of an `owner adaptive` plan, `torch/adaptive.json`: the `mpipec adapt`
/// command its launcher starts for the per-batch plans (this binary, the plan's absolute path
/// and the command line's `--set`s, which only the CLI knows), and the plan's largest image
/// count, which the miniature scales its changing image sizes to.
fn adaptive_command(
    global: &Global,
    path: &Path,
    plan: &mpipe::plan::Plan,
    requests: &[mpipe::backend::Request],
) -> Option<mpipe::outputs::Output<'static>> {
    requests.iter().find(|r| r.target == mpipe::plan::Target::Torch)?;
    let command = super::adapt::command(global, path, plan, &[])?;
    let tokens = plan.batch.image_tokens.iter().copied().max().unwrap_or(0);
    let json = serde_json::json!({ "adaptive": command, "plan_image_tokens": tokens });
    let contents = serde_json::to_string_pretty(&json).expect("json values serialise") + "\n";
    Some(mpipe::outputs::Artifact { path: "torch/adaptive.json".into(), contents }.into())
}

/// What a large plan will cost, said before it is spent: a build past the output limit
/// without `--large-output` is refused; one past the notice thresholds says its size and
/// expected time, and its progress is drawn on a terminal by the ticker returned.
fn guard(
    global: &Global,
    source: &super::check::Source,
    plan: &mpipe::plan::Plan,
    request: &Request,
    reporter: &mut Reporter,
) -> Result<Ticker, u8> {
    let Some(estimate) = estimate::estimate(global, source, plan, Some(request.format)) else {
        return Ok(Ticker::idle());
    };
    if let Some(refusal) = estimate.refusal().filter(|_| !request.large_output) {
        reporter.plain_error(&refusal);
        reporter.finish();
        return Err(EXIT_USAGE);
    }
    if !estimate.worth_a_notice() {
        return Ok(Ticker::idle());
    }
    eprintln!("{}", estimate.notice("building"));
    Ok(Ticker::start("building", estimate.seconds))
}

/// A resolved plan the checker rejected, or derived lists the validator rejected: a compiler
/// bug, reported with a dump (the choices, or the lists).
pub fn internal_error(invalid: &mpipe::driver::InvalidPlan) -> u8 {
    eprintln!(
        "error: internal compiler error: the derived plan failed validation ({} problems)",
        invalid.problems.len()
    );
    for p in invalid.problems.iter().take(20) {
        eprintln!("  - {p}");
    }
    eprintln!(
        "note: this is a bug in mpipec {}; nothing was written. What was derived follows:\n{}",
        mpipe::VERSION,
        invalid.dump
    );
    EXIT_INTERNAL
}

pub fn default_out() -> PathBuf {
    PathBuf::from("out")
}
