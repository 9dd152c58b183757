//! Command-line interface: argument parsing, streams, colour, exit codes. One module per
//! subcommand; the compiler itself is the `mpipe` library.

mod build;
mod check;
mod explain;
mod format;
mod loader;
mod lsp;
mod output;
mod report;
mod sim;

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
}

fn parse_set(arg: &str) -> Result<(String, String), String> {
    mpipe::overrides::split(arg)
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .ok_or_else(|| format!("expected KEY=VALUE, such as `cluster.pp=4`, found `{arg}`"))
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

#[derive(Subcommand)]
enum Command {
    /// Check plans and report every diagnostic
    Check {
        #[arg(required = true)]
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
        #[arg(required_unless_present = "stdin")]
        files: Vec<std::path::PathBuf>,
    },
    /// Simulate the derived plan on the cost model: step time, bounds, MFU, per-rank slack,
    /// spill and memory, and a terminal timeline
    Sim {
        plan: std::path::PathBuf,
        /// Print report.json instead of the table
        #[arg(long)]
        json: bool,
        /// Also derive and simulate the baselines (Megatron-style, DistTrain-like,
        /// HyperParallel, round-robin transpose; other skeletons for plans without an encoder)
        #[arg(long)]
        compare: bool,
    },
    /// Run the language server over stdio (for editors)
    Lsp,
    /// Print the long explanation of a diagnostic code
    Explain { code: String },
    /// Derive the per-rank plan and write plan.json, plan.txt and schedule.csv
    Build {
        plan: std::path::PathBuf,
        /// Output directory
        #[arg(short, long, default_value_os_t = build::default_out())]
        out: std::path::PathBuf,
        /// Write into a directory that holds other files too, replacing only mpipec's own
        #[arg(long)]
        force: bool,
    },
}

/// Exit statuses: 0 success, 1 errors in the input, 2 usage or I/O errors (101 is a crash).
pub const EXIT_INPUT: u8 = 1;
pub const EXIT_USAGE: u8 = 2;

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let status = match &cli.command {
        Command::Check { files } => check::run(&cli.global, files),
        Command::Fmt { check, stdin, files } => format::run(&cli.global, files, *check, *stdin),
        Command::Explain { code } => explain::run(code),
        Command::Lsp => lsp::run(),
        Command::Sim { plan, json, compare } => sim::run(&cli.global, plan, *json, *compare),
        Command::Build { plan, out, force } => build::run(&cli.global, plan, out, *force),
    };
    ExitCode::from(status)
}
