//! `mpipec verify` end to end: the torch runtime runs each skeleton's plan in 2, 3 and 4
//! processes (gloo, CPU), on the built-in miniature and on transformers' Qwen2.5-VL and LLaVA
//! (`--model hf:...`), and must match a single-process run of the same microbatches in loss,
//! gradients and parameters; a rank that fails, dies or hangs ends every rank with an error
//! naming it.
//!
//! torch and transformers come from `scripts/torch-env` (a cached virtual environment outside
//! the repository, created on first use). Two runs at a time: much of a run is Python start-up
//! and ranks waiting on each other, which a second run fills on two cores.

mod common;

use std::process::{Command, Output};

use common::{root, torch_python as python, torch_turn as turn};

/// `script` (a path in the repository) run by the torch Python over the build folders `outs`,
/// in its turn among the torch runs; `scratch`, which holds the folders, is removed afterwards.
fn python_over(script: &str, outs: &[std::path::PathBuf], scratch: &std::path::Path) -> Output {
    let run = {
        let _turn = turn();
        Command::new(python()).arg(root().join(script)).args(outs).output().unwrap()
    };
    let _ = std::fs::remove_dir_all(scratch);
    run
}

fn verify(plan: &str, procs: u64, sets: &[String], env: &[(&str, &str)]) -> Output {
    verify_with(plan, &["--procs", &procs.to_string()], sets, env)
}

fn verify_with(plan: &str, args: &[&str], sets: &[String], env: &[(&str, &str)]) -> Output {
    let python = python();
    let _turn = turn();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mpipec"));
    cmd.current_dir(root()).args(["verify", plan, "--python", python]).args(args);
    for s in sets {
        cmd.args(["--set", s]);
    }
    cmd.env("MPIPE_TIMEOUT", "60").envs(env.iter().copied());
    cmd.output().expect("running mpipec verify")
}

/// `mpipec build PLAN --target torch --plan-format FORMAT -o OUT` with `sets` as `--set`s;
/// panics unless it succeeds.
fn build_torch(plan: &str, format: &str, out_dir: &std::path::Path, sets: &[String]) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mpipec"));
    cmd.current_dir(root())
        .args(["build", plan, "--target", "torch", "--plan-format", format, "--force", "-o"])
        .arg(out_dir);
    for s in sets {
        cmd.args(["--set", s]);
    }
    let out = cmd.output().expect("running mpipec build");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// One skeleton of the matrix: a plan, a model and the `--set`s that pick the schedule.
struct Case {
    plan: &'static str,
    model: &'static str,
    schedule: &'static str,
    owner: Option<&'static str>,
    extra: &'static [&'static str],
    /// Whether the skeleton runs a microbatch count that is not a multiple of P.
    uneven: bool,
}

const fn case(
    plan: &'static str,
    schedule: &'static str,
    owner: Option<&'static str>,
    extra: &'static [&'static str],
    uneven: bool,
) -> Case {
    hf("miniature", plan, schedule, owner, extra, uneven)
}

const fn hf(
    model: &'static str,
    plan: &'static str,
    schedule: &'static str,
    owner: Option<&'static str>,
    extra: &'static [&'static str],
    uneven: bool,
) -> Case {
    Case { plan, model, schedule, owner, extra, uneven }
}

impl Case {
    /// (processes, microbatches): the miniature at 2, 3 and 4 processes, 3 with 2P + 1 where
    /// the skeleton allows it (2P otherwise); a Hugging Face model at 2 (2P + 1 where allowed)
    /// and 4.
    fn points(&self) -> Vec<(u64, u64)> {
        let odd = |p: u64| if self.uneven { 2 * p + 1 } else { 2 * p };
        if self.model == "miniature" { vec![(2, 4), (3, odd(3)), (4, 8)] } else { vec![(2, odd(2)), (4, 8)] }
    }
}

/// Every point of every case, prepared by `mpipec verify --prepare` and run by one Python
/// (`python -m mpipec.torch.verify --cases`, the package in python/), which imports torch and transformers once for all of them;
/// panics quoting the cases that do not match one process. Returns each case's output.
fn run_cases(name: &str, cases: &[Case]) -> Vec<String> {
    let scratch = std::env::temp_dir().join(format!("mpipec-verify-cases-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    let mut dirs = Vec::new();
    for c in cases {
        for (procs, m) in c.points() {
            let dir = scratch.join(dirs.len().to_string());
            let mut cmd = Command::new(env!("CARGO_BIN_EXE_mpipec"));
            cmd.current_dir(root()).args(["verify", c.plan, "--procs", &procs.to_string(), "--model", c.model]);
            let mut sets = vec![format!("schedule={}", c.schedule), format!("batch.microbatches={m}")];
            sets.extend(c.owner.map(|o| format!("owner={o}")));
            sets.extend(c.extra.iter().map(|s| s.to_string()));
            for s in &sets {
                cmd.args(["--set", s]);
            }
            let out = cmd.arg("--prepare").arg(&dir).output().unwrap();
            assert!(out.status.success(), "{} {sets:?}: {}", c.plan, String::from_utf8_lossy(&out.stderr));
            dirs.push(dir);
        }
    }
    let log = scratch.join("log");
    let file = std::fs::File::create(&log).unwrap();
    let status = {
        let _turn = turn();
        Command::new(python())
            .args(["-m", "mpipec.torch.verify", "--cases"])
            .args(&dirs)
            .env("MPIPE_TIMEOUT", "60")
            .env("PYTHONPATH", root().join("python"))
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .status()
            .unwrap()
    };
    let text = std::fs::read_to_string(&log).unwrap();
    let _ = std::fs::remove_dir_all(&scratch);
    // A case's output runs from its title to its `case DIR: ok|failed` line.
    let mut outputs = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        current.push_str(line);
        current.push('\n');
        if line.starts_with("case ") && (line.ends_with(": ok") || line.ends_with(": failed")) {
            outputs.push(std::mem::take(&mut current));
        }
    }
    let failed: Vec<&String> = outputs.iter().filter(|o| !o.trim_end().ends_with(": ok")).collect();
    assert!(
        status.success() && failed.is_empty() && outputs.len() == dirs.len(),
        "{} of {} runs did not match one process:\n{}{current}",
        failed.len() + dirs.len() - outputs.len(),
        dirs.len(),
        failed.iter().map(|s| s.as_str()).collect::<String>()
    );
    outputs
}

const LM: &str = "tests/verify/lm.mpipe";
const VLM: &str = "tests/verify/vlm.mpipe";
/// vlm.mpipe's model in one sharded region: the encoder blocks pipelined with the decoder's.
const VLM_SHARDED: &str = "tests/verify/vlm_sharded.mpipe";

#[test]
fn sharded_skeletons_match_one_process() {
    run_cases(
        "sharded",
        &[
            case(LM, "gpipe", None, &[], true),
            case(LM, "1f1b", None, &[], true),
            // Megatron's interleaved schedule needs M a multiple of P (E0309 otherwise).
            case(LM, "interleaved(2)", None, &[], false),
            case(LM, "zb1p", None, &[], false),
            case(LM, "zbv", None, &[], true),
            case(LM, "dualpipev", None, &[], true),
        ],
    );
}

#[test]
fn transpose_skeletons_match_one_process() {
    let outputs = run_cases(
        "transpose",
        &[
            case(VLM, "transpose, 1f1b", Some("by_microbatch"), &[], true),
            case(VLM, "transpose, 1f1b", Some("round_robin"), &["model.enc.frozen=false"], true),
            case(VLM, "transpose, zbv", Some("by_microbatch"), &["model.enc.frozen=false"], true),
            case(VLM, "transpose(chunks = 2), 1f1b", Some("by_microbatch"), &["model.enc.frozen=false"], true),
            // Backward chunks away from their forwards, recomputing from received inputs.
            case(VLM, "transpose(chunks = 2), 1f1b", Some("by_microbatch"), RECOMPUTED, false),
            case(VLM, "transpose(chunks = 4, lookahead = 1), 1f1b", Some("by_microbatch"), &[], true),
            // HyperParallel's style.
            case(VLM, "transpose(prefix), 1f1b", Some("round_robin"), &[], true),
            // A plan per batch: image sizes change every microbatch and step, each step runs the
            // plan `mpipec adapt` derived for it during the step before.
            case(VLM, "transpose(chunks = 2), 1f1b", Some("adaptive"), &["model.enc.frozen=false"], true),
            // ... and lookahead features move where the next step's plan sends them from.
            case(VLM, "transpose(chunks = 4, lookahead = 1), 1f1b", Some("adaptive"), &[], true),
        ],
    );
    for (procs, m) in case(VLM, "", None, &[], false).points() {
        let mut sets: Vec<String> = RECOMPUTED.iter().map(|s| s.to_string()).collect();
        sets.extend([
            "schedule=transpose(chunks = 2), 1f1b".to_string(),
            format!("batch.microbatches={m}"),
            format!("cluster.pp={procs}"),
            format!("cluster.devices={procs}"),
        ]);
        let plan: mpipe::ir::PlanIr = serde_json::from_str(&derived_plan(&sets)).unwrap();
        assert!(!common::moved_backwards(&plan).is_empty(), "{sets:?}: no encoder backward runs away from its forward");
    }
    let lookahead: Vec<&String> = outputs.iter().filter(|o| o.contains("lookahead = 1")).collect();
    assert!(
        !lookahead.is_empty() && lookahead.iter().all(|o| o.contains("3 step(s)")),
        "a lookahead plan runs at least 3 steps:\n{lookahead:?}"
    );
    adaptive_runs_switch_plans_without_waiting(&outputs);
}

/// The adaptive cases: every run printed its per-batch plans; some steps ran their own plan and
/// some plans differ between steps, lookahead features moved between owners, and no step after
/// the first waited for its plan longer than a fraction of it (derived while the last step ran).
fn adaptive_runs_switch_plans_without_waiting(outputs: &[String]) {
    let adaptive: Vec<&String> = outputs.iter().filter(|o| o.contains("per-batch plans: ")).collect();
    assert_eq!(adaptive.len(), 6, "two adaptive cases at three points each:\n{outputs:?}");
    let number = |o: &str, after: &str| -> f64 {
        let rest = &o[o.find(after).unwrap_or_else(|| panic!("no `{after}` in\n{o}")) + after.len()..];
        rest.split(|c: char| !(c.is_ascii_digit() || c == '.')).next().unwrap().parse().unwrap()
    };
    let own: f64 = adaptive.iter().map(|o| number(o, " steps, ")).sum();
    let distinct = adaptive.iter().filter(|o| number(o, " on their own plan, ") > 1.0).count();
    assert!(own > 0.0 && distinct > 0, "no step ran a plan of its own, or every step the same:\n{adaptive:?}");
    let moved = adaptive.iter().filter(|o| o.contains("lookahead = 1")).any(|o| {
        o.lines().any(|l| l.starts_with("lookahead features moved") && l.contains(|c: char| ('1'..='9').contains(&c)))
    });
    assert!(moved, "no lookahead feature moved to another step's owner:\n{adaptive:?}");
    for o in adaptive {
        println!(
            "{}",
            o.lines()
                .filter(|l| l.starts_with("verifying") || l.starts_with("per-batch"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        // Generous: the miniature's steps take milliseconds on a loaded machine, its plans too.
        assert!(number(o, "(longest ") < 250.0, "a step waited on its plan:\n{o}");
    }
}

/// vlm.mpipe's plan.json under `sets`, as `build --target torch` writes it.
fn derived_plan(sets: &[String]) -> String {
    let dir =
        std::env::temp_dir().join(format!("mpipe-derived-{}-{:?}", std::process::id(), std::thread::current().id()));
    build_torch(VLM, "readable", &dir, sets);
    let plan = std::fs::read_to_string(dir.join("plan.json")).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    plan
}

/// A trainable encoder that recomputes, with images of twice the plan's tokens: derive runs
/// some chunks' backwards on another rank (with the plan's own 4096 tokens the kernel model
/// finds no idle window at P = 2 worth the move).
const RECOMPUTED: &[&str] = &["model.enc.frozen=false", "model.enc.recompute=full", "batch.image_tokens=8192"];

/// Two replicas of two pipeline ranks: each replica runs its own microbatches, and the dp
/// all-reduce must turn their gradients into the single process's over all of them.
#[test]
fn data_parallel_replicas_match_one_process() {
    for (plan, sets) in [
        (LM, vec!["schedule=1f1b".to_string()]),
        (VLM, vec!["schedule=transpose, 1f1b".to_string(), "model.enc.frozen=false".to_string()]),
    ] {
        let mut cmd_sets = sets.clone();
        cmd_sets.push("batch.microbatches=4".into());
        let out = verify_with(plan, &["--procs", "2", "--dp", "2"], &cmd_sets, &[]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("(pp 2 x dp 2)"),
            "{plan} {sets:?}:\n{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn a_failing_rank_ends_every_rank_with_its_error() {
    let sets = ["schedule=1f1b".to_string(), "batch.microbatches=6".to_string()];
    let out = verify(LM, 3, &sets, &[("MPIPE_FAIL_AT", "1:4")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("rank 1, instruction 4 ("), "{stderr}");
    assert!(stderr.contains("the pipelined run failed"), "{stderr}");
}

/// A run that ends well with a wrong gradient fails the comparison, held to a float64 run
/// too (past the fp32 tolerance it would pass were it as near that run as one fp32 process);
/// with `--profile` its measured and predicted steps are still printed, as its timings hold
/// either way.
#[test]
fn a_wrong_gradient_fails_and_still_reports_the_step() {
    let sets = ["schedule=1f1b".to_string(), "batch.microbatches=4".to_string()];
    let args = ["--procs", "2", "--profile"];
    let out = verify_with(LM, &args, &sets, &[("MPIPE_FAIL_AT", "1:0:wrong")]);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(stderr.contains("error: outside tolerance"), "{stderr}");
    let exact = stdout.lines().find(|l| l.contains("held to a float64 run")).unwrap_or_default();
    assert!(exact.starts_with("1 tensor(s) past rel 1e-05 (worst step 0 "), "{stdout}");
    assert!(stdout.lines().any(|l| l.starts_with("profile (") && l.contains("measured step")), "{stdout}");
}

#[test]
fn a_missing_torch_is_a_usage_error_with_the_install_command() {
    let out = Command::new(env!("CARGO_BIN_EXE_mpipec"))
        .current_dir(root())
        .args(["verify", LM, "--procs", "2", "--python", "python3"])
        .env("PYTHONPATH", root().join("tests/verify/no-torch"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("cannot import torch") && stderr.contains("run `scripts/torch-env`"), "{stderr}");
}

#[test]
fn help_names_the_models_and_the_environment_script() {
    let out = Command::new(env!("CARGO_BIN_EXE_mpipec")).args(["verify", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for needle in ["--model", "hf:qwen2_5_vl", "hf:llava", "scripts/torch-env"] {
        assert!(help.contains(needle), "verify --help does not name {needle}:\n{help}");
    }
    assert!(!help.contains("pip install"), "{help}");
}

// ---- transformers' vision-language models (`--model hf:...`, python/mpipec/torch/hf.py) ----

/// The adapter's stages, chained across cuts in the vision tower, at the seam and in the
/// decoder, compute transformers' own loss and gradients for both families.
#[test]
fn hf_stages_are_transformers_own_model() {
    let _turn = turn();
    let out = Command::new(python()).arg(root().join("tests/verify/hf_same_as_transformers.py")).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.lines().any(|l| l == "ok"),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Several images of different grids in one microbatch: the seam's lengths are ragged.
    assert!(stdout.contains("images [[1, 6, 2], [1, 2, 6], [1, 4, 2]]"), "{stdout}");
}

#[test]
fn hf_qwen2_5_vl_matches_one_process() {
    const QWEN: &str = "hf:qwen2_5_vl";
    const TRAINABLE: &[&str] = &["model.enc.frozen=false"];
    run_cases(
        "qwen2_5_vl",
        &[
            hf(QWEN, VLM_SHARDED, "1f1b", None, &[], true),
            hf(QWEN, VLM_SHARDED, "interleaved(2)", None, TRAINABLE, false),
            hf(QWEN, VLM_SHARDED, "zbv", None, TRAINABLE, true),
            hf(QWEN, VLM, "transpose, 1f1b", Some("by_microbatch"), &[], true),
            hf(QWEN, VLM, "transpose, zbv", Some("round_robin"), TRAINABLE, true),
            // Encoder chunks are runs of Qwen's vision blocks, each an instruction of the plan.
            hf(QWEN, VLM, "transpose(chunks = 2), 1f1b", Some("by_microbatch"), TRAINABLE, true),
            // Recomputed: some of those runs' backwards recompute on another rank (moves checked
            // by transpose_skeletons_match_one_process at these points).
            hf(QWEN, VLM, "transpose(chunks = 2), 1f1b", Some("by_microbatch"), RECOMPUTED, false),
            hf(QWEN, VLM, "transpose(chunks = 4, lookahead = 1), 1f1b", Some("by_microbatch"), &[], true),
        ],
    );
}

#[test]
fn hf_llava_matches_one_process() {
    run_cases(
        "llava",
        &[
            hf("hf:llava", VLM_SHARDED, "1f1b", None, &["model.enc.frozen=false"], true),
            hf("hf:llava", VLM, "transpose(chunks = 2), zbv", Some("by_microbatch"), &["model.enc.frozen=false"], true),
        ],
    );
}

/// Runs `mpipec verify` with a Python that must never start: the error comes first.
fn refused(plan: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mpipec"))
        .current_dir(root())
        .args(["verify", plan, "--python", "/nonexistent/python"])
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn hf_refuses_an_unknown_family_a_mismatched_model_and_an_empty_stage_before_starting() {
    let out = refused(VLM, &["--procs", "2", "--model", "hf:gemma3"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("`hf:gemma3` is not one the adapter knows") && stderr.contains("`hf:llava`"), "{stderr}");

    let out = refused(LM, &["--procs", "2", "--model", "hf:qwen2_5_vl"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("the plan's model has one part: llm (decoder)"), "{stderr}");

    // A plan per batch varies image sizes only on the miniature.
    let out = refused(VLM, &["--procs", "2", "--model", "hf:llava", "--set", "owner=adaptive"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("verify an `owner adaptive` plan on the miniature"), "{stderr}");

    // 16 layers cannot fill 20 stages: the checker's diagnostic, before any process.
    let out = refused(VLM_SHARDED, &["--procs", "20", "--model", "hf:llava"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("error[E") && !stderr.contains("cannot run"), "{stderr}");
}

#[test]
fn hf_without_transformers_says_what_to_run() {
    let out = verify_with(
        VLM,
        &["--procs", "2", "--model", "hf:llava"],
        &[],
        &[("PYTHONPATH", root().join("tests/verify/no-transformers").to_str().unwrap())],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("cannot import transformers") && stderr.contains("run `scripts/torch-env`"), "{stderr}");
}

/// A rank that dies, and one that hangs, on the Hugging Face model: the run ends (the hang
/// by its peers' timeout) naming the rank and the instruction it stopped at.
#[test]
fn hf_a_dead_or_hung_rank_ends_the_run_naming_its_instruction() {
    let sets = ["schedule=1f1b".to_string(), "batch.microbatches=4".to_string()];
    for mode in ["exit", "hang"] {
        let fail = format!("1:3:{mode}");
        let out = verify_with(
            VLM_SHARDED,
            &["--procs", "2", "--model", "hf:qwen2_5_vl"],
            &sets,
            &[("MPIPE_FAIL_AT", &fail), ("MPIPE_TIMEOUT", "5")],
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{mode}: {stderr}");
        assert!(stderr.contains("the pipelined run failed"), "{mode}: {stderr}");
        assert!(stderr.contains("note: process 1 (rank 1) stopped at step 0, instruction 3 ("), "{mode}: {stderr}");
    }
}

/// For all-Sharded plans `schedule.csv` also runs under torch's own pipelining runtime
/// (`_PipelineScheduleRuntime._load_csv`, tests/verify/torch_schedule.py), with the same loss
/// and gradients as one process.
#[test]
fn schedule_csv_runs_under_torch_pipelining() {
    let scratch = std::env::temp_dir().join(format!("mpipec-torch-csv-{}", std::process::id()));
    let mut outs = Vec::new();
    for schedule in ["gpipe", "1f1b", "interleaved(2)", "zb1p", "zbv", "dualpipev"] {
        for procs in [2u64, 3] {
            let out_dir = scratch.join(format!("{procs}-{}", schedule.replace(['(', ')'], "")));
            let sets = [
                format!("schedule={schedule}"),
                format!("cluster.pp={procs}"),
                format!("cluster.devices={procs}"),
                format!("batch.microbatches={}", 2 * procs),
            ];
            build_torch(LM, "auto", &out_dir, &sets);
            outs.push(out_dir);
        }
    }
    let run = python_over("tests/verify/torch_schedule.py", &outs, &scratch);
    let stdout = String::from_utf8_lossy(&run.stdout);
    let ok = outs.iter().all(|o| stdout.lines().any(|l| l == format!("{}: ok", o.display())));
    assert!(run.status.success() && ok, "{stdout}{}", String::from_utf8_lossy(&run.stderr));
}

/// The emitted launcher under torchrun: `bash OUT/torch/launch.sh` trains the plan's miniature
/// and the rank holding the loss reports it every step, the same losses from either encoding
/// of the plan.
#[test]
fn launch_sh_runs_under_torchrun() {
    let python = python();
    let sets = ["cluster.pp=2", "cluster.devices=2", "batch.microbatches=4"].map(String::from);
    let mut losses = Vec::new();
    for format in ["readable", "compact"] {
        let out_dir = std::env::temp_dir().join(format!("mpipec-launch-{format}-{}", std::process::id()));
        build_torch(VLM, format, &out_dir, &sets);
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let _turn = turn();
        let run = Command::new("bash")
            .arg(out_dir.join("torch/launch.sh"))
            .env("PYTHON", python)
            .env("MPIPE_STEPS", "2")
            .env("MASTER_PORT", port.to_string())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
        let _ = std::fs::remove_dir_all(&out_dir);
        assert!(run.status.success(), "{format}: {stdout}{}", String::from_utf8_lossy(&run.stderr));
        assert!(stdout.contains("step 0: loss ") && stdout.contains("step 1: loss "), "{format}: {stdout}");
        losses.push(
            stdout
                .lines()
                .filter(|l| l.contains(": loss "))
                .map(|l| l.split(" (").next().unwrap_or(l).to_string())
                .collect::<Vec<_>>(),
        );
    }
    assert_eq!(losses[0], losses[1], "the compact plan trains as the readable one does");
}

/// An adaptive plan's launcher: each step runs the plan `mpipec adapt` derives for its batch
/// (the command `mpipec build` writes into torch/adaptive.json), and the run says so; without
/// that file the launcher refuses before starting any process.
#[test]
fn launch_sh_runs_an_adaptive_plan_per_batch() {
    let sets = ["owner=adaptive", "cluster.pp=2", "cluster.devices=2", "batch.microbatches=4"].map(String::from);
    let out_dir = std::env::temp_dir().join(format!("mpipec-launch-adaptive-{}", std::process::id()));
    build_torch(VLM, "readable", &out_dir, &sets);
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let launch = |dir: &std::path::Path| {
        let _turn = turn();
        Command::new("bash")
            .arg(dir.join("torch/launch.sh"))
            .env("PYTHON", python())
            .env("MPIPE_STEPS", "3")
            .env("MASTER_PORT", port.to_string())
            .output()
            .unwrap()
    };
    let run = launch(&out_dir);
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(run.status.success(), "{stdout}{}", String::from_utf8_lossy(&run.stderr));
    assert!(stdout.contains("step 2: loss ") && stdout.contains("per-batch plans: 3 steps, "), "{stdout}");
    std::fs::remove_file(out_dir.join("torch/adaptive.json")).unwrap();
    let run = launch(&out_dir);
    let _ = std::fs::remove_dir_all(&out_dir);
    assert_eq!(run.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&run.stderr).contains("adaptive.json is missing"));
}

/// A plan whose encodes are split by images across ranks (4 images a sequence): each part
/// encodes only its images, the first stage gathers them; frozen and trainable, on 2 and 4
/// processes. That derive splits these plans is checked here too, so the runs cannot pass
/// without parts.
#[test]
fn transpose_split_images_match_one_process() {
    let mut failures = Vec::new();
    for procs in [2u64, 4] {
        for frozen in [true, false] {
            let sets = vec![
                "batch.images=4".to_string(),
                format!("batch.microbatches={}", 2 * procs),
                format!("model.enc.frozen={frozen}"),
                format!("cluster.pp={procs}"),
                format!("cluster.devices={procs}"),
            ];
            assert!(derived_plan(&sets).contains("\"images\": ["), "{sets:?}: derive splits no encode");
            let out = verify(VLM, procs, &sets[..3], &[]);
            let stdout = String::from_utf8_lossy(&out.stdout);
            if !out.status.success() || !stdout.contains("ok: loss, gradients and parameters match") {
                failures.push(format!("{sets:?}:\n{stdout}{}", String::from_utf8_lossy(&out.stderr)));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// mpipec.torch as a library in the user's loop (tests/python/executor_check.py): bad input
/// refused on every rank before any step (world size, tp, a missing stage module, a replicated
/// encoder that differs), AdamW with the global-norm clip (the single process's norm), a
/// checkpoint after step 2 resumed bit-identically to 4 uninterrupted steps, a checkpoint of
/// another plan refused naming its stages, bf16 autocast and fp32 master weights, fp16 autocast
/// with dynamic loss scaling near fp32 and an overflow on one rank skipping the step on all.
#[test]
fn executor_library_trains_clips_resumes_and_refuses_bad_input() {
    let scratch = std::env::temp_dir().join(format!("mpipec-executor-{}", std::process::id()));
    let two = ["cluster.pp=2", "cluster.devices=2", "batch.microbatches=4", "model.enc.frozen=false"].map(String::from);
    let plans = [
        (VLM, "transpose(chunks = 2), 1f1b", &two[..]),
        (VLM, "transpose, 1f1b", &two[..]),
        (LM, "1f1b", &["cluster.pp=4".to_string(), "cluster.devices=4".to_string()][..]),
    ];
    let mut outs = Vec::new();
    for (k, (plan, schedule, sets)) in plans.into_iter().enumerate() {
        let mut sets = sets.to_vec();
        sets.push(format!("schedule={schedule}"));
        let out = scratch.join(k.to_string());
        build_torch(plan, "auto", &out, &sets);
        outs.push(out);
    }
    let run = python_over("tests/python/executor_check.py", &outs, &scratch);
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success() && stdout.lines().any(|l| l == "ok"),
        "{stdout}{}",
        String::from_utf8_lossy(&run.stderr)
    );
}

/// `scripts/gpu-check` on a machine whose torch sees no CUDA device (here forced with
/// CUDA_VISIBLE_DEVICES): a clear refusal before anything is built.
#[test]
fn gpu_check_refuses_without_cuda() {
    let out = Command::new("bash")
        .arg(root().join("scripts/gpu-check"))
        .env("MPIPEC_PYTHON", python())
        .env("CUDA_VISIBLE_DEVICES", "")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("scripts/gpu-check needs a CUDA GPU") && stderr.contains("help: "), "{stderr}");
}

/// `mpipec profile` measures the miniature's layer kinds, links and runtime on 2 ranks, and
/// `verify --profile FILE` on a plan it did not see (3 ranks, another microbatch count) prints
/// the step the profile predicts beside the measured one. How close they come is this
/// machine's and its load's (scripts/profile-check makes the table); here the prediction must
/// be of the measured step's order, which a profile that lost most of a cost, or counted one
/// per layer instead of per instruction, is not.
#[test]
fn a_profile_predicts_a_held_out_plans_step() {
    let dir = std::env::temp_dir().join(format!("mpipec-profile-{}", std::process::id()));
    let file = dir.join("p.json");
    std::fs::create_dir_all(&dir).unwrap();
    let out = {
        let _turn = turn();
        Command::new(env!("CARGO_BIN_EXE_mpipec"))
            .current_dir(root())
            .args([
                "profile",
                LM,
                "--procs",
                "2",
                "--steps",
                "2",
                "--set",
                "batch.microbatches=4",
                "--python",
                python(),
            ])
            .arg("-o")
            .arg(&file)
            .env("MPIPE_TIMEOUT", "60")
            .output()
            .unwrap()
    };
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let profile = mpipe::profile::parse(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let kinds: Vec<&str> = profile.layers.keys().map(String::as_str).collect();
    assert_eq!(kinds, ["decoder", "decoder:first", "decoder:last"]);
    assert!(profile.runtime.is_some() && profile.p2p.is_some() && profile.all_reduce.contains_key("pp"));
    // The host's cores, which the simulator shares among a plan's ranks, and one thread each.
    let host = profile.host.expect("device.cores and device.threads");
    assert!(host.cores >= 1 && host.threads == 1, "{host:?}");
    // The host's speed kernel, timed between the steps on this CPU host.
    let speed = profile.host_speed.as_ref().expect("host_speed");
    assert!(!speed.kernel.is_empty() && speed.seconds > 0.0 && speed.seconds < 1.0, "{speed:?}");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("host's speed kernel: "), "{said}");
    assert!(said.contains("a compute instruction's call"), "{said}");
    // And, on Linux with two cores or more, the interval between its scheduler's balancings
    // (each of the measurement's trials waits 50 ms at most); on Linux, its time slice (a
    // turn of the two processes measuring it, within their 1 s).
    let raw: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    // What a compute op costs once an instruction, apart from the layers' times, per op.
    let calls = &raw["runtime"]["call_s"];
    let ops = ["forward_s", "backward_s", "backward_input_s", "backward_weight_s"];
    assert!(ops.iter().all(|op| calls[op].as_f64().is_some_and(|c| c >= 0.0)), "{calls}");
    assert_eq!(profile.runtime.expect("runtime").call.backward_s, calls["backward_s"].as_f64().unwrap());
    if cfg!(target_os = "linux") && host.cores >= 2 {
        let balance = raw["device"]["balance_s"].as_f64();
        assert!(balance.is_some_and(|s| (0.0..=0.1).contains(&s)) && balance == Some(host.balance_s), "{raw}");
    }
    if cfg!(target_os = "linux") {
        let slice = raw["device"]["slice_s"].as_f64();
        assert!(slice.is_some_and(|s| s > 0.0 && s < 1.0) && slice == Some(host.slice_s), "{raw}");
    }
    let args = ["--procs", "3", "--profile", file.to_str().unwrap()];
    let out = verify_with(LM, &args, &["batch.microbatches=6".into()], &[]);
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().find(|l| l.starts_with("profile file:")).unwrap_or_else(|| panic!("{stdout}"));
    let ms: Vec<f64> =
        line.split_whitespace().filter_map(|w| w.parse().ok()).filter(|x: &f64| *x > 0.0).take(3).collect();
    // measured step M ms (fastest F ms), predicted P ms …
    let (measured, fastest, predicted) = (ms[0], ms[1], ms[2]);
    // The profile holds CPU seconds, the step of a host that runs nothing else; what else runs
    // here stretches the measured step, by up to (ranks + other busy processes) / cores: on
    // this 2-core machine with 3 ranks and a load of 8, about 5.
    assert!(predicted > fastest / 6.0 && predicted < measured * 3.0, "{line}");
    // The same with its kernels at this run's speed: the run's compute seconds over those the
    // profile gives the same lists, each in the clock the profile's run timed (CPU seconds
    // where 3 ranks share fewer cores, else the wall clock, which the load stretches as above).
    // And at the host's speed during the run, which the run's speed kernel gives against the
    // profile's: both timed in CPU seconds, so only what else this host runs moves it.
    for part in ["at this run's speed", "at the host's speed during the run"] {
        let at = line.split("; ").find(|p| p.contains(part)).unwrap_or_else(|| panic!("{part}: {line}"));
        let ratio: f64 =
            at.split("(x").nth(1).and_then(|r| r.split(',').next()?.parse().ok()).unwrap_or_else(|| panic!("{line}"));
        assert!(ratio > 1.0 / 6.0 && ratio < 6.0, "{line}");
    }
}
