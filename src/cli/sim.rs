//! `mpipec sim PLAN [--json] [--compare]`

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;

use mpipe::explore::samples::Stats;
use mpipe::sim::report::Report;

use super::Global;
use super::progress::Ticker;
use super::report::Reporter;

fn seconds(t: f64) -> String {
    if t >= 1.0 { format!("{t:.3} s") } else { format!("{:.2} ms", t * 1e3) }
}

fn gib(b: f64) -> String {
    format!("{:.1} GiB", b / 1073741824.0)
}

/// What `mpipec sim` prints.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Table,
    /// report.json
    Json,
    /// `{"report": …, "ir": …}` on one line: the report and plan.json in one run.
    JsonWithIr,
}

pub fn run(global: &Global, plan: &Path, format: Format, compare: bool, samples: Option<(usize, u64)>) -> u8 {
    let mut reporter = Reporter::new(global);
    let source = match super::check::read_source(global, plan, &mut reporter) {
        Ok(source) => source,
        Err(status) => return status,
    };
    let (checked, spec) = match super::check::plan_of(source.check(global, &[]), plan, &mut reporter) {
        Ok(loaded) => loaded,
        Err(status) => return status,
    };
    let ticker = match super::estimate::estimate(global, &source, &spec, None).filter(|e| e.worth_a_notice()) {
        Some(estimate) => {
            eprintln!("{}", estimate.notice("simulating"));
            Ticker::start("deriving", estimate.seconds)
        }
        None => Ticker::idle(),
    };
    let built = match mpipe::driver::build(&spec) {
        Ok(b) => b,
        Err(invalid) => return super::build::internal_error(&invalid),
    };
    ticker.stage("simulating");
    let diagnostics = built.diagnostics();
    drop(ticker);
    reporter.emit(&diagnostics, &checked.program.sources);
    let simulation = built.evaluate();
    let mut report = simulation.report.clone();
    if compare {
        report.compare = mpipe::explore::compare::compare(&spec, report.step_time_s);
    }
    reporter.finish();
    let sampled = samples.map(|(n, seed)| sample(&spec, &built, n, seed, compare));
    match format {
        Format::Table => print_table(&spec, &built.derived.ir, simulation, &report, sampled.as_ref()),
        Format::Json | Format::JsonWithIr => print_json(&report, sampled.as_ref(), &built.derived.ir, format),
    }
    0
}

/// What `--samples` reports: the plan's static schedule on the drawn batches, the same plan with
/// its owner map re-derived for each batch (`owner adaptive`: the faster of the two per batch),
/// what deriving costs, and with `--compare` each baseline on the same batches.
#[derive(serde::Serialize)]
struct Sampled {
    #[serde(flatten)]
    plan: Stats,
    adaptive: Stats,
    /// Median wall-clock seconds of deriving, lowering and validating a plan for one drawn batch
    /// (up to `TIMED` of them): what re-deriving every step would cost.
    derive_s: f64,
    /// Median wall-clock seconds of `Adaptive::for_batch` over every drawn batch: what adaptive
    /// costs each step (the body it keeps is placed once, before).
    adaptive_derive_s: f64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    compare: Vec<mpipe::explore::samples::Baseline>,
}

/// How many drawn batches the derive time is the median of: a derivation of a large plan takes
/// seconds, and its spread is small.
const TIMED: usize = 3;

fn sample(spec: &mpipe::plan::Plan, built: &mpipe::built::Built, n: usize, seed: u64, compare: bool) -> Sampled {
    use mpipe::explore::samples;
    let batches = samples::draw(spec, n, seed);
    let derive = timed(batches.iter().take(TIMED), |tokens| {
        let _ = mpipe::driver::build(&mpipe::adaptive::batch_of(spec, tokens));
    });
    let mut steps = Vec::new();
    let adaptive = mpipe::adaptive::Adaptive::new(built);
    let adaptive_derive = timed(batches.iter(), |tokens| steps.push(adaptive.for_batch(tokens).step_s()));
    Sampled {
        plan: samples::static_schedule(spec, &built.derived, &batches),
        adaptive: samples::stats(steps),
        derive_s: derive,
        adaptive_derive_s: adaptive_derive,
        compare: if compare { samples::baselines(spec, &batches) } else { Vec::new() },
    }
}

/// The median wall-clock seconds of `work` over `batches`.
fn timed<'a>(batches: impl Iterator<Item = &'a Vec<u64>>, mut work: impl FnMut(&[u64])) -> f64 {
    let mut times: Vec<f64> = batches
        .map(|tokens| {
            let start = std::time::Instant::now();
            work(tokens);
            start.elapsed().as_secs_f64()
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

fn print_table(
    spec: &mpipe::plan::Plan,
    ir: &mpipe::ir::PlanIr,
    simulation: &mpipe::sim::report::Simulation,
    report: &Report,
    sampled: Option<&Sampled>,
) {
    let timeline = mpipe::sim::timeline::ascii(ir, &simulation.timeline, 96);
    print!("{}", human(spec, ir, report, &timeline));
    if let Some(s) = sampled {
        print!("{}", samples_table(s));
    }
}

/// The sampled batches' step times: the plan's static schedule first, then the plan adaptive,
/// then each baseline's static schedule, with its mean against the static plan's.
fn samples_table(s: &Sampled) -> String {
    let mut out = format!(
        "\nacross {} sampled batches:\n  {:<22} {:>10} {:>10} {:>10} {:>10}\n",
        s.plan.samples, "", "mean", "p50", "p95", "max"
    );
    let rows = [("this plan, static", &s.plan), ("this plan, adaptive", &s.adaptive)]
        .into_iter()
        .chain(s.compare.iter().map(|b| (b.name, &b.stats)));
    for (name, x) in rows {
        let _ = writeln!(
            out,
            "  {name:<22} {:>10} {:>10} {:>10} {:>10}{}",
            seconds(x.mean_s),
            seconds(x.p50_s),
            seconds(x.p95_s),
            seconds(x.max_s),
            if std::ptr::eq(x, &s.plan) { String::new() } else { format!("   {:.3}x", x.mean_s / s.plan.mean_s) }
        );
    }
    let _ = writeln!(
        out,
        "deriving a plan for one batch takes {} (median of up to {TIMED}); adaptive re-placing its encoder work {}",
        seconds(s.derive_s),
        seconds(s.adaptive_derive_s)
    );
    out
}

/// report.json (with the samples' statistics), alone or with the plan (`--ir`).
fn print_json(report: &Report, sampled: Option<&Sampled>, ir: &mpipe::ir::PlanIr, format: Format) {
    #[derive(serde::Serialize)]
    struct WithIr<'a> {
        report: &'a serde_json::Value,
        ir: &'a mpipe::ir::PlanIr,
    }
    let mut value = serde_json::to_value(report).expect("the report serialises");
    if let Some(s) = sampled {
        value["samples"] = serde_json::to_value(s).expect("stats serialise");
    }
    if format == Format::JsonWithIr {
        let mut out = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
        serde_json::to_writer(&mut out, &WithIr { report: &value, ir }).expect("the report and the plan serialise");
        let _ = writeln!(out);
    } else {
        println!("{}", serde_json::to_string_pretty(&value).expect("the report serialises"));
    }
}

/// The per-rank table. A column that is zero on every rank says nothing (encoder work and
/// spill of a plan without an encoder), so it is left out.
fn rank_table(ranks: &[mpipe::sim::report::RankReport]) -> String {
    use mpipe::sim::report::RankReport;
    type Column = (&'static str, usize, fn(&RankReport) -> String, fn(&RankReport) -> f64);
    let columns: [Column; 7] = [
        ("busy", 11, |x| seconds(x.busy_s), |x| x.busy_s),
        ("idle", 11, |x| seconds(x.idle_s), |x| x.idle_s),
        ("slack w_r", 11, |x| seconds(x.warmup_slack_s), |x| x.warmup_slack_s),
        ("encoder E_r", 12, |x| seconds(x.encoder_s), |x| x.encoder_s),
        ("spill", 8, |x| seconds(x.spill_s), |x| x.spill_s),
        ("peak memory", 13, |x| gib(x.peak_memory_bytes), |x| x.peak_memory_bytes),
        ("live mbs", 9, |x| x.peak_live_microbatches.to_string(), |x| f64::from(x.peak_live_microbatches)),
    ];
    let shown: Vec<&Column> = columns.iter().filter(|c| ranks.iter().any(|x| c.3(x) != 0.0)).collect();
    let mut out = String::from("\n rank");
    for (name, width, _, _) in &shown {
        let _ = write!(out, " {name:>width$}");
    }
    out.push('\n');
    for x in ranks {
        let _ = write!(out, " {:>4}", x.rank);
        for (_, width, cell, _) in &shown {
            let _ = write!(out, " {:>width$}", cell(x));
        }
        out.push('\n');
    }
    out
}

fn human(plan: &mpipe::plan::Plan, ir: &mpipe::ir::PlanIr, r: &Report, timeline: &str) -> String {
    let c = &plan.cluster;
    let schedule: Vec<String> = plan.schedule.iter().map(|s| s.skeleton.to_string()).collect();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{}: {} on {} × {} (pp {}, dp {}, tp {}), {} microbatches\n",
        ir.source,
        schedule.join(", "),
        c.devices,
        c.hardware.name,
        c.pp,
        c.dp,
        c.tp,
        plan.batch.microbatches
    );
    let _ = writeln!(
        out,
        "step time      {:>10}   lower bound {} (work / P {}, critical path {})",
        seconds(r.step_time_s),
        seconds(r.lower_bound_s),
        seconds(r.lower_bound_work_s),
        seconds(r.lower_bound_critical_path_s)
    );
    let _ = writeln!(out, "MFU            {:>9.1} %   bubble {:.1} %", 100.0 * r.mfu, 100.0 * r.bubble_fraction);
    if let (Some(floor), Some(relaxation)) = (r.transpose_floor_s, r.transpose_relaxation_s) {
        let _ = writeln!(
            out,
            "encoder bounds {:>10}   floor: body alone + first encode + last encoder backward, reached where the rest fits idle time; fluid relaxation {}",
            seconds(floor),
            seconds(relaxation)
        );
    }
    if let Some(first) = r.first_step_s {
        let _ = writeln!(out, "first step     {:>10}   its prologue encodes its own batch (lookahead)", seconds(first));
    }
    out.push_str(&rank_table(&r.ranks));
    let _ = writeln!(out, "\ntimeline ({})", mpipe::sim::timeline::ASCII_LEGEND);
    out.push_str(timeline);
    if !r.compare.is_empty() {
        let _ = writeln!(out, "\ncompared on the same model, cluster and cost model:");
        for b in &r.compare {
            let _ = writeln!(
                out,
                "  {:<22} {:>10}   speedup {:>5.2}x   {}",
                b.name,
                seconds(b.step_time_s),
                b.speedup,
                b.description
            );
        }
    }
    out
}
