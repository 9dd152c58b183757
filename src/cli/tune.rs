//! `mpipec tune PLAN [--devices N] [--objective step_time|mfu] [--memory-limit SIZE] [--top K] [-o FILE]`

use std::path::Path;

use mpipe::driver::Built;
use mpipe::explore::samples;
use mpipe::explore::tune::{self, Objective, Outcome, Scored};
use mpipe::plan::Plan;
use mpipe::sim::report::Report;

use super::check::Source;
use super::report::Reporter;
use super::{EXIT_INPUT, EXIT_USAGE, Global};

pub struct Options<'a> {
    pub devices: Option<u64>,
    pub objective: Objective,
    pub memory_limit: Option<f64>,
    pub top: usize,
    pub out: Option<&'a Path>,
    pub seed: u64,
    pub per_batch: Option<usize>,
}

pub fn parse_bytes(arg: &str) -> Result<f64, String> {
    let arg = arg.trim();
    let split = arg.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(arg.len());
    let (n, unit) = arg.split_at(split);
    let n: f64 = n.parse().map_err(|_| format!("expected a size such as `64GiB`, found `{arg}`"))?;
    match mpipe::units::lookup(unit) {
        Some((mpipe::units::Dimension::Bytes, f)) => Ok(n * f),
        _ => Err(format!("expected a size such as `64GiB` or `80GB`, found `{arg}`")),
    }
}

pub fn run(global: &Global, plan: &Path, opts: &Options) -> u8 {
    let mut reporter = Reporter::new(global);
    let source = match super::check::read_source(global, plan, &mut reporter) {
        Ok(source) => source,
        Err(status) => return status,
    };
    let (_, spec) = match super::check::plan_of(source.check(global, &[]), plan, &mut reporter) {
        Ok(checked) => checked,
        Err(status) => return status,
    };
    let Ok(built) = mpipe::driver::build(&spec) else {
        reporter.plain_error("internal error: the input plan does not derive");
        reporter.finish();
        return super::build::EXIT_INTERNAL;
    };
    if let Some(n) = opts.per_batch {
        reporter.finish();
        print_per_batch(&built, n, opts.seed);
        return 0;
    }
    let input = &built.evaluate().report;
    let devices = opts.devices.unwrap_or(spec.cluster.devices);
    let limit = opts.memory_limit.unwrap_or(spec.cluster.hardware.hbm_bytes);
    let candidates = tune::space(&spec, devices);
    if candidates.is_empty() {
        reporter.plain_error(&format!(
            "no candidate runs on {}: a candidate is a pipeline of at least 2 stages and at most the model's {} layers",
            mpipe::error::count(devices, "device"),
            spec.model.layers()
        ));
        reporter.finish();
        return EXIT_INPUT;
    }
    let outcome = search(global, &source, candidates, input, limit, opts);
    reporter.finish();
    print_ranking(&outcome, &spec, input, (devices, limit), opts.top);
    if outcome.ranked.is_empty() {
        eprintln!("error: no candidate fits the memory limit");
        return EXIT_INPUT;
    }
    match opts.out {
        Some(out) => write_best(plan, out, &outcome.ranked[0]),
        None => 0,
    }
}

/// The one static schedule against a schedule derived for each sampled batch.
fn print_per_batch(built: &Built, n: usize, seed: u64) {
    let batches = samples::draw(built.plan(), n, seed);
    let fixed = samples::static_schedule(built.plan(), &built.derived, &batches);
    let adapted = samples::per_batch(built.plan(), &batches);
    println!("{} batches (seed {seed}):", fixed.samples);
    println!(
        "  static schedule      mean {:.3} s  p50 {:.3} s  p95 {:.3} s  max {:.3} s",
        fixed.mean_s, fixed.p50_s, fixed.p95_s, fixed.max_s
    );
    println!(
        "  per-batch optimum    mean {:.3} s  p50 {:.3} s  p95 {:.3} s  max {:.3} s",
        adapted.mean_s, adapted.p50_s, adapted.p95_s, adapted.max_s
    );
    println!(
        "  the static schedule costs {:.1} % over re-deriving every batch",
        100.0 * (fixed.mean_s / adapted.mean_s - 1.0)
    );
}

/// The search over `candidates` within `limit` bytes a device, each candidate
/// checked from the source read once, then built and evaluated once; the input plan (no
/// overrides) is the one already evaluated.
fn search(
    global: &Global,
    source: &Source,
    candidates: Vec<tune::Overrides>,
    input: &Report,
    limit: f64,
    opts: &Options,
) -> Outcome {
    let fits = |r: Report| {
        let peak = r.ranks.iter().map(|x| x.peak_memory_bytes).fold(0.0, f64::max);
        (peak <= limit).then_some(r)
    };
    let mut progress = super::progress::Progress::new("tuning");
    tune::search(
        candidates,
        opts.objective,
        opts.seed,
        |o| {
            if o.is_empty() {
                return fits(input.clone());
            }
            let p = source.check(global, o).plan?;
            fits(mpipe::driver::build(&p).ok()?.into_simulated().1.report)
        },
        |phase, done, total| progress.update_phase(phase, done, total),
    )
}

/// The summary of the search and its best `top` candidates, against the input plan where it
/// runs on the same number of devices.
fn print_ranking(outcome: &Outcome, spec: &Plan, input: &Report, (devices, limit): (u64, f64), top: usize) {
    println!(
        "{} candidates for {devices} devices, {} evaluated ({}), {} valid and within {:.1} GiB",
        outcome.space,
        outcome.evaluated,
        if outcome.exhaustive { "exhaustive" } else { "sampled, then refined" },
        outcome.ranked.len(),
        limit / 1073741824.0
    );
    if let Some(gap) = outcome.gap {
        println!("optimality gap: the best is within {:.1} % of the smallest lower bound seen", 100.0 * gap);
    }
    let reference = tune::reference(spec, input, devices);
    match reference {
        Some(_) => println!("input plan: {:.3} s, MFU {:.1} %\n", input.step_time_s, 100.0 * input.mfu),
        None => println!(
            "input plan: {:.3} s, MFU {:.1} % on {} devices; no speedups: the candidates run on {devices}\n",
            input.step_time_s,
            100.0 * input.mfu,
            spec.cluster.devices
        ),
    }
    for (i, s) in outcome.ranked.iter().take(top).enumerate() {
        println!("{}", candidate_line(i + 1, s, reference));
        if let Some(r) = reference.filter(|_| !s.overrides.is_empty()) {
            println!("      why: {}", tune::reasons(&s.report, r));
        }
    }
}

/// One ranked candidate: its step, MFU, speedup and the shape its overrides give.
fn candidate_line(rank: usize, s: &Scored, reference: Option<&Report>) -> String {
    let (step, mfu) = (s.report.step_time_s, 100.0 * s.report.mfu);
    if s.overrides.is_empty() {
        return format!("{rank:>2}. {step:.3} s  MFU {mfu:>4.1} %  1.00x  the input plan as written");
    }
    let get = |k: &str| s.overrides.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str()).unwrap_or("");
    let speedup = reference.map_or("   -  ".to_string(), |r| format!("{:.2}x", r.step_time_s / step));
    let owner = if get("owner").is_empty() { String::new() } else { format!(" owner {};", get("owner")) };
    format!(
        "{rank:>2}. {step:.3} s  MFU {mfu:>4.1} %  {speedup}  pp {} dp {} tp {} mbs {} M {}  cut {}; schedule {};{owner}",
        get("cluster.pp"),
        get("cluster.dp"),
        get("cluster.tp"),
        get("batch.micro_batch_size"),
        get("batch.microbatches"),
        get("cut"),
        get("schedule"),
    )
}

/// Writes the plan file with the best candidate's overrides applied to its text.
fn write_best(plan: &Path, out: &Path, best: &Scored) -> u8 {
    let text = match std::fs::read_to_string(plan) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: cannot read `{}`: {e}", plan.display());
            return EXIT_USAGE;
        }
    };
    match mpipe::edit::apply(&text, &best.overrides) {
        Ok(tuned) => {
            if let Err(e) = std::fs::write(out, tuned) {
                eprintln!("error: cannot write `{}`: {e}", out.display());
                return EXIT_USAGE;
            }
            eprintln!("wrote the best plan to {}", out.display());
            0
        }
        Err(e) => {
            eprintln!("error: internal error: cannot write the tuned plan: {}", e.to_diagnostic().message);
            super::build::EXIT_INTERNAL
        }
    }
}
