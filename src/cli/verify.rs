//! `mpipec verify PLAN [--procs N] [--dp D] [--steps K] [--model M] [--python PATH] [--profile]`:
//! the plan's miniature (or a tiny Hugging Face model cut as the plan says) run by the torch
//! runtime in N × D processes and in one, compared.

use mpipe::algebra::Skeleton;
use mpipe::plan::Plan;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::report::Reporter;
use super::{EXIT_INPUT, EXIT_USAGE, Global};

/// The interpreter to run torch with: --python, $MPIPEC_PYTHON, the environment
/// `scripts/torch-env` keeps, python3.
fn python(explicit: Option<&Path>) -> PathBuf {
    explicit
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os("MPIPEC_PYTHON").map(PathBuf::from))
        .or_else(|| cached_env().filter(|p| p.is_file()))
        .unwrap_or_else(|| PathBuf::from("python3"))
}

/// Where `scripts/torch-env` puts its Python: $MPIPEC_VENVS, else $XDG_CACHE_HOME or
/// ~/.cache, then `mpipec-venvs/torch/bin/python`.
fn cached_env() -> Option<PathBuf> {
    let var = |name| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    let venvs = var("MPIPEC_VENVS")
        .or_else(|| var("XDG_CACHE_HOME").map(|c| c.join("mpipec-venvs")))
        .or_else(|| var("HOME").map(|h| h.join(".cache/mpipec-venvs")))?;
    Some(venvs.join("torch/bin/python"))
}

/// The model `--model` names: the built-in miniature, or a family of transformers'
/// vision-language models (`hf:FAMILY`) at the plan's layer counts.
fn model_config(model: &str, mini: &Plan) -> Result<serde_json::Value, (String, u8)> {
    match model.strip_prefix("hf:") {
        _ if model == "miniature" => Ok(mpipe::backend::torch::miniature_config(mini)),
        Some(family) if mpipe::backend::torch::HF_FAMILIES.contains(&family) => {
            mpipe::backend::torch::hf_config(mini, family).map_err(|e| (e, EXIT_INPUT))
        }
        Some(family) => Err((mpipe::backend::torch::hf_config(mini, family).unwrap_err(), EXIT_USAGE)),
        None => Err((format!("`--model {model}` is neither `miniature` nor `hf:FAMILY`"), EXIT_USAGE)),
    }
}

/// The run's files: the plan, the adapter's config, the runtime and the Hugging Face adapter,
/// and `case.json` (its title and steps) for `mpipe_runtime.py --cases`.
fn write_run(
    dir: &Path,
    ir: &mpipe::ir::PlanIr,
    config: &serde_json::Value,
    case: &serde_json::Value,
) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("plan.json"), ir.to_json())?;
    std::fs::write(dir.join("config.json"), config.to_string())?;
    std::fs::write(dir.join("case.json"), case.to_string())?;
    std::fs::write(dir.join("mpipe_runtime.py"), mpipe::backend::torch::RUNTIME)?;
    std::fs::write(dir.join("mpipe_hf.py"), mpipe::backend::torch::HF_ADAPTER)
}

fn describe_model(config: &serde_json::Value) -> String {
    match config["family"].as_str() {
        Some(family) => format!(
            "hf:{family} of {} vision blocks and {} decoder layers",
            config["vision_layers"], config["text_layers"]
        ),
        None => format!("miniature of {} layers", config["kinds"].as_array().map_or(0, Vec::len)),
    }
}

/// The miniature's changes to the plan, applied before checking so that a schedule the
/// miniature's pipeline cannot run (too few microbatches for a V, say) gets the checker's
/// diagnostic: `procs` pipeline ranks of one device each, `dp` replicas, one sample per
/// microbatch.
fn miniature_overrides(procs: u64, dp: u64) -> Vec<(String, String)> {
    [
        ("cluster.pp", procs),
        ("cluster.devices", procs.saturating_mul(dp)),
        ("cluster.dp", dp),
        ("cluster.tp", 1),
        ("cluster.ep", 1),
        ("batch.micro_batch_size", 1),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// What `mpipec verify` runs besides the plan: its command-line options.
pub struct Options {
    pub procs: Option<u64>,
    pub dp: u64,
    pub steps: usize,
    pub model: String,
    pub python: Option<PathBuf>,
    pub profile: bool,
    /// Write the run into this directory and say how to start it, instead of running it.
    pub prepare: Option<PathBuf>,
}

pub fn run(global: &Global, plan: &Path, options: &Options) -> u8 {
    let Options { procs, dp, steps, profile, .. } = *options;
    // The first step warms up (allocations, gloo connections); a profile needs two more.
    let steps = if profile { steps.max(3) } else { steps };
    let procs = match procs {
        Some(p) => p,
        // The plan's own pp; its diagnostics are reported by the load below.
        None => match super::check::load(global, plan).ok().and_then(|c| c.plan) {
            Some(spec) => spec.cluster.pp,
            None => 1,
        },
    };
    let mut global = global.clone();
    global.set.extend(miniature_overrides(procs, dp));
    let global = &global;
    let mut reporter = Reporter::new(global);
    let (_, mini) = match super::check::load_plan(global, plan, &mut reporter) {
        Ok(loaded) => loaded,
        Err(status) => return status,
    };
    reporter.finish();
    // A lookahead plan's first step differs from the rest (its prologue encodes the first
    // batch); the steady state starts with the second, and a third shows it holds.
    let lookahead = mini.schedule.iter().any(|s| matches!(s.skeleton, Skeleton::Transpose { lookahead: true, .. }));
    let steps = if lookahead { steps.max(3) } else { steps };
    let py = python(options.python.as_deref());
    let derived = match mpipe::driver::build(&mini) {
        Ok(built) => built.derived,
        Err(invalid) => return super::build::internal_error(&invalid),
    };
    let config = match model_config(&options.model, &mini) {
        Ok(c) => c,
        Err((message, status)) => {
            let mut reporter = Reporter::new(global);
            reporter.plain_error(&message);
            reporter.finish();
            return status;
        }
    };
    let skeletons: Vec<String> = mini.schedule.iter().map(|s| s.skeleton.to_string()).collect();
    let title = format!(
        "verifying {} ({}) on {} processes (pp {} x dp {}), {} microbatches, {} step(s): {}",
        plan.display(),
        skeletons.join(", "),
        mini.cluster.pp * mini.cluster.dp,
        mini.cluster.pp,
        mini.cluster.dp,
        mini.batch.microbatches,
        steps,
        describe_model(&config)
    );
    let dir = match &options.prepare {
        Some(dir) => dir.clone(),
        None => std::env::temp_dir().join(format!("mpipec-verify-{}", std::process::id())),
    };
    let case = serde_json::json!({ "title": title, "steps": steps });
    if let Err(e) = write_run(&dir, &derived.ir, &config, &case) {
        let mut reporter = Reporter::new(global);
        reporter.plain_error(&format!("cannot write the run to `{}`: {e}", dir.display()));
        reporter.finish();
        return EXIT_USAGE;
    }
    if options.prepare.is_some() {
        println!("{title}\nprepared in {0}: run `{1} {0}/mpipe_runtime.py --cases {0}`", dir.display(), py.display());
        return 0;
    }
    println!("{title}");
    let mut cmd = Command::new(&py);
    cmd.arg(dir.join("mpipe_runtime.py"))
        .args([
            "--plan",
            &dir.join("plan.json").to_string_lossy(),
            "--config",
            &dir.join("config.json").to_string_lossy(),
        ])
        .args(["--steps", &steps.to_string(), "--verify", &dir.to_string_lossy()])
        .env("PYTHONUNBUFFERED", "1");
    if profile {
        cmd.arg("--profile");
    }
    let status = cmd.status();
    let measured = profile.then(|| std::fs::read_to_string(dir.join("profile.json")));
    let _ = std::fs::remove_dir_all(&dir);
    let status = match status {
        Ok(s) if s.success() => 0,
        // The runtime's exit status when torch is missing: it has said how to install it.
        Ok(s) if s.code() == Some(2) => return EXIT_USAGE,
        Ok(_) => return EXIT_INPUT,
        Err(e) => {
            eprintln!("error: cannot run `{}`: {e}", py.display());
            return EXIT_USAGE;
        }
    };
    match measured {
        None => status,
        Some(text) => {
            let compared = text
                .map_err(|e| format!("cannot read the runtime's profile: {e}"))
                .and_then(|t| serde_json::from_str(&t).map_err(|e| format!("the runtime's profile is malformed: {e}")))
                .and_then(|p| mpipe::sim::measured::compare(&derived.ir, &p));
            match compared {
                Ok(c) => {
                    println!(
                        "profile ({}, {} steps after warm-up): measured step {:.1} ms, predicted {:.1} ms from the measured per-layer costs ({:+.1} %)",
                        skeletons.join(", "),
                        c.steps,
                        c.measured * 1e3,
                        c.predicted * 1e3,
                        c.error_percent()
                    );
                    status
                }
                Err(message) => {
                    eprintln!("error: {message}");
                    EXIT_INPUT
                }
            }
        }
    }
}
