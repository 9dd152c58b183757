//! `mpipec sweep PLAN --vary KEY=RANGE [--vary …] [--compare] [--json] [-o OUT]`

use std::fmt::Write as _;
use std::path::Path;

use mpipe::diagnostics::{Code, Diagnostic};
use mpipe::driver::Compiled;
use mpipe::explore::sweep::{self, Point};

use super::check::Source;
use super::progress::Progress;
use super::report::Reporter;
use super::{EXIT_INPUT, EXIT_USAGE, Global};

pub fn run(global: &Global, plan: &Path, varies: &[String], compare: bool, json: bool, out: Option<&Path>) -> u8 {
    let mut reporter = Reporter::new(global);
    let parsed: Result<Vec<sweep::Vary>, String> = varies.iter().map(|v| sweep::parse_vary(v)).collect();
    let grid = match parsed.and_then(|v| sweep::grid(&v)) {
        Ok(g) => g,
        Err(e) => {
            reporter.plain_error(&e);
            reporter.finish();
            return EXIT_USAGE;
        }
    };
    // Read and parsed once; the plan as written must be valid: a sweep varies a working plan.
    let source = match super::check::read_source(global, plan, &mut reporter) {
        Ok(source) => source,
        Err(status) => return status,
    };
    let written = source.check(global, &[]);
    if written.plan.is_none() {
        reporter.emit(&written.diagnostics, &written.program.sources);
        reporter.finish();
        return EXIT_INPUT;
    }
    if let Some(status) = refuse_bad_keys(global, &source, &grid[0], &mut reporter) {
        return status;
    }
    let total = grid.len();
    let mut progress = Progress::new("sweeping");
    let mut points = Vec::with_capacity(total);
    for (i, values) in grid.into_iter().enumerate() {
        points.push(point(source.check(global, &values), values, compare));
        progress.update(i + 1, total);
    }
    drop(progress);
    reporter.finish();
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({ "points": points })).expect("points serialise")
        );
    } else {
        print!("{}", table(&points));
    }
    if let Some(out) = out {
        let mut data =
            serde_json::to_string_pretty(&serde_json::json!({ "points": points })).expect("points serialise");
        data.push('\n');
        let files = vec![
            mpipe::outputs::Artifact {
                path: "sweep.svg".into(),
                contents: sweep::svg(&points, &format!("{} — {}", plan.display(), varies.join(", "))),
            },
            mpipe::outputs::Artifact { path: "sweep.json".into(), contents: data },
        ];
        if let Err(message) = super::output::write_merged(out, files.into_iter().map(Into::into).collect(), false) {
            let mut r = Reporter::new(global);
            r.plain_error(&message);
            r.finish();
            return EXIT_USAGE;
        }
        eprintln!("wrote {} (sweep.svg, sweep.json)", out.display());
    }
    0
}

/// A varied key that names nothing fails at every point the same way: it is reported once,
/// with its suggestion, from the first point, and the sweep does not run. The plan as written
/// checks, so an unknown field (E0202) or key (E0109) there comes from a `--vary` key.
fn refuse_bad_keys(
    global: &Global,
    source: &Source,
    first: &[(String, String)],
    reporter: &mut Reporter,
) -> Option<u8> {
    let checked = source.check(global, first);
    let bad: Vec<Diagnostic> =
        checked.diagnostics.into_iter().filter(|d| matches!(d.code, Code::E0109 | Code::E0202)).collect();
    if bad.is_empty() {
        return None;
    }
    reporter.emit(&bad, &checked.program.sources);
    reporter.finish();
    Some(EXIT_INPUT)
}

/// One point of the sweep: the plan checked under `values`, built and evaluated.
fn point(checked: Compiled, values: Vec<(String, String)>, compare: bool) -> Point {
    let value = values.first().map(|(_, v): &(String, String)| v.clone()).unwrap_or_default();
    let fail = |values, error: String| Point { value: value.clone(), values, report: None, error: Some(error) };
    let Some(spec) = checked.plan else {
        let first =
            checked.diagnostics.iter().find(|d| d.is_error()).map(|d| format!("{}: {}", d.code.as_str(), d.message));
        return fail(values, first.unwrap_or_else(|| "not a plan".into()));
    };
    let built = match mpipe::driver::build(&spec) {
        Ok(b) => b,
        Err(e) => return fail(values, format!("internal error: {}", e.problems.join("; "))),
    };
    let mut report = built.into_simulated().1.report;
    if compare {
        report.compare = mpipe::explore::compare::compare(&spec, report.step_time_s);
    }
    Point { value, values, report: Some(report), error: None }
}

fn table(points: &[Point]) -> String {
    let mut out = String::new();
    let Some(first) = points.first() else { return out };
    let keys: Vec<&str> = first.values.iter().map(|(k, _)| k.as_str()).collect();
    let baselines: Vec<String> = points
        .iter()
        .find_map(|p| p.report.as_ref())
        .map(|r| r.compare.iter().map(|c| c.name.clone()).collect())
        .unwrap_or_default();
    for k in &keys {
        let _ = write!(out, "{k:>22} ");
    }
    let _ = write!(out, "{:>11} {:>10} {:>8} {:>6}", "step", "max spill", "MFU", "fits");
    for b in &baselines {
        let _ = write!(out, " {:>22}", format!("vs {b}"));
    }
    out.push('\n');
    for p in points {
        for (_, v) in &p.values {
            let _ = write!(out, "{v:>22} ");
        }
        match (&p.report, &p.error) {
            (Some(r), _) => {
                let spill = r.ranks.iter().map(|x| x.spill_s).fold(0.0, f64::max);
                let _ = write!(
                    out,
                    "{:>9.3} s {:>8.3} s {:>6.1} % {:>6}",
                    r.step_time_s,
                    spill,
                    100.0 * r.mfu,
                    if p.fits() { "yes" } else { "no" }
                );
                for c in &r.compare {
                    let _ = write!(out, " {:>21.2}x", c.speedup);
                }
            }
            (None, Some(e)) => {
                let _ = write!(out, "  {e}");
            }
            (None, None) => {}
        }
        out.push('\n');
    }
    out
}
