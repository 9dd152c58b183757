//! `mpipec adapt PLAN`: the per-batch plans of an `owner adaptive` plan, served to the torch
//! runtime. The plan is read, checked and built once; then each line on standard input is one
//! batch's image tokens per microbatch (a JSON array of whole numbers) and gets one line on
//! standard output: which plan that batch runs and, when it is its own, the plan.json lists
//! (`adaptive::Adaptive::for_batch`). The runtime keeps one of these running beside each
//! process and asks for the next step's plan while the current step runs (docs/runtime.md).

use std::io::{BufRead, Write};
use std::path::Path;

use mpipe::adaptive::{Adaptive, BatchPlan, Fallback};
use mpipe::algebra::OwnerSpec;
use mpipe::built::Built;
use mpipe::plan::Plan;

use super::report::Reporter;
use super::{EXIT_INPUT, EXIT_USAGE, Global};

/// The command line that starts a server for `plan` checked with `extra` over the global
/// `--set`s, when the plan's owner is `adaptive` (what `verify` and `train` hand the runtime).
pub fn command(global: &Global, path: &Path, plan: &Plan, extra: &[(String, String)]) -> Option<Vec<String>> {
    if plan.owner != Some(OwnerSpec::Adaptive) {
        return None;
    }
    let exe = std::env::current_exe().map_or_else(|_| "mpipec".into(), |p| p.display().to_string());
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut args = vec![exe, "adapt".into(), absolute.display().to_string()];
    if global.allow_outside {
        args.push("--allow-outside".into());
    }
    for (key, value) in global.set.iter().chain(extra) {
        args.extend(["--set".into(), format!("{key}={value}")]);
    }
    Some(args)
}

pub fn run(global: &Global, path: &Path) -> u8 {
    let mut reporter = Reporter::new(global);
    if path == Path::new("-") {
        reporter.plain_error("`mpipec adapt` reads batches on standard input; give the plan as a file");
        reporter.finish();
        return EXIT_USAGE;
    }
    let (_, plan) = match super::check::load_plan(global, path, &mut reporter) {
        Ok(loaded) => loaded,
        Err(status) => return status,
    };
    reporter.finish();
    if plan.owner != Some(OwnerSpec::Adaptive) {
        eprintln!(
            "error: `{}` does not place its encoder per batch\nhelp: write `owner adaptive;` in the plan, or `--set owner=adaptive`",
            path.display()
        );
        return EXIT_INPUT;
    }
    let built = match mpipe::driver::build(&plan) {
        Ok(built) => built,
        Err(invalid) => return super::build::internal_error(&invalid),
    };
    serve(&built, std::io::stdin().lock(), std::io::stdout().lock())
}

/// Answers every line of `input` until it ends; 0, or EXIT_USAGE when a stream fails. What
/// batches share (the stages, the body's order) is placed once, before the first.
fn serve(built: &Built, input: impl BufRead, mut output: impl Write) -> u8 {
    let adaptive = Adaptive::new(built);
    let ready = serde_json::json!({ "ready": { "microbatches": built.plan().batch.microbatches } });
    if writeln!(output, "{ready}").and_then(|()| output.flush()).is_err() {
        return EXIT_USAGE;
    }
    for line in input.lines() {
        let Ok(line) = line else { return EXIT_USAGE };
        if line.trim().is_empty() {
            continue;
        }
        let written = match tokens(&line, built.plan().batch.microbatches) {
            Ok(tokens) => answer(&mut output, &tokens, &adaptive.for_batch(&tokens)),
            Err(message) => writeln!(output, "{}", serde_json::json!({ "error": message })),
        };
        if written.and_then(|()| output.flush()).is_err() {
            return EXIT_USAGE;
        }
    }
    0
}

/// One request: each microbatch's image tokens, at most `microbatches` of them (fewer repeat,
/// as the plan's `image_tokens` does).
fn tokens(line: &str, microbatches: u64) -> Result<Vec<u64>, String> {
    let tokens: Vec<u64> = serde_json::from_str(line).map_err(|e| {
        format!("expected a JSON array of each microbatch's image tokens (whole numbers), found `{line}` ({e})")
    })?;
    if tokens.is_empty() || tokens.len() as u64 > microbatches {
        return Err(format!("{} image-token counts for a plan of {microbatches} microbatches", tokens.len()));
    }
    Ok(tokens)
}

/// The answer line: the batch's tokens, which plan runs and why, both simulated steps, and the
/// per-batch lists when they run (null: the static plan.json runs).
fn answer(output: &mut impl Write, tokens: &[u64], batch: &BatchPlan) -> std::io::Result<()> {
    #[derive(serde::Serialize)]
    struct Answer<'a> {
        tokens: &'a [u64],
        runs: &'static str,
        fallback: Option<&'static str>,
        static_s: f64,
        adaptive_s: Option<f64>,
        plan: Option<&'a mpipe::ir::PlanIr>,
    }
    if let Some(Fallback::Invalid(problems)) = &batch.fallback {
        // A compiler bug the validator caught: the static plan runs, and the bug is reported.
        eprintln!("error: internal compiler error: the plan for batch {tokens:?} failed validation: {problems:?}");
    }
    let fallback = batch.fallback.as_ref().map(|f| match f {
        Fallback::NoSlackEncoder => "no_slack_encoder",
        Fallback::Invalid(_) => "invalid",
        Fallback::OverMemory(_) => "over_memory",
        Fallback::NotFaster => "not_faster",
    });
    let plan = batch.derived.as_ref().map(|d| &d.ir);
    let answer = Answer {
        tokens,
        runs: if plan.is_some() { "adaptive" } else { "static" },
        fallback,
        static_s: batch.static_s,
        adaptive_s: batch.adaptive_s,
        plan,
    };
    serde_json::to_writer(&mut *output, &answer)?;
    writeln!(output)
}

#[cfg(test)]
mod tests {
    use super::tokens;

    #[test]
    fn a_request_is_one_to_m_whole_numbers() {
        assert_eq!(tokens("[4096, 0, 12]", 4), Ok(vec![4096, 0, 12]));
        for bad in ["[]", "[1, 2, 3, 4, 5]", "[-1]", "[1.5]", "{\"tokens\": [1]}", "4096"] {
            assert!(tokens(bad, 4).is_err(), "{bad}");
        }
    }
}
