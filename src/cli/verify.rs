//! `mpipec verify PLAN [--procs N] [--dp D] [--steps K] [--model M] [--python PATH] [--profile [FILE]]`:
//! the plan's miniature (or a tiny Hugging Face model cut as the plan says) run by the torch
//! runtime (`python -m mpipec.torch.verify`) in N × D processes and in one, compared.

use mpipe::algebra::Skeleton;
use mpipe::cost::model::CostModel;
use mpipe::driver::Built;
use mpipe::plan::Plan;
use mpipe::sim::measured::Comparison;
use std::path::{Path, PathBuf};

use super::check::Source;
use super::report::Reporter;
use super::{EXIT_INPUT, EXIT_USAGE, Global};

/// What `mpipec verify` runs besides the plan: its command-line options.
pub struct Options {
    pub procs: Option<u64>,
    pub dp: u64,
    pub steps: usize,
    pub model: String,
    pub python: Option<PathBuf>,
    /// Time the run and set the prediction beside it: `Some(None)` from this run's per-layer
    /// costs, `Some(Some(FILE))` also from a profile's.
    pub profile: Option<Option<PathBuf>>,
    /// Write the run into this directory and say how to start it, instead of running it.
    pub prepare: Option<PathBuf>,
}

/// The model `--model` names: the built-in miniature, or a family of transformers'
/// vision-language models (`hf:FAMILY`) at the plan's layer counts.
pub fn model_config(model: &str, mini: &Plan) -> Result<serde_json::Value, (String, u8)> {
    match model.strip_prefix("hf:") {
        _ if model == "miniature" => Ok(mpipe::backend::torch::miniature_config(mini)),
        Some(family) if mpipe::backend::torch::HF_FAMILIES.contains(&family) => {
            mpipe::backend::torch::hf_config(mini, family).map_err(|e| (e, EXIT_INPUT))
        }
        Some(family) => Err((mpipe::backend::torch::hf_config(mini, family).unwrap_err(), EXIT_USAGE)),
        None => Err((format!("`--model {model}` is neither `miniature` nor `hf:FAMILY`"), EXIT_USAGE)),
    }
}

/// The run's files: the plan, the adapter's config and `case.json` (its title and steps), what
/// `python -m mpipec.torch.verify --cases DIR` reads.
fn write_run(
    dir: &Path,
    ir: &mpipe::ir::PlanIr,
    config: &serde_json::Value,
    case: &serde_json::Value,
) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("plan.json"), ir.to_json())?;
    std::fs::write(dir.join("config.json"), config.to_string())?;
    std::fs::write(dir.join("case.json"), case.to_string())
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

/// The plan read and parsed once, checked as the miniature runs it: `--procs` pipeline ranks
/// (the plan's own pp by default). `Err` is the exit status, its diagnostics reported.
pub fn miniature_plan(global: &Global, path: &Path, options: &Options) -> Result<Plan, u8> {
    let mut reporter = Reporter::new(global);
    let global = &Global { profile: options.profile.clone().flatten(), ..global.clone() };
    let source = super::check::read_source(global, path, &mut reporter)?;
    let procs = options.procs.unwrap_or_else(|| source.check(global, &[]).plan.map_or(1, |p| p.cluster.pp));
    let mut checked = Source::check(&source, global, &miniature_overrides(procs, options.dp));
    // The miniature runs here, where its profile was taken: that the profile describes another
    // device and model than the plan's (W0005) is the point, not a problem.
    checked.diagnostics.retain(|d| d.code != mpipe::diagnostics::Code::W0005);
    let (_, mini) = super::check::plan_of(checked, path, &mut reporter)?;
    reporter.finish();
    Ok(mini)
}

/// An adaptive plan's run: its image sizes change every microbatch and step (the miniature's
/// `plan_image_tokens`), and each process derives each step's plan through `mpipec adapt`.
fn adaptive_config(
    global: &Global,
    path: &Path,
    mini: &Plan,
    options: &Options,
    mut config: serde_json::Value,
) -> Result<serde_json::Value, String> {
    let overrides = miniature_overrides(mini.cluster.pp, options.dp);
    let Some(command) = super::adapt::command(global, path, mini, &overrides) else { return Ok(config) };
    if options.model != "miniature" {
        return Err(format!(
            "`--model {}` has batches of one image size; verify an `owner adaptive` plan on the miniature, or train it on a transformers model with `mpipec train`",
            options.model
        ));
    }
    config["plan_image_tokens"] = mini.batch.image_tokens.iter().copied().max().unwrap_or(0).into();
    config["adaptive"] = command.into();
    Ok(config)
}

/// Steps the run needs: a profile's warm-up and two more; a lookahead plan's first step differs
/// from the rest (its prologue encodes the first batch), so the steady state starts with the
/// second, and a third shows it holds; an adaptive plan changes plans at least twice.
fn steps_needed(mini: &Plan, options: &Options) -> usize {
    let lookahead = mini.schedule.iter().any(|s| matches!(s.skeleton, Skeleton::Transpose { lookahead: true, .. }));
    let adaptive = mini.owner == Some(mpipe::algebra::OwnerSpec::Adaptive);
    if options.profile.is_some() || lookahead || adaptive { options.steps.max(3) } else { options.steps }
}

fn title(path: &Path, mini: &Plan, steps: usize, config: &serde_json::Value) -> String {
    format!(
        "verifying {} ({}) on {} processes (pp {} x dp {}), {} microbatches, {} step(s): {}",
        path.display(),
        skeletons(mini),
        mini.cluster.pp * mini.cluster.dp,
        mini.cluster.pp,
        mini.cluster.dp,
        mini.batch.microbatches,
        steps,
        describe_model(config)
    )
}

fn skeletons(mini: &Plan) -> String {
    mini.schedule.iter().map(|s| s.skeleton.to_string()).collect::<Vec<_>>().join(", ")
}

pub fn usage_error(global: &Global, message: &str, status: u8) -> u8 {
    let mut reporter = Reporter::new(global);
    reporter.plain_error(message);
    reporter.finish();
    status
}

pub fn run(global: &Global, plan: &Path, options: &Options) -> u8 {
    let mini = match miniature_plan(global, plan, options) {
        Ok(mini) => mini,
        Err(status) => return status,
    };
    let built = match mpipe::driver::build(&mini) {
        Ok(built) => built,
        Err(invalid) => return super::build::internal_error(&invalid),
    };
    let predicted = mini
        .cluster
        .profile
        .is_some()
        .then(|| Predicted { step: built.evaluate().report.step_time_s, device_each: device_each(&mini) });
    let config = match model_config(&options.model, &mini) {
        Ok(c) => c,
        Err((message, status)) => return usage_error(global, &message, status),
    };
    let config = match adaptive_config(global, plan, &mini, options, config) {
        Ok(c) => c,
        Err(message) => return usage_error(global, &message, EXIT_USAGE),
    };
    let steps = steps_needed(&mini, options);
    let title = title(plan, &mini, steps, &config);
    let dir = match &options.prepare {
        Some(dir) => dir.clone(),
        None => std::env::temp_dir().join(format!("mpipec-verify-{}", std::process::id())),
    };
    let case = serde_json::json!({ "title": title, "steps": steps });
    if let Err(e) = write_run(&dir, &built.derived.ir, &config, &case) {
        return usage_error(global, &format!("cannot write the run to `{}`: {e}", dir.display()), EXIT_USAGE);
    }
    let package = match super::python::package_root() {
        Ok(p) => p,
        Err(message) => return usage_error(global, &message, EXIT_USAGE),
    };
    let py = super::python::interpreter(options.python.as_deref());
    if options.prepare.is_some() {
        println!(
            "{title}\nprepared in {0}: run `PYTHONPATH={1} {2} -m mpipec.torch.verify --cases {0}`",
            dir.display(),
            package.display(),
            py.display()
        );
        return 0;
    }
    println!("{title}");
    let status = run_prepared(&py, &package, &dir, options.profile.is_some());
    let measured = options.profile.is_some().then(|| std::fs::read_to_string(dir.join("profile.json")));
    let _ = std::fs::remove_dir_all(&dir);
    match (status, measured) {
        (0, Some(text)) => report_profile(&built, text, predicted),
        // Outside tolerance: the run still ran every step, and its timings are worth seeing.
        (EXIT_INPUT, Some(Ok(text))) => report_profile(&built, Ok(text), predicted).max(EXIT_INPUT),
        (status, _) => status,
    }
}

/// `python -m mpipec.torch.verify --run DIR`: its exit status as mpipec's.
fn run_prepared(py: &Path, package: &Path, dir: &Path, profile: bool) -> u8 {
    let mut cmd = super::python::module(py, package, "mpipec.torch.verify");
    cmd.arg("--run").arg(dir);
    if profile {
        cmd.arg("--profile");
    }
    match cmd.status() {
        Ok(s) if s.success() => 0,
        // A missing torch or transformers: the harness has said how to install it.
        Ok(s) if s.code() == Some(2) => EXIT_USAGE,
        Ok(_) => EXIT_INPUT,
        Err(e) => {
            eprintln!("error: cannot run `{}`: {e}", py.display());
            EXIT_USAGE
        }
    }
}

/// The step predicted from a profile file.
struct Predicted {
    step: f64,
    /// Where the profile's host is a CPU whose cores the ranks share: the step were each rank
    /// on a device of its own, for the comparison.
    device_each: Option<f64>,
}

fn device_each(mini: &Plan) -> Option<f64> {
    let profile = mini.cluster.profile.as_ref().filter(|p| p.host.is_some())?;
    let mut alone = mini.clone();
    alone.cluster.profile = Some(std::sync::Arc::new(mpipe::profile::Profile { host: None, ..(**profile).clone() }));
    Some(mpipe::driver::build(&alone).ok()?.evaluate().report.step_time_s)
}

/// The profile's prediction with its kernels at the speed this run measured them, and the
/// ratio: the layers' times scaled by the run's compute seconds over those the profile gives
/// the same lists, in the clock the profile's run timed its instructions with (CPU seconds
/// where the ranks share the cores). The host's speed drifts between a profile and a run on a
/// shared machine; what this leaves of the difference is the rest of the model's.
fn at_run_speed(built: &Built, c: &Comparison) -> Option<(f64, f64)> {
    let (mini, ir) = (built.plan(), &built.derived.ir);
    let shared = built.costs.measured().and_then(|m| m.shared(mini.cluster.dp));
    let run = if shared.is_some_and(|s| s.contended(ir.ranks.len())) { c.compute_cpu? } else { c.compute };
    let profiled = mpipe::sim::costs::compute_seconds(&built.costs, ir);
    if run <= 0.0 || profiled <= 0.0 {
        return None;
    }
    with_kernels_scaled(built, run / profiled)
}

/// The profile's prediction at the host's speed during this run: its kernels scaled by how much
/// slower the host's speed kernel ran between this run's steps than between the profile's.
/// Unlike `at_run_speed` this takes nothing from the plan's own instructions.
fn at_host_speed(built: &Built, c: &Comparison) -> Option<(f64, f64)> {
    let profiled = built.plan().cluster.profile.as_ref()?.host_speed.as_ref()?;
    with_kernels_scaled(built, profiled.ratio(c.host_speed.as_ref()?)?)
}

/// (`by`, the step the profile predicts with its kernels `by` times as long).
fn with_kernels_scaled(built: &Built, by: f64) -> Option<(f64, f64)> {
    let mini = built.plan();
    let mut scaled = mini.clone();
    scaled.cluster.profile = Some(std::sync::Arc::new(mini.cluster.profile.as_ref()?.kernels_scaled(by)));
    Some((by, mpipe::sim::report::simulate(&built.derived, &CostModel::new(&scaled)).report.step_time_s))
}

/// The measured step beside the one the cost model predicts from the measured per-layer costs,
/// and from the profile (`--profile FILE`) when there is one.
fn report_profile(built: &Built, text: std::io::Result<String>, predicted: Option<Predicted>) -> u8 {
    let mini = built.plan();
    let compared = text
        .map_err(|e| format!("cannot read the runtime's profile: {e}"))
        .and_then(|t| serde_json::from_str(&t).map_err(|e| format!("the runtime's profile is malformed: {e}")))
        .and_then(|p| mpipe::sim::measured::compare(&built.derived.ir, &p));
    match compared {
        Ok(c) => {
            println!(
                "profile ({}, {} steps after warm-up): measured step {:.1} ms, predicted {:.1} ms from the measured per-layer costs ({:+.1} %)",
                skeletons(mini),
                c.steps,
                c.measured * 1e3,
                c.predicted * 1e3,
                c.error_percent()
            );
            if let Some(p) = predicted {
                let percent = |of: f64| (p.step / of - 1.0) * 100.0;
                let alone = p.device_each.map_or(String::new(), |a| {
                    format!(
                        "; {:.1} ms were each rank on a device of its own ({:+.1} %)",
                        a * 1e3,
                        (a / c.measured - 1.0) * 100.0
                    )
                });
                let scaled = |what: &str, at: Option<(f64, f64)>| {
                    at.map_or(String::new(), |(ratio, step)| {
                        format!(
                            "; {:.1} ms {what} (x{ratio:.3}, {:+.1} %)",
                            step * 1e3,
                            (step / c.measured - 1.0) * 100.0
                        )
                    })
                };
                let host = scaled("at the host's speed during the run, by its speed kernel", at_host_speed(built, &c));
                let at_speed = scaled("with its kernels at this run's speed", at_run_speed(built, &c));
                println!(
                    "profile file: measured step {:.1} ms (fastest {:.1} ms), predicted {:.1} ms from the profile's costs ({:+.1} %, {:+.1} % of the fastest){alone}{host}{at_speed}",
                    c.measured * 1e3,
                    c.fastest * 1e3,
                    p.step * 1e3,
                    percent(c.measured),
                    percent(c.fastest)
                );
            }
            0
        }
        Err(message) => {
            eprintln!("error: {message}");
            EXIT_INPUT
        }
    }
}
