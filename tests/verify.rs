//! `mpipec verify` end to end: the torch runtime runs each skeleton's plan in 2, 3 and 4
//! processes (gloo, CPU) and must match a single-process run of the same microbatches in loss,
//! gradients and parameters; a rank that fails ends every rank with an error naming it.
//!
//! torch comes from `scripts/torch-env` (a cached virtual environment outside the repository,
//! created on first use). The runs share two cores in CI, so they take turns.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::{Mutex, OnceLock};

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

/// One verify run at a time: each is several processes already.
static TURN: Mutex<()> = Mutex::new(());

fn verify(plan: &str, procs: u64, sets: &[String], env: &[(&str, &str)]) -> Output {
    verify_with(plan, &["--procs", &procs.to_string()], sets, env)
}

fn verify_with(plan: &str, args: &[&str], sets: &[String], env: &[(&str, &str)]) -> Output {
    let python = python();
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mpipec"));
    cmd.current_dir(root()).args(["verify", plan, "--python", python]).args(args);
    for s in sets {
        cmd.args(["--set", s]);
    }
    cmd.envs(env.iter().copied()).env("MPIPE_TIMEOUT", "60");
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

/// Every process count of the issue, each with a microbatch count that is a multiple of it
/// and, where the skeleton allows one, one that is not.
fn matrix(plan: &str, schedule: &str, owner: Option<&str>, extra: &[&str], uneven: bool) {
    let mut failures = Vec::new();
    for procs in 2..=4u64 {
        let counts = if uneven { vec![2 * procs, 2 * procs + 1] } else { vec![2 * procs] };
        for m in counts {
            let mut sets = vec![format!("schedule={schedule}"), format!("batch.microbatches={m}")];
            sets.extend(owner.map(|o| format!("owner={o}")));
            sets.extend(extra.iter().map(|s| s.to_string()));
            let out = verify(plan, procs, &sets, &[]);
            let stdout = String::from_utf8_lossy(&out.stdout);
            if !out.status.success() || !stdout.contains("ok: loss, gradients and parameters match") {
                failures.push(format!(
                    "{plan} {sets:?} on {procs} processes:\n{stdout}{}",
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

const LM: &str = "tests/verify/lm.mpipe";
const VLM: &str = "tests/verify/vlm.mpipe";

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
    assert!(stderr.contains("cannot import torch") && stderr.contains("-m pip install torch"), "{stderr}");
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
            let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
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
        let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
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
            let dir = std::env::temp_dir().join(format!("mpipe-split-{procs}-{frozen}-{}", std::process::id()));
            build_torch(VLM, "readable", &dir, &sets);
            let plan = std::fs::read_to_string(dir.join("plan.json")).unwrap();
            let _ = std::fs::remove_dir_all(&dir);
            assert!(plan.contains("\"images\": ["), "{sets:?}: derive splits no encode");
            let out = verify(VLM, procs, &sets[..3], &[]);
            let stdout = String::from_utf8_lossy(&out.stdout);
            if !out.status.success() || !stdout.contains("ok: loss, gradients and parameters match") {
                failures.push(format!("{sets:?}:\n{stdout}{}", String::from_utf8_lossy(&out.stderr)));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
