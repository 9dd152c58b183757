//! Command-line interface: argument parsing, streams, colour, exit codes. One module per
//! subcommand; the compiler itself is the `mpipe` library.

mod adapt;
mod bench;
mod build;
mod check;
mod data;
mod estimate;
mod explain;
mod format;
mod loader;
mod lsp;
mod output;
mod profile;
mod progress;
mod python;
mod report;
mod sim;
mod stdlib;
mod sweep;
mod train;
mod tune;
mod verify;

use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Parser)]
#[command(name = "mpipec", version, about = "Compiler for Mpipe pipeline-parallel training plans (.mpipe)")]
struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    command: Command,
}

#[derive(Args, Clone)]
pub struct Global {
    /// When to colour diagnostics: auto = a terminal, NO_COLOR unset and TERM not dumb
    #[arg(long, global = true, value_enum, default_value = "auto")]
    color: ColorChoice,
    /// How to print diagnostics
    #[arg(long, global = true, value_enum, default_value = "human")]
    message_format: MessageFormat,
    /// Let `use "…"` reach files outside the plan's directory
    #[arg(long, global = true)]
    allow_outside: bool,
    /// Override a plan value for this run, by dotted path: `cluster.pp=4`, `batch.microbatches=12`,
    /// `schedule="interleaved(2)"`, `owner=round_robin`, `model.enc.frozen=false` (repeatable)
    #[arg(long = "set", value_name = "KEY=VALUE", global = true, value_parser = parse_set)]
    set: Vec<(String, String)>,
    /// Simulate with the costs a profile measured (`mpipec profile`), as the plan's
    /// `cluster { profile = "FILE"; }` would; the analytic model covers what it lacks
    #[arg(long, value_name = "FILE", global = true)]
    profile: Option<std::path::PathBuf>,
}

fn parse_set(arg: &str) -> Result<(String, String), String> {
    mpipe::overrides::split(arg)
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .ok_or_else(|| format!("expected KEY=VALUE, such as `cluster.pp=4`, found `{arg}`"))
}

/// A count an option needs one of at least (`--devices`, `--samples`, `--procs`, `--steps`): 0
/// is refused here, by the option's name, before it could surface later as some other problem
/// (a `--set` the user never typed, or "ok" printed over nothing).
fn at_least_one(arg: &str) -> Result<u64, String> {
    match arg.trim().parse::<u64>() {
        Ok(0) => Err("it must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("expected a whole number of at least 1, found `{arg}`")),
    }
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum ColorChoice {
    Auto,
    Always,
    Never,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum MessageFormat {
    Human,
    Short,
    Json,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum TuneObjective {
    #[value(name = "step_time")]
    StepTime,
    Mfu,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum ProcessorArg {
    /// Qwen2.5-VL: smart_resize to 28-px multiples within --min-pixels..--max-pixels, 14-px
    /// patches, 2x2 merged
    #[value(name = "qwen2_5_vl")]
    Qwen25Vl,
    /// LLaVA-OneVision: anyres, a 384-px base view and tiles of the best grid, 729 tokens each
    Llava,
    /// InternVL: up to 12 448-px tiles and a thumbnail, 1024 encoder tokens each
    Internvl,
}

#[derive(Subcommand)]
enum DataCommand {
    /// Read a LLaVA-format JSONL dataset (image sizes from the image headers), count each
    /// sample's image tokens under a model's image processor, pack samples into microbatches as
    /// `mpipec train` does, and summarise; with -o, write the `tokens,weight` histogram a plan's
    /// `image_histogram` names, and its picture beside it (.svg)
    Stats {
        /// The dataset: one JSON object a line, {"image" | "images", "conversations"}
        file: std::path::PathBuf,
        /// Whose image processor counts the tokens
        #[arg(long, value_enum)]
        processor: ProcessorArg,
        /// Refuse a sample whose LLM sequence is certainly longer than this (its image tokens and
        /// a token per word of its text)
        #[arg(long)]
        seq_len: Option<u64>,
        /// The folder image paths are relative to (default: the dataset's own)
        #[arg(long, value_name = "DIR")]
        images: Option<std::path::PathBuf>,
        /// Samples per microbatch (the plan's micro_batch_size)
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
        micro_batch_size: u64,
        /// Round each microbatch's tokens up to a multiple of this (fewer, coarser bins)
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
        bin: u64,
        /// Seed of the shuffle that forms microbatches of more than one sample
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Qwen2.5-VL's min_pixels (default: the checkpoints' preprocessor config)
        #[arg(long, default_value_t = mpipe::data::processor::QWEN_MIN_PIXELS)]
        min_pixels: u64,
        /// Qwen2.5-VL's max_pixels (default: the checkpoints' preprocessor config)
        #[arg(long, default_value_t = mpipe::data::processor::QWEN_MAX_PIXELS)]
        max_pixels: u64,
        /// Write the histogram here (CSV) and its picture beside it, with the extension .svg
        #[arg(short, long, value_name = "HIST.csv")]
        out: Option<std::path::PathBuf>,
    },
}

#[derive(Subcommand)]
enum Command {
    /// Check plans and report every diagnostic a build would give them, writing nothing
    Check {
        /// Plans, or files of definitions, to check
        #[arg(required = true, value_name = "FILE")]
        files: Vec<std::path::PathBuf>,
    },
    /// Print files in canonical form (in place, or check that they are)
    Fmt {
        /// Change nothing; exit 1 if a file is not formatted
        #[arg(long)]
        check: bool,
        /// Read a file from standard input and print it formatted
        #[arg(long, conflicts_with = "files")]
        stdin: bool,
        /// Files to format in place
        #[arg(required_unless_present = "stdin", value_name = "FILE")]
        files: Vec<std::path::PathBuf>,
    },
    /// Simulate the derived plan on the cost model: step time, bounds, MFU, per-rank slack,
    /// spill and memory, and a terminal timeline
    Sim {
        /// The plan (.mpipe) to simulate
        plan: std::path::PathBuf,
        /// Print report.json instead of the table
        #[arg(long)]
        json: bool,
        /// With --json: print one line, {"report": REPORT, "ir": PLAN}, the report and the
        /// per-rank plan that plan.json holds (what Python's `mpipec.compile` reads)
        #[arg(long, requires = "json")]
        ir: bool,
        /// Also derive and simulate the baselines, each under the plan's body skeleton
        /// (megatron-even, megatron-style, disttrain-like, prefix, hyperparallel, round-robin
        /// transpose; other skeletons for plans without an encoder)
        #[arg(long)]
        compare: bool,
        /// Also run the schedule on this many batches drawn from the image-token distribution
        /// (with --compare, every baseline's too), and time deriving a plan for one batch
        #[arg(long, value_parser = at_least_one)]
        samples: Option<u64>,
        /// Seed of the draw
        #[arg(long, default_value_t = 0)]
        seed: u64,
    },
    /// Simulate the plan over a range of values: a table, and with -o a plot (sweep.svg)
    Sweep {
        /// The plan (.mpipe) whose values are varied; it must check as written
        plan: std::path::PathBuf,
        /// KEY=RANGE, KEY as in --set: `batch.image_tokens=1024..65536*2`, `cluster.pp=2..8+2`,
        /// `owner=by_microbatch,round_robin` (repeatable: every combination)
        #[arg(long, required = true)]
        vary: Vec<String>,
        /// Also simulate the baselines at every point
        #[arg(long)]
        compare: bool,
        /// Print {"points": [...]} with every point's full report
        #[arg(long)]
        json: bool,
        /// Write sweep.svg and sweep.json into this directory
        #[arg(short, long)]
        out: Option<std::path::PathBuf>,
    },
    /// Search pp·dp·tp, skeletons, encoder cuts, owners and microbatch sizes for the fastest plan
    Tune {
        /// The plan (.mpipe) to start from: its model, hardware and global batch stay
        plan: std::path::PathBuf,
        /// Devices to plan for (default: the plan's)
        #[arg(long, value_parser = at_least_one)]
        devices: Option<u64>,
        #[arg(long, value_enum, default_value = "step_time")]
        objective: TuneObjective,
        /// Per-device memory a candidate may use (default: the device's HBM), e.g. 60GiB
        #[arg(long, value_parser = tune::parse_bytes)]
        memory_limit: Option<f64>,
        /// How many candidates to print
        #[arg(long, default_value_t = 5)]
        top: usize,
        /// Seed of the sample when the space is too large to search whole
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Write the best plan, in canonical form, to this file
        #[arg(short, long)]
        out: Option<std::path::PathBuf>,
        /// Compare the plan's static schedule with one derived per batch, over this many
        /// batches drawn from the image-token distribution
        #[arg(long, value_parser = at_least_one)]
        per_batch: Option<u64>,
    },
    /// Time each compiler stage on the benchmark plans (medians) and print a table
    Bench {
        #[arg(long)]
        json: bool,
        /// Runs per measurement
        #[arg(long, default_value_t = 9)]
        runs: usize,
        /// Print the benchmark plan of P pipeline ranks and M microbatches instead, for timing
        /// builds of it from outside (scripts/bench-build)
        #[arg(long, num_args = 2, value_names = ["P", "M"])]
        print_plan: Option<Vec<u32>>,
    },
    /// Run the language server over stdio (for editors)
    Lsp,
    /// Training data: `data stats` counts a dataset's image tokens into a plan's histogram
    Data {
        #[command(subcommand)]
        command: DataCommand,
    },
    /// Print the long explanation of a diagnostic code, or list every code
    Explain {
        /// A diagnostic code, such as E0305 (printed with every diagnostic)
        #[arg(required_unless_present = "list")]
        code: Option<String>,
        /// List every code with its one-line title
        #[arg(long, conflicts_with = "code")]
        list: bool,
    },
    /// List the standard library: hardware (peak FLOP/s, memory, links) and models (layers,
    /// hidden size, parameters), with the `use` line of each
    Std {
        /// Which part to list (default: both)
        #[arg(value_enum)]
        what: Option<stdlib::What>,
    },
    /// Check and derive the plan, simulate it, and write the per-rank plan and its pictures
    ///
    /// Writes into OUT: plan.json (the per-rank instruction lists, the contract the backends
    /// read; plan.compact.json instead with --plan-format compact, or auto above 200 000
    /// instructions), plan.txt (the same lists for people), report.json (the simulated step:
    /// step time, bounds, MFU, per-rank busy, idle, slack, spill and memory), timeline.svg (the
    /// step as a picture, a lane per rank; bands above 8 000 compute instructions),
    /// timeline.json (a Chrome trace for Perfetto or chrome://tracing),
    /// schedule.csv (all-sharded plans: the compute order in torch's CSV format), and one
    /// directory per target (OUT/torch, OUT/megatron, OUT/mindformers, OUT/mindspeed-mm,
    /// OUT/hyperparallel) with its launch script and configuration. OUT/.mpipec-manifest
    /// records what mpipec wrote.
    Build {
        /// The plan (.mpipe) to build
        plan: std::path::PathBuf,
        /// Output directory
        #[arg(short, long, default_value_os_t = build::default_out())]
        out: std::path::PathBuf,
        /// Write into a directory that holds other files too, replacing only mpipec's own
        #[arg(long)]
        force: bool,
        /// Backends to emit, comma-separated (default: the plan's `target`): torch, megatron,
        /// mindformers, mindspeed-mm, hyperparallel
        #[arg(long, value_delimiter = ',')]
        target: Vec<String>,
        /// For a target that cannot run the plan as written, emit its nearest native plan
        /// (with a warning that says what changed) instead of refusing
        #[arg(long)]
        nearest: bool,
        /// How the per-rank plan is written: `readable` (plan.json), `compact` (plan.compact.json,
        /// a token per instruction), or `auto`: readable up to 200,000 instructions, compact above
        #[arg(long, value_enum, default_value_t = build::PlanFormatArg::Auto)]
        plan_format: build::PlanFormatArg,
        /// Write the build even when it comes to more than 256 MB (without it, such a build
        /// is refused before anything is derived; the estimate comes from two small builds)
        #[arg(long)]
        large_output: bool,
    },
    /// Run the plan's miniature (or, with --model hf:..., transformers' own model) in P processes
    /// (torch, gloo, CPU) and in one process without pipelining; compare loss, gradients and parameters
    Verify {
        /// The plan (.mpipe) whose model is run
        plan: std::path::PathBuf,
        /// Pipeline ranks of the miniature (default: the plan's pp)
        #[arg(long, value_parser = at_least_one)]
        procs: Option<u64>,
        /// Data-parallel replicas of the miniature (N x DP processes); replica d runs the
        /// data's microbatches d*M .. (d+1)*M
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
        dp: u64,
        /// Optimizer steps
        #[arg(long, default_value_t = 2, value_parser = at_least_one)]
        steps: u64,
        /// The model: `miniature` (small MLP-attention blocks), or `hf:qwen2_5_vl` / `hf:llava`,
        /// transformers' own model from a tiny random config at the plan's encoder and LLM layer
        /// counts (needs transformers; see docs/verify.md)
        #[arg(long, default_value = "miniature")]
        model: String,
        /// The Python with torch (default: $MPIPEC_PYTHON, then the environment `scripts/torch-env`
        /// creates, then python3)
        #[arg(long)]
        python: Option<std::path::PathBuf>,
        /// Also time every instruction and set the simulated step beside the measured one (at
        /// least 3 steps; the first is warm-up): simulated with the per-layer costs this run
        /// measured, and with FILE, also with that profile's costs (`mpipec profile`)
        #[arg(long, value_name = "FILE", num_args = 0..=1)]
        profile: Option<Option<std::path::PathBuf>>,
        /// Write the run (plan.json, config.json, case.json) into DIR and print the command that
        /// starts it, instead of running it; `python -m mpipec.torch.verify --cases DIR...` runs
        /// several prepared checks in one Python
        #[arg(long, value_name = "DIR", conflicts_with = "profile")]
        prepare: Option<std::path::PathBuf>,
    },
    /// Measure the plan's layers (forward, backward-input, backward-weight per layer kind), the
    /// runtime's per-instruction costs, point-to-point links and all-reduce over the plan's
    /// groups on this machine's devices (torch: CUDA, NPU, else the CPU with gloo), and write
    /// them as a profile that `--profile FILE` or `cluster { profile = "FILE"; }` simulates with
    Profile {
        /// The plan (.mpipe) whose layers and schedule are measured
        plan: std::path::PathBuf,
        /// Where to write the profile (JSON, docs/costs.md)
        #[arg(short, long, default_value = "profile.json")]
        out: std::path::PathBuf,
        /// The model: `miniature` (what `verify` runs), or `hf:qwen2_5_vl` / `hf:llava`
        #[arg(long, default_value = "miniature")]
        model: String,
        /// Pipeline ranks, one process and device each (default: the plan's pp)
        #[arg(long, value_parser = at_least_one)]
        procs: Option<u64>,
        /// Data-parallel replicas (N x DP processes)
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
        dp: u64,
        /// Steps of the runtime timed for its per-instruction costs (the first is warm-up; the
        /// middle half of the rest by step time are used)
        #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(2..))]
        steps: u64,
        /// The Python with torch (default: $MPIPEC_PYTHON, then the environment `scripts/torch-env`
        /// creates, then python3)
        #[arg(long)]
        python: Option<std::path::PathBuf>,
        /// nccl, hccl or gloo (default: by the devices present, or $MPIPEC_BACKEND)
        #[arg(long)]
        backend: Option<String>,
    },
    /// Train a Hugging Face vision-language model (Qwen2.5-VL or LLaVA) with the plan: its
    /// stages cut from a transformers model directory, LLaVA conversation data through the
    /// model's own processor, AdamW with warm-up and cosine decay (see docs/train.md)
    Train(Box<train::Options>),
    /// Serve the per-batch plans of an `owner adaptive` plan to a runtime: one JSON array of
    /// each microbatch's image tokens a line on standard input, one JSON line on standard
    /// output per batch (which plan runs, both simulated steps, and the batch's own plan.json
    /// when it runs); the plan is checked and built once (see docs/runtime.md)
    Adapt {
        /// The plan (.mpipe), whose owner is `adaptive`
        plan: std::path::PathBuf,
    },
}

/// Exit statuses: 0 success, 1 errors in the input, 2 usage or I/O errors (101 is a crash).
pub const EXIT_INPUT: u8 = 1;
pub const EXIT_USAGE: u8 = 2;

/// Subcommands that read no plan and print no diagnostics: the global options about plans
/// and diagnostics mean nothing there, so their help leaves them out.
const NO_PLAN: &[&str] = &["explain", "std", "lsp", "bench"];
const PLAN_OPTIONS: &[&str] = &["color", "message_format", "allow_outside", "set", "profile"];

fn command() -> clap::Command {
    let mut command = <Cli as clap::CommandFactory>::command();
    // clap gives a global option to every subcommand that has no argument of its name; a
    // hidden one of that name keeps it out of these subcommands' help.
    let hidden: Vec<clap::Arg> = command
        .get_arguments()
        .filter(|a| PLAN_OPTIONS.contains(&a.get_id().as_str()))
        .map(|a| a.clone().global(false).hide(true))
        .collect();
    for name in NO_PLAN {
        command = command.mut_subcommand(name, |sub| sub.args(hidden.clone()));
    }
    command
}

/// `mpipec data stats`: the processor's options read, then the statistics.
fn data_command(global: &Global, command: &DataCommand) -> u8 {
    let DataCommand::Stats {
        file,
        processor,
        seq_len,
        images,
        micro_batch_size,
        bin,
        seed,
        min_pixels,
        max_pixels,
        out,
    } = command;
    use mpipe::data::processor::Processor;

    let processor = match processor {
        ProcessorArg::Qwen25Vl => Processor::Qwen25Vl { min_pixels: *min_pixels, max_pixels: *max_pixels },
        ProcessorArg::Llava => Processor::LlavaOnevision,
        ProcessorArg::Internvl => Processor::InternVl,
    };
    let options = data::Options {
        processor,
        seq_len: *seq_len,
        images: images.as_deref(),
        micro_batch_size: *micro_batch_size as usize,
        bin: *bin,
        seed: *seed,
        out: out.as_deref(),
    };
    data::stats(global, file, &options)
}

pub fn main() -> ExitCode {
    let matches = command().get_matches();
    let cli = match <Cli as clap::FromArgMatches>::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    let status = match &cli.command {
        Command::Check { files } => check::run(&cli.global, files),
        Command::Fmt { check, stdin, files } => format::run(&cli.global, files, *check, *stdin),
        Command::Explain { code, list } => explain::run(code.as_deref(), *list),
        Command::Std { what } => stdlib::run(*what),
        Command::Lsp => lsp::run(),
        Command::Data { command } => data_command(&cli.global, command),
        Command::Bench { print_plan: Some(pm), .. } => {
            print!("{}", mpipe::bench::plan_text(pm[0], pm[1]));
            0
        }
        Command::Bench { json, runs, print_plan: None } => bench::run(&cli.global, *json, *runs),
        Command::Tune { plan, devices, objective, memory_limit, top, seed, out, per_batch } => tune::run(
            &cli.global,
            plan,
            &tune::Options {
                devices: *devices,
                objective: if *objective == TuneObjective::Mfu {
                    mpipe::explore::tune::Objective::Mfu
                } else {
                    mpipe::explore::tune::Objective::StepTime
                },
                memory_limit: *memory_limit,
                top: *top,
                out: out.as_deref(),
                seed: *seed,
                per_batch: per_batch.map(|n| n as usize),
            },
        ),
        Command::Sweep { plan, vary, compare, json, out } => {
            sweep::run(&cli.global, plan, vary, *compare, *json, out.as_deref())
        }
        Command::Sim { plan, json, ir, compare, samples, seed } => {
            let format = match (*json, *ir) {
                (true, true) => sim::Format::JsonWithIr,
                (true, false) => sim::Format::Json,
                _ => sim::Format::Table,
            };
            sim::run(&cli.global, plan, format, *compare, samples.map(|n| (n as usize, *seed)))
        }
        Command::Build { plan, out, force, target, nearest, plan_format, large_output } => {
            let request = build::Request {
                out,
                force: *force,
                targets: target,
                nearest: *nearest,
                format: plan_format.into(),
                large_output: *large_output,
            };
            build::run(&cli.global, plan, &request)
        }
        Command::Verify { plan, procs, dp, steps, model, python, profile, prepare } => {
            let options = verify::Options {
                procs: *procs,
                dp: *dp,
                steps: *steps as usize,
                model: model.clone(),
                python: python.clone(),
                profile: profile.clone(),
                prepare: prepare.clone(),
            };
            verify::run(&cli.global, plan, &options)
        }
        Command::Profile { plan, out, model, procs, dp, steps, python, backend } => {
            let options = profile::Options {
                out: out.clone(),
                model: model.clone(),
                procs: *procs,
                dp: *dp,
                steps: *steps as usize,
                python: python.clone(),
                backend: backend.clone(),
            };
            profile::run(&cli.global, plan, &options)
        }
        Command::Train(options) => train::run(&cli.global, options),
        Command::Adapt { plan } => adapt::run(&cli.global, plan),
    };
    ExitCode::from(status)
}
