//! `mpipec sim PLAN [--json] [--compare]`

use std::fmt::Write as _;
use std::path::Path;

use mpipe::sim::report::Report;

use super::Global;
use super::report::Reporter;

fn seconds(t: f64) -> String {
    if t >= 1.0 { format!("{t:.3} s") } else { format!("{:.2} ms", t * 1e3) }
}

fn gib(b: f64) -> String {
    format!("{:.1} GiB", b / 1073741824.0)
}

pub fn run(global: &Global, plan: &Path, json: bool, compare: bool, samples: Option<(usize, u64)>) -> u8 {
    let mut reporter = Reporter::new(global);
    let (checked, spec) = match super::check::load_plan(global, plan, &mut reporter) {
        Ok(loaded) => loaded,
        Err(status) => return status,
    };
    let derived = match mpipe::build::derive_checked(&spec) {
        Ok(d) => d,
        Err(invalid) => return super::build::internal_error(&invalid),
    };
    let mut simulation = mpipe::build::simulate(&spec, &derived);
    reporter.emit(&mpipe::build::diagnostics(&spec, &simulation), &checked.program.sources);
    if compare {
        simulation.report.compare = mpipe::sim::compare::compare(&spec, simulation.report.step_time_s);
    }
    reporter.finish();
    let sampled = samples.map(|(n, seed)| {
        let batches = mpipe::sim::samples::draw(&spec, n.max(1), seed);
        mpipe::sim::samples::static_schedule(&spec, &derived, &batches)
    });
    if json {
        let mut value = serde_json::to_value(&simulation.report).expect("the report serialises");
        if let Some(s) = &sampled {
            value["samples"] = serde_json::to_value(s).expect("stats serialise");
        }
        println!("{}", serde_json::to_string_pretty(&value).expect("the report serialises"));
    } else {
        let timeline = mpipe::sim::timeline::ascii(&derived.ir, &simulation.timeline, 96);
        print!("{}", human(&spec, &derived.ir, &simulation.report, &timeline));
        if let Some(s) = &sampled {
            println!(
                "\nacross {} sampled batches (one static schedule): mean {}  p50 {}  p95 {}  max {}",
                s.samples,
                seconds(s.mean_s),
                seconds(s.p50_s),
                seconds(s.p95_s),
                seconds(s.max_s)
            );
        }
    }
    0
}

fn human(plan: &mpipe::check::spec::Plan, ir: &mpipe::ir::PlanIr, r: &Report, timeline: &str) -> String {
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
    if let (Some(spill), Some(bound)) = (r.owner_spill_s, r.owner_spill_bound_s) {
        let _ = writeln!(
            out,
            "encoder spill  {:>10}   max over ranks of max(0, E_r − w_r); no owner map beats {}",
            seconds(spill),
            seconds(bound)
        );
    }
    let _ = writeln!(out, "\n rank        busy        idle   slack w_r  encoder E_r    spill   peak memory  live mbs");
    for x in &r.ranks {
        let _ = writeln!(
            out,
            " {:>4} {:>11} {:>11} {:>11} {:>12} {:>8} {:>13} {:>9}",
            x.rank,
            seconds(x.busy_s),
            seconds(x.idle_s),
            seconds(x.warmup_slack_s),
            seconds(x.encoder_s),
            seconds(x.spill_s),
            gib(x.peak_memory_bytes),
            x.peak_live_microbatches
        );
    }
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
