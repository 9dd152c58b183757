//! `mpipec train PLAN --model DIR --data FILE.jsonl --steps S [--procs N] [--dp D] ...`: a
//! Hugging Face vision-language model trained with the plan by `python -m mpipec.train`, in
//! N × D processes on this machine (or, with --prepare, a run directory for torchrun).

use std::path::{Path, PathBuf};

use clap::Args;
use mpipe::plan::Plan;

use super::report::Reporter;
use super::{EXIT_INPUT, EXIT_USAGE, Global};

/// `mpipec train`'s options; docs/train.md says more about each.
#[derive(Args)]
pub struct Options {
    /// The plan (.mpipe); its model must have the model directory's layers
    pub plan: PathBuf,
    /// A transformers model directory (`from_pretrained`): config, weights, tokenizer with a chat
    /// template, image processor
    #[arg(long, value_name = "DIR")]
    pub model: PathBuf,
    /// Training data: LLaVA conversation JSONL, one sample a line, with `<image>` where each image goes
    #[arg(long, value_name = "FILE.jsonl")]
    pub data: PathBuf,
    /// The folder the data's image paths are relative to (default: the data file's)
    #[arg(long, value_name = "DIR")]
    pub images: Option<PathBuf>,
    /// Pipeline ranks (default: the plan's pp)
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub procs: Option<u64>,
    /// Data-parallel replicas (default: the plan's dp); the job has procs x dp processes
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub dp: Option<u64>,
    /// Optimizer steps, in all (a resumed run continues up to this step)
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub steps: u64,
    /// The peak learning rate of AdamW (default 1e-5)
    #[arg(long)]
    pub lr: Option<f64>,
    /// Steps of linear warm-up before the cosine decay (default: 3 % of --steps)
    #[arg(long)]
    pub warmup: Option<u64>,
    /// The global gradient norm to clip to, over every rank (default 1.0; 0: no clipping)
    #[arg(long)]
    pub clip: Option<f64>,
    /// `auto` (bf16 where the device computes in it, fp32 on the CPU), `bf16` or `fp32`
    #[arg(long, value_parser = ["auto", "bf16", "fp32"])]
    pub precision: Option<String>,
    /// Write checkpoints under DIR (DIR/step-NNNNNN, each whole or absent)
    #[arg(long, value_name = "DIR")]
    pub save: Option<PathBuf>,
    /// Steps between checkpoints (default: one after the last step)
    #[arg(long, value_name = "K", requires = "save", value_parser = clap::value_parser!(u64).range(1..))]
    pub save_every: Option<u64>,
    /// Continue from the newest checkpoint under DIR (or DIR itself)
    #[arg(long, value_name = "DIR")]
    pub resume: Option<PathBuf>,
    /// End the run after step K, as a job whose time is up, on the schedule of --steps (with
    /// --save, checkpointed there; --resume continues it)
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u64).range(1..))]
    pub stop_after: Option<u64>,
    /// Write one JSON line per step: {"step", "loss", "seconds", "tokens"}
    #[arg(long, value_name = "FILE.jsonl")]
    pub log: Option<PathBuf>,
    /// Also run the same steps in one process without pipelining (fp32) and compare the loss and
    /// every gradient of each step
    #[arg(long)]
    pub check: bool,
    /// The Python with torch, transformers and Pillow (default: $MPIPEC_PYTHON, then the
    /// environment `scripts/torch-env` creates, then python3)
    #[arg(long)]
    pub python: Option<PathBuf>,
    /// Write the run (plan.json, train.json) into DIR and print the commands that start it, on
    /// this machine or under torchrun, instead of running it
    #[arg(long, value_name = "DIR")]
    pub prepare: Option<PathBuf>,
}

/// The job's shape as --procs and --dp set it, over the plan's own (read unreported: the check
/// with the overrides reports its diagnostics).
fn overrides(global: &Global, options: &Options) -> Vec<(String, String)> {
    let Some(own) = super::check::load(global, &options.plan).ok().and_then(|c| c.plan) else {
        return Vec::new();
    };
    let pp = options.procs.unwrap_or(own.cluster.pp);
    let dp = options.dp.unwrap_or(own.cluster.dp);
    [("cluster.pp", pp), ("cluster.dp", dp), ("cluster.devices", pp.saturating_mul(dp).saturating_mul(own.cluster.tp))]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The plan checked with the job's shape; `Err` is the exit status, its diagnostics reported.
fn job_plan(global: &Global, options: &Options) -> Result<Plan, u8> {
    let extra = overrides(global, options);
    let mut global = global.clone();
    global.set.extend(extra);
    let mut reporter = Reporter::new(&global);
    let (_, plan) = super::check::load_plan(&global, &options.plan, &mut reporter)?;
    reporter.finish();
    Ok(plan)
}

/// What `mpipec.train` needs and plan.json does not hold.
fn layout(plan: &Plan) -> serde_json::Value {
    serde_json::json!({
        "kinds": mpipe::backend::torch::kinds(plan),
        "seq_len": plan.batch.seq_len,
        "micro_batch_size": plan.batch.micro_batch_size,
    })
}

fn write_run(dir: &Path, ir: &mpipe::ir::PlanIr, plan: &Plan) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("plan.json"), ir.to_json())?;
    std::fs::write(dir.join("train.json"), layout(plan).to_string())
}

/// The problems with the options that show before Python starts, each a sentence.
fn option_problems(options: &Options) -> Vec<String> {
    let mut problems = Vec::new();
    if !options.model.is_dir() {
        problems
            .push(format!("--model `{}` is not a directory (a transformers model directory)", options.model.display()));
    }
    if !options.data.is_file() {
        problems.push(format!("--data `{}` is not a file (LLaVA conversation JSONL)", options.data.display()));
    }
    if let Some(dir) = options.images.as_ref().filter(|d| !d.is_dir()) {
        problems.push(format!("--images `{}` is not a directory", dir.display()));
    }
    if let Some(dir) = options.resume.as_ref().filter(|d| !d.is_dir()) {
        problems.push(format!("--resume `{}` is not a checkpoint directory", dir.display()));
    }
    if options.lr.is_some_and(|lr| !(lr > 0.0 && lr.is_finite())) {
        problems.push("--lr must be a positive number".to_string());
    }
    if options.clip.is_some_and(|c| !(c >= 0.0 && c.is_finite())) {
        problems.push("--clip must be a number >= 0 (0: no clipping)".to_string());
    }
    problems
}

/// `python -m mpipec.train`'s arguments for `dir`.
fn arguments(dir: &Path, options: &Options) -> Vec<String> {
    let path = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf()).display().to_string();
    let mut args = vec!["--job".to_string(), path(dir), "--model".into(), path(&options.model)];
    args.extend(["--data".into(), path(&options.data), "--steps".into(), options.steps.to_string()]);
    let paths = [
        ("--images", &options.images),
        ("--save", &options.save),
        ("--resume", &options.resume),
        ("--log-file", &options.log),
    ];
    for (flag, value) in paths {
        if let Some(p) = value {
            args.extend([flag.to_string(), path(p)]);
        }
    }
    let numbers = [
        ("--lr", options.lr.map(|v| v.to_string())),
        ("--warmup", options.warmup.map(|v| v.to_string())),
        ("--clip", options.clip.map(|v| v.to_string())),
        ("--save-every", options.save_every.map(|v| v.to_string())),
        ("--stop-after", options.stop_after.map(|v| v.to_string())),
        ("--precision", options.precision.clone()),
    ];
    for (flag, value) in numbers {
        if let Some(v) = value {
            args.extend([flag.to_string(), v]);
        }
    }
    if options.check {
        args.push("--check".into());
    }
    args
}

fn usage_error(global: &Global, message: &str, status: u8) -> u8 {
    let mut reporter = Reporter::new(global);
    reporter.plain_error(message);
    reporter.finish();
    status
}

pub fn run(global: &Global, options: &Options) -> u8 {
    let path = options.plan.as_path();
    let problems = option_problems(options);
    if !problems.is_empty() {
        return usage_error(global, &problems.join("\nerror: "), EXIT_USAGE);
    }
    let plan = match job_plan(global, options) {
        Ok(plan) => plan,
        Err(status) => return status,
    };
    if plan.cluster.tp > 1 {
        let message = format!(
            "the plan has tp = {}; `mpipec train` runs tp = 1 plans\nhelp: tensor parallelism runs through the stack's own launcher (`mpipec build --target megatron` or `--target mindformers`); here, `--set cluster.tp=1`",
            plan.cluster.tp
        );
        return usage_error(global, &message, EXIT_INPUT);
    }
    let ir = match mpipe::driver::build(&plan) {
        Ok(built) => built.derived.ir,
        Err(invalid) => return super::build::internal_error(&invalid),
    };
    let dir = match &options.prepare {
        Some(dir) => dir.clone(),
        None => std::env::temp_dir().join(format!("mpipec-train-{}", std::process::id())),
    };
    if let Err(e) = write_run(&dir, &ir, &plan) {
        return usage_error(global, &format!("cannot write the run to `{}`: {e}", dir.display()), EXIT_USAGE);
    }
    let package = match super::python::package_root() {
        Ok(p) => p,
        Err(message) => return usage_error(global, &message, EXIT_USAGE),
    };
    let py = super::python::interpreter(options.python.as_deref());
    let args = arguments(&dir, options);
    let processes = plan.cluster.pp * plan.cluster.dp * plan.cluster.tp;
    if options.prepare.is_some() {
        println!(
            "prepared in {0}\n  on this machine: PYTHONPATH={1} {2} -m mpipec.train {3}\n  under torchrun ({4} processes in all): PYTHONPATH={1} torchrun --nnodes NODES --nproc-per-node PER_NODE ... -m mpipec.train {3}",
            dir.display(),
            package.display(),
            py.display(),
            args.join(" "),
            processes
        );
        return 0;
    }
    println!(
        "training {} with {} ({}) on {processes} processes (pp {} x dp {}), {} microbatches of {}, {} step(s)",
        options.model.display(),
        path.display(),
        plan.schedule.iter().map(|s| s.skeleton.to_string()).collect::<Vec<_>>().join(", "),
        plan.cluster.pp,
        plan.cluster.dp,
        plan.batch.microbatches,
        plan.batch.micro_batch_size,
        options.steps
    );
    let status = super::python::module(&py, &package, "mpipec.train").args(&args).status();
    let _ = std::fs::remove_dir_all(&dir);
    match status {
        Ok(s) if s.success() => 0,
        // A missing torch, transformers or Pillow: mpipec.train has said how to install them.
        Ok(s) if s.code() == Some(2) => EXIT_USAGE,
        Ok(_) => EXIT_INPUT,
        Err(e) => usage_error(global, &format!("cannot run `{}`: {e}", py.display()), EXIT_USAGE),
    }
}
