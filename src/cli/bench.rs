//! `mpipec bench [--json] [--runs N]`: a table of how long each compiler stage takes on the
//! benchmark plans (medians), and the whole build a user runs (reading the plan to every
//! output written, `--target torch`, into a temporary folder), for reports and for comparing
//! with torch's own schedule generation (scripts/bench-torch).

use std::path::Path;

use mpipe::bench::{SIZES, median, plan, plan_text};
use mpipe::resolve::loader::MemoryLoader;
use serde::Serialize;

use super::Global;
use super::build::{Request, build};
use super::report::Reporter;

#[derive(Serialize)]
struct Row {
    pp: u32,
    microbatches: u32,
    chunks: u32,
    instructions: usize,
    check_s: f64,
    derive_lower_validate_s: f64,
    simulate_s: f64,
    whole_build_s: f64,
    written_bytes: u64,
}

pub fn run(global: &Global, json: bool, runs: usize) -> u8 {
    let scratch = std::env::temp_dir().join(format!("mpipec-bench-{}", std::process::id()));
    let rows = rows(global, &scratch, runs);
    let _ = std::fs::remove_dir_all(&scratch);
    let rows = match rows {
        Ok(rows) => rows,
        Err(message) => {
            eprintln!("error: {message}");
            return super::EXIT_USAGE;
        }
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&rows).expect("rows serialise"));
        return 0;
    }
    println!(
        "{:>10} {:>13} {:>12} {:>22} {:>11} {:>12} {:>10} {:>14}",
        "P × M",
        "instructions",
        "parse+check",
        "derive+lower+validate",
        "simulate",
        "whole build",
        "written",
        "build ns/instr"
    );
    for r in &rows {
        println!(
            "{:>10} {:>13} {:>9.2} ms {:>19.2} ms {:>8.2} ms {:>9.2} ms {:>7.1} MB {:>14.0}",
            format!("{} × {}", r.pp, r.microbatches),
            r.instructions,
            1e3 * r.check_s,
            1e3 * r.derive_lower_validate_s,
            1e3 * r.simulate_s,
            1e3 * r.whole_build_s,
            r.written_bytes as f64 / 1e6,
            1e9 * r.whole_build_s / r.instructions as f64
        );
    }
    0
}

fn rows(global: &Global, scratch: &Path, runs: usize) -> Result<Vec<Row>, String> {
    std::fs::create_dir_all(scratch).map_err(|e| format!("cannot create `{}`: {e}", scratch.display()))?;
    let mut rows = Vec::new();
    for &(p, m) in SIZES {
        let text = plan_text(p, m);
        let check = median(runs, || {
            mpipe::driver::compile("bench.mpipe", "bench.mpipe", text.clone().into_bytes(), &MemoryLoader::new());
        });
        let spec = plan(p, m);
        let built = mpipe::driver::build(&spec).expect("the benchmark plans derive");
        let derive = median(runs, || {
            mpipe::driver::build(&spec).expect("the benchmark plans derive");
        });
        // The simulator itself: `evaluate` would answer from its first run.
        let simulate = median(runs, || {
            mpipe::sim::report::simulate(&built.derived, &built.costs);
        });
        let source = scratch.join(format!("p{p}m{m}.mpipe"));
        std::fs::write(&source, &text).map_err(|e| format!("cannot write `{}`: {e}", source.display()))?;
        let out = scratch.join(format!("p{p}m{m}"));
        let targets = ["torch".to_string()];
        let request = Request {
            out: &out,
            force: true,
            targets: &targets,
            nearest: false,
            format: mpipe::outputs::PlanFormat::Auto,
            large_output: true,
        };
        let mut failed = None;
        let whole = median(runs, || {
            if let Err(status) = build(global, &source, &request, &mut Reporter::silent(global)) {
                failed = Some(status);
            }
        });
        if let Some(status) = failed {
            return Err(format!("the benchmark build of P={p}, M={m} failed with status {status}"));
        }
        rows.push(Row {
            pp: p,
            microbatches: m,
            chunks: 2,
            instructions: mpipe::outputs::instructions(&built.derived.ir),
            check_s: check,
            derive_lower_validate_s: derive,
            simulate_s: simulate,
            whole_build_s: whole,
            written_bytes: bytes_under(&out),
        });
    }
    Ok(rows)
}

fn bytes_under(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => bytes_under(&e.path()),
            _ => e.metadata().map_or(0, |m| m.len()),
        })
        .sum()
}
