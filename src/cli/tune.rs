//! `mpipec tune PLAN [--devices N] [--objective step_time|mfu] [--memory-limit SIZE] [--top K] [-o FILE]`

use std::path::Path;

use mpipe::explore::tune::{self, Objective};

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
    let (_, spec) = match super::check::load_plan(global, plan, &mut reporter) {
        Ok(loaded) => loaded,
        Err(status) => return status,
    };
    let input = mpipe::build::derive_checked(&spec).map(|d| mpipe::build::simulate(&spec, &d).report);
    let Ok(input) = input else {
        reporter.plain_error("internal error: the input plan does not derive");
        reporter.finish();
        return super::build::EXIT_INTERNAL;
    };
    if let Some(n) = opts.per_batch {
        let derived = mpipe::build::derive_checked(&spec).expect("derived above");
        let batches = mpipe::explore::samples::draw(&spec, n.max(1), opts.seed);
        let fixed = mpipe::explore::samples::static_schedule(&spec, &derived, &batches);
        let adapted = mpipe::explore::samples::per_batch(&spec, &batches);
        reporter.finish();
        println!("{} batches (seed {}):", fixed.samples, opts.seed);
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
        return 0;
    }
    let devices = opts.devices.unwrap_or(spec.cluster.devices);
    let limit = opts.memory_limit.unwrap_or(spec.cluster.hardware.hbm_bytes);
    let candidates = tune::space(&spec, devices);
    let mut progress = super::progress::Progress::new("tuning");
    let outcome = tune::search(
        candidates,
        opts.objective,
        opts.seed,
        |o| {
            let c = super::check::load_with(global, plan, o).ok()?;
            let p = c.plan?;
            let d = mpipe::build::derive_checked(&p).ok()?;
            let r = mpipe::build::simulate(&p, &d).report;
            let peak = r.ranks.iter().map(|x| x.peak_memory_bytes).fold(0.0, f64::max);
            (peak <= limit).then_some(r)
        },
        |done, total| progress.update(done, total),
    );
    drop(progress);
    reporter.finish();
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
    let reference = tune::reference(&spec, &input, devices);
    match reference {
        Some(_) => println!("input plan: {:.3} s, MFU {:.1} %\n", input.step_time_s, 100.0 * input.mfu),
        None => println!(
            "input plan: {:.3} s, MFU {:.1} % on {} devices; no speedups: the candidates run on {devices}\n",
            input.step_time_s,
            100.0 * input.mfu,
            spec.cluster.devices
        ),
    }
    for (i, s) in outcome.ranked.iter().take(opts.top).enumerate() {
        if s.overrides.is_empty() {
            println!(
                "{:>2}. {:.3} s  MFU {:>4.1} %  1.00x  the input plan as written",
                i + 1,
                s.report.step_time_s,
                100.0 * s.report.mfu
            );
            continue;
        }
        let get = |k: &str| s.overrides.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str()).unwrap_or("");
        let speedup =
            reference.map_or("   -  ".to_string(), |r| format!("{:.2}x", r.step_time_s / s.report.step_time_s));
        println!(
            "{:>2}. {:.3} s  MFU {:>4.1} %  {speedup}  pp {} dp {} tp {} mbs {} M {}  cut {}; schedule {};{}",
            i + 1,
            s.report.step_time_s,
            100.0 * s.report.mfu,
            get("cluster.pp"),
            get("cluster.dp"),
            get("cluster.tp"),
            get("batch.micro_batch_size"),
            get("batch.microbatches"),
            get("cut"),
            get("schedule"),
            if get("owner").is_empty() { String::new() } else { format!(" owner {};", get("owner")) }
        );
        if let Some(r) = reference {
            println!("      why: {}", tune::reasons(&s.report, r));
        }
    }
    if outcome.ranked.is_empty() {
        eprintln!("error: no candidate fits the memory limit");
        return EXIT_INPUT;
    }
    if let Some(out) = opts.out {
        let text = match std::fs::read_to_string(plan) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("error: cannot read `{}`: {e}", plan.display());
                return EXIT_USAGE;
            }
        };
        let best = &outcome.ranked[0];
        match mpipe::edit::apply(&text, &best.overrides) {
            Ok(tuned) => {
                if let Err(e) = std::fs::write(out, tuned) {
                    eprintln!("error: cannot write `{}`: {e}", out.display());
                    return EXIT_USAGE;
                }
                eprintln!("wrote the best plan to {}", out.display());
            }
            Err(e) => {
                eprintln!("error: internal error: cannot write the tuned plan: {}", e.to_diagnostic().message);
                return super::build::EXIT_INTERNAL;
            }
        }
    }
    0
}
