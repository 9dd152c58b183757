//! `mpipec verify` end to end: the torch runtime runs each skeleton's plan in 2, 3 and 4
//! processes (gloo, CPU), on the built-in miniature and on transformers' Qwen2.5-VL and LLaVA
//! (`--model hf:...`), and must match a single-process run of the same microbatches in loss,
//! gradients and parameters; a rank that fails, dies or hangs ends every rank with an error
//! naming it.
//!
//! torch and transformers come from `scripts/torch-env` (a cached virtual environment outside
//! the repository, created on first use). Two runs at a time: much of a run is Python start-up
//! and ranks waiting on each other, which a second run fills on two cores.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn python() -> &'static str {
    static PYTHON: OnceLock<String> = OnceLock::new();
    PYTHON.get_or_init(|| {
        let out = Command::new(root().join("scripts/torch-env")).output().expect("running scripts/torch-env");
        assert!(out.status.success(), "scripts/torch-env failed:\n{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    })
}

/// How many verify runs go at once: each is several processes already.
const RUNS_AT_ONCE: usize = 2;
static RUNNING: Mutex<usize> = Mutex::new(0);
static FREED: Condvar = Condvar::new();

/// A place among the RUNS_AT_ONCE runs, held until dropped.
struct Turn;

fn turn() -> Turn {
    let mut running = lock(&RUNNING);
    while *running >= RUNS_AT_ONCE {
        running = FREED.wait(running).unwrap_or_else(|e| e.into_inner());
    }
    *running += 1;
    Turn
}

impl Drop for Turn {
    fn drop(&mut self) {
        *lock(&RUNNING) -= 1;
        FREED.notify_one();
    }
}

fn lock(m: &Mutex<usize>) -> MutexGuard<'_, usize> {
    m.lock().unwrap_or_else(|e| e.into_inner())
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

/// 2, 3 and 4 processes on the miniature: 2 and 4 with twice as many microbatches, 3 with
/// 2P + 1 where the skeleton allows a count that is not a multiple of P (2P otherwise).
fn matrix(plan: &str, schedule: &str, owner: Option<&str>, extra: &[&str], uneven: bool) {
    let points = [(2, 4), (3, if uneven { 7 } else { 6 }), (4, 8)];
    run_points(plan, "miniature", schedule, owner, extra, &points);
}

/// transformers' model `family` at 2 and 4 processes, the 2-process run on an odd microbatch
/// count where the skeleton allows one.
fn hf_matrix(family: &str, plan: &str, schedule: &str, owner: Option<&str>, extra: &[&str], uneven: bool) {
    let points = [(2, if uneven { 5 } else { 4 }), (4, 8)];
    run_points(plan, &format!("hf:{family}"), schedule, owner, extra, &points);
}

/// Every (processes, microbatches) point run two at a time; panics listing the ones that do
/// not match one process.
fn run_points(plan: &str, model: &str, schedule: &str, owner: Option<&str>, extra: &[&str], points: &[(u64, u64)]) {
    let failures: Vec<String> = std::thread::scope(|scope| {
        let runs: Vec<_> = points
            .iter()
            .map(|&(procs, m)| {
                scope.spawn(move || {
                    let mut sets = vec![format!("schedule={schedule}"), format!("batch.microbatches={m}")];
                    sets.extend(owner.map(|o| format!("owner={o}")));
                    sets.extend(extra.iter().map(|s| s.to_string()));
                    let out = verify_with(plan, &["--procs", &procs.to_string(), "--model", model], &sets, &[]);
                    let stdout = String::from_utf8_lossy(&out.stdout);
                    let ok = out.status.success() && stdout.contains("ok: loss, gradients and parameters match");
                    (!ok).then(|| {
                        format!(
                            "{plan} --model {model} {sets:?} on {procs} processes:\n{stdout}{}",
                            String::from_utf8_lossy(&out.stderr)
                        )
                    })
                })
            })
            .collect();
        runs.into_iter().filter_map(|r| r.join().expect("a verify run's thread")).collect()
    });
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

const LM: &str = "tests/verify/lm.mpipe";
const VLM: &str = "tests/verify/vlm.mpipe";
/// vlm.mpipe's model in one sharded region: the encoder blocks pipelined with the decoder's.
const VLM_SHARDED: &str = "tests/verify/vlm_sharded.mpipe";

#[test]
fn gpipe_matches_one_process() {
    matrix(LM, "gpipe", None, &[], true);
}

#[test]
fn one_f_one_b_matches_one_process() {
    matrix(LM, "1f1b", None, &[], true);
}

#[test]
fn interleaved_matches_one_process() {
    // Megatron's interleaved schedule needs M a multiple of P (E0309 otherwise).
    matrix(LM, "interleaved(2)", None, &[], false);
}

#[test]
fn zb1p_matches_one_process() {
    matrix(LM, "zb1p", None, &[], false);
}

#[test]
fn zbv_matches_one_process() {
    matrix(LM, "zbv", None, &[], true);
}

#[test]
fn dualpipev_matches_one_process() {
    matrix(LM, "dualpipev", None, &[], true);
}

#[test]
fn transpose_frozen_by_microbatch_matches_one_process() {
    matrix(VLM, "transpose, 1f1b", Some("by_microbatch"), &[], true);
}

#[test]
fn transpose_trainable_round_robin_matches_one_process() {
    matrix(VLM, "transpose, 1f1b", Some("round_robin"), &["model.enc.frozen=false"], true);
}

#[test]
fn transpose_trainable_zbv_matches_one_process() {
    matrix(VLM, "transpose, zbv", Some("by_microbatch"), &["model.enc.frozen=false"], true);
}

#[test]
fn transpose_chunked_trainable_matches_one_process() {
    matrix(VLM, "transpose(chunks = 2), 1f1b", Some("by_microbatch"), &["model.enc.frozen=false"], true);
}

#[test]
fn transpose_lookahead_matches_one_process_over_three_steps() {
    let out = verify(VLM, 2, &["schedule=transpose(chunks = 4, lookahead = 1), 1f1b".to_string()], &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("3 step(s)"), "a lookahead plan runs at least 3 steps:\n{stdout}");
    matrix(VLM, "transpose(chunks = 4, lookahead = 1), 1f1b", Some("by_microbatch"), &[], true);
}

#[test]
fn hyperparallel_style_prefix_transpose_matches_one_process() {
    matrix(VLM, "transpose(prefix), 1f1b", Some("round_robin"), &[], true);
}

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

// ---- transformers' vision-language models (`--model hf:...`, src/backend/torch/mpipe_hf.py) ----

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
fn hf_qwen2_5_vl_one_f_one_b_matches_one_process() {
    hf_matrix("qwen2_5_vl", VLM_SHARDED, "1f1b", None, &[], true);
}

#[test]
fn hf_qwen2_5_vl_interleaved_matches_one_process() {
    hf_matrix("qwen2_5_vl", VLM_SHARDED, "interleaved(2)", None, &["model.enc.frozen=false"], false);
}

#[test]
fn hf_qwen2_5_vl_zbv_matches_one_process() {
    hf_matrix("qwen2_5_vl", VLM_SHARDED, "zbv", None, &["model.enc.frozen=false"], true);
}

#[test]
fn hf_qwen2_5_vl_transpose_frozen_matches_one_process() {
    hf_matrix("qwen2_5_vl", VLM, "transpose, 1f1b", Some("by_microbatch"), &[], true);
}

#[test]
fn hf_qwen2_5_vl_transpose_trainable_matches_one_process() {
    hf_matrix("qwen2_5_vl", VLM, "transpose, zbv", Some("round_robin"), &["model.enc.frozen=false"], true);
}

/// Encoder chunks are runs of Qwen's vision blocks, each an instruction of the plan.
#[test]
fn hf_qwen2_5_vl_transpose_chunked_matches_one_process() {
    hf_matrix(
        "qwen2_5_vl",
        VLM,
        "transpose(chunks = 2), 1f1b",
        Some("by_microbatch"),
        &["model.enc.frozen=false"],
        true,
    );
}

#[test]
fn hf_qwen2_5_vl_transpose_lookahead_matches_one_process() {
    hf_matrix("qwen2_5_vl", VLM, "transpose(chunks = 4, lookahead = 1), 1f1b", Some("by_microbatch"), &[], true);
}

#[test]
fn hf_llava_matches_one_process() {
    hf_matrix("llava", VLM_SHARDED, "1f1b", None, &["model.enc.frozen=false"], true);
    hf_matrix("llava", VLM, "transpose(chunks = 2), zbv", Some("by_microbatch"), &["model.enc.frozen=false"], true);
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
    let python = python();
    let mut failures = Vec::new();
    for schedule in ["gpipe", "1f1b", "interleaved(2)", "zb1p", "zbv", "dualpipev"] {
        for procs in [2u64, 3] {
            let out_dir = std::env::temp_dir().join(format!(
                "mpipec-torch-csv-{}-{procs}-{}",
                std::process::id(),
                schedule.replace(['(', ')'], "")
            ));
            let _turn = turn();
            build_torch(
                LM,
                "auto",
                &out_dir,
                &[
                    format!("schedule={schedule}"),
                    format!("cluster.pp={procs}"),
                    format!("cluster.devices={procs}"),
                    format!("batch.microbatches={}", 2 * procs),
                ],
            );
            let run =
                Command::new(python).arg(root().join("tests/verify/torch_schedule.py")).arg(&out_dir).output().unwrap();
            let stdout = String::from_utf8_lossy(&run.stdout);
            if !run.status.success() || !stdout.lines().any(|l| l == "ok") {
                failures.push(format!("{schedule} on {procs}:\n{stdout}{}", String::from_utf8_lossy(&run.stderr)));
            }
            let _ = std::fs::remove_dir_all(&out_dir);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
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
