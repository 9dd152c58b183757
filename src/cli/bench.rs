//! `mpipec bench [--json] [--runs N]`: a table of how long each compiler stage takes on the
//! benchmark plans (medians), for reports and for comparing with torch's own schedule
//! generation (scripts/bench-torch).

use mpipe::bench::{SIZES, median, plan, plan_text};
use mpipe::resolve::loader::MemoryLoader;

pub fn run(json: bool, runs: usize) -> u8 {
    let mut rows = Vec::new();
    for &(p, m) in SIZES {
        let text = plan_text(p, m);
        let check = median(runs, || {
            mpipe::check("bench.mpipe", "bench.mpipe", text.clone().into_bytes(), &MemoryLoader::new());
        });
        let spec = plan(p, m);
        let derived = mpipe::build::derive_checked(&spec).expect("the benchmark plans derive");
        let instructions: usize = derived.ir.ranks.iter().map(|r| r.instructions.len()).sum();
        let derive = median(runs, || {
            mpipe::build::derive_checked(&spec).expect("the benchmark plans derive");
        });
        let simulate = median(runs, || {
            mpipe::build::simulate(&spec, &derived);
        });
        rows.push(serde_json::json!({
            "pp": p, "microbatches": m, "chunks": 2, "instructions": instructions,
            "check_s": check, "derive_lower_validate_s": derive, "simulate_s": simulate,
        }));
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&rows).expect("rows serialise"));
        return 0;
    }
    println!(
        "{:>10} {:>13} {:>14} {:>24} {:>12} {:>16}",
        "P × M", "instructions", "parse+check", "derive+lower+validate", "simulate", "instructions/s"
    );
    for r in &rows {
        let n = r["instructions"].as_f64().unwrap_or(0.0);
        let d = r["derive_lower_validate_s"].as_f64().unwrap_or(0.0);
        println!(
            "{:>10} {:>13} {:>11.2} ms {:>21.2} ms {:>9.2} ms {:>14.1} M",
            format!("{} × {}", r["pp"], r["microbatches"]),
            n,
            1e3 * r["check_s"].as_f64().unwrap_or(0.0),
            1e3 * d,
            1e3 * r["simulate_s"].as_f64().unwrap_or(0.0),
            n / d / 1e6
        );
    }
    0
}
