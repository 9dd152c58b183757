//! `mpipec train` end to end on CPU and gloo: transformers' Qwen2.5-VL and LLaVA, from model
//! directories the tests write (tests/python/tiny_vlm.py: a tiny random config, a tokenizer
//! built in code, the real image processor, PNGs of several sizes), trained with plans at P = 2
//! and 4 (chunks with a trainable encoder and a 1f1b body at P = 2; lookahead with a frozen
//! encoder and a zbv body at P = 4; LLaVA with a zbv body at P = 2 x dp 2); each run's loss and
//! every gradient must equal one process's (`--check`), a run stopped at step 2 and resumed
//! must log steps 3 and 4 bit for bit as one that never stopped, and bad data is refused naming
//! its file and line before any step.
//!
//! torch, transformers and Pillow come from `scripts/torch-env`. Two runs at a time, as in
//! tests/verify.rs: each is several processes already.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use common::{root, torch_python as python, torch_turn};

const VLM: &str = "tests/verify/vlm.mpipe";
/// vlm.mpipe's model: the fixtures' vision blocks and decoder layers.
const VISION_LAYERS: &str = "4";
const TEXT_LAYERS: &str = "12";

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mpipec-train-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A family's model directory, images and data.jsonl, written once per test binary.
fn fixture(family: &'static str) -> &'static Path {
    static FIXTURES: [OnceLock<PathBuf>; 2] = [OnceLock::new(), OnceLock::new()];
    let slot = if family == "qwen2_5_vl" { &FIXTURES[0] } else { &FIXTURES[1] };
    slot.get_or_init(|| {
        let dir = scratch(family);
        let out = Command::new(python())
            .arg(root().join("tests/python/tiny_vlm.py"))
            .arg(&dir)
            .args(["--family", family, "--vision-layers", VISION_LAYERS, "--text-layers", TEXT_LAYERS])
            .output()
            .unwrap();
        assert!(out.status.success(), "tiny_vlm.py failed:\n{}", String::from_utf8_lossy(&out.stderr));
        dir
    })
}

/// `mpipec train PLAN` on a family's fixture, with `args` and `--set`s, in its turn.
fn train_plan(plan: &str, family: &'static str, args: &[&str], sets: &[&str]) -> Output {
    train_with(plan, family, args, sets, &[])
}

fn train_with(plan: &str, family: &'static str, args: &[&str], sets: &[&str], env: &[(&str, &str)]) -> Output {
    let dir = fixture(family);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mpipec"));
    cmd.current_dir(root()).args(["train", plan, "--python", python(), "--model"]).arg(dir.join("model"));
    cmd.arg("--data").arg(dir.join("data.jsonl")).args(args);
    for s in sets {
        cmd.args(["--set", s]);
    }
    let _turn = torch_turn();
    cmd.envs(env.iter().copied()).env("MPIPE_TIMEOUT", "60").output().expect("running mpipec train")
}

fn train(family: &'static str, args: &[&str], sets: &[&str]) -> Output {
    train_plan(VLM, family, args, sets)
}

fn assert_matches_one_process(what: &str, out: &Output) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success()
            && stdout.contains("ok: the loss and every gradient of each step match the single-process run"),
        "{what}:\n{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The `loss` of each line of a --log file, as written.
fn logged_losses(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            for key in ["step", "loss", "seconds", "tokens"] {
                assert!(v.get(key).is_some(), "a log line without `{key}`: {line}");
            }
            format!("step {} loss {}", v["step"], v["loss"])
        })
        .collect()
}

/// Chunks, a trainable encoder and a plan per batch (`owner adaptive`): the fixture's images
/// come in five sizes, so every step's batch has its own image tokens, and each step runs the
/// plan derived for them while the step before ran. The plan's encoder is costed wider than the
/// fixture's and its batch short, so that the encoder's work weighs enough for a batch's own
/// plan to beat the static one at the fixture's few tokens an image.
#[test]
fn qwen_with_chunks_a_trainable_encoder_and_a_plan_per_batch_matches_one_process() {
    let out = train(
        "qwen2_5_vl",
        &["--procs", "2", "--steps", "4", "--check"],
        &[
            "schedule=transpose(chunks = 2), 1f1b",
            "model.enc.frozen=false",
            "batch.microbatches=4",
            "owner=adaptive",
            "model.enc.hidden=4096",
            "model.enc.ffn=16384",
            "batch.seq_len=128",
            "batch.image_tokens=30",
        ],
    );
    assert_matches_one_process("qwen2_5_vl, P = 2, transpose(chunks = 2), trainable encoder, owner adaptive", &out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary =
        stdout.lines().find(|l| l.starts_with("per-batch plans: 4 steps, ")).unwrap_or_else(|| panic!("{stdout}"));
    assert!(!summary.contains(", 0 on their own plan"), "no step ran its batch's own plan: {summary}");
}

/// A run that ends well with a wrong first-step gradient (`MPIPE_FAIL_AT=1:0:wrong`) fails
/// the check, after its float64 run (AdamW, the clip and the schedule in float64) has shown
/// the tensor far off it.
#[test]
fn a_wrong_gradient_fails_the_check_against_float64_too() {
    let sets = ["schedule=transpose, 1f1b", "batch.microbatches=2"];
    let args = ["--procs", "2", "--steps", "2", "--check"];
    let out = train_with(VLM, "llava", &args, &sets, &[("MPIPE_FAIL_AT", "1:0:wrong")]);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(stderr.contains("error: outside tolerance") && stderr.contains("worst step 0 "), "{stderr}");
    let exact = stdout.lines().find(|l| l.contains("held to a float64 run")).unwrap_or_default();
    assert!(exact.starts_with("1 tensor(s) past rel 1e-05 (worst step 0 "), "{stdout}");
}

/// Lookahead with a frozen encoder and a zbv body at P = 4: the run matches one process, and
/// stopped after step 2 and resumed it logs steps 3 and 4 and ends with the parameters and
/// optimizer state exactly as the run that never stopped.
#[test]
fn qwen_with_lookahead_and_a_zbv_body_matches_one_process_and_resumes_bit_identically() {
    let dir = scratch("resume");
    let sets = ["schedule=transpose(chunks = 4, lookahead = 1), zbv", "batch.microbatches=8"];
    let whole = dir.join("whole.jsonl");
    let uninterrupted = dir.join("uninterrupted");
    let common = ["--procs", "4"];
    let out = train(
        "qwen2_5_vl",
        &[
            &common[..],
            &["--steps", "4", "--check", "--log", whole.to_str().unwrap(), "--save"],
            &[uninterrupted.to_str().unwrap()],
        ]
        .concat(),
        &sets,
    );
    assert_matches_one_process("qwen2_5_vl, P = 4, transpose(chunks = 4, lookahead = 1), zbv, frozen encoder", &out);

    let saved = dir.join("checkpoints");
    let stop = ["--steps", "4", "--stop-after", "2", "--save", saved.to_str().unwrap()];
    let out = train("qwen2_5_vl", &[&common[..], &stop[..]].concat(), &sets);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let resumed = dir.join("resumed.jsonl");
    let resume = ["--steps", "4", "--resume", saved.to_str().unwrap(), "--log", resumed.to_str().unwrap(), "--save"];
    let resume = [&resume[..], &[saved.to_str().unwrap()]].concat();
    let out = train("qwen2_5_vl", &[&common[..], &resume[..]].concat(), &sets);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    let whole = logged_losses(&whole);
    assert_eq!(whole.len(), 4, "{whole:?}");
    assert_eq!(logged_losses(&resumed), whole[2..], "steps 3 and 4 after resuming from step 2");
    let out = Command::new(python())
        .args(["-c", SAME_CHECKPOINTS])
        .arg(uninterrupted.join("step-000004"))
        .arg(saved.join("step-000004"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Exits 1 unless two checkpoint directories hold the same files with bit-identical tensors
/// (parameters, optimizer state) and equal values otherwise.
const SAME_CHECKPOINTS: &str = r#"
import os, sys, torch
def same(a, b):
    if torch.is_tensor(a):
        return torch.is_tensor(b) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b
x, y = sys.argv[1:3]
files = sorted(f for f in os.listdir(x) if f.endswith(".pt"))
assert files == sorted(f for f in os.listdir(y) if f.endswith(".pt")), (os.listdir(x), os.listdir(y))
for f in files:
    load = lambda d: torch.load(os.path.join(d, f), weights_only=False)
    if not same(load(x), load(y)):
        sys.exit(f"{f} differs")
"#;

#[test]
fn llava_with_a_zbv_body_and_two_replicas_matches_one_process() {
    let out = train(
        "llava",
        &["--procs", "2", "--dp", "2", "--steps", "4", "--check"],
        &["schedule=transpose, zbv", "model.enc.frozen=false", "batch.microbatches=8"],
    );
    assert_matches_one_process("llava, P = 2 x dp 2, transpose, zbv, trainable encoder", &out);
}

/// A data file with a line that is not JSON, a missing image and a sample longer than seq_len:
/// one error naming each line, before any step (no log line written).
#[test]
fn bad_data_is_refused_naming_each_line_before_any_step() {
    let dir = scratch("bad");
    let data = dir.join("bad.jsonl");
    let images = fixture("qwen2_5_vl").join("images");
    let turn = |image: &str| {
        format!(
            r#"{{"images": [{image}], "conversations": [{{"from": "human", "value": "{}what"}}, {{"from": "gpt", "value": "red"}}]}}"#,
            "<image>".repeat(image.split(',').count())
        )
    };
    let lines = [
        turn(r#""0.png""#),
        "{\"images\": [".to_string(),
        turn(r#""missing.png""#),
        turn(&[r#""1.png""#; 5].join(", ")),
    ];
    std::fs::write(&data, lines.join("\n") + "\n").unwrap();
    let log = dir.join("log.jsonl");
    let out = Command::new(env!("CARGO_BIN_EXE_mpipec"))
        .current_dir(root())
        .args(["train", VLM, "--python", python(), "--procs", "2", "--steps", "1", "--set", "batch.seq_len=64"])
        .arg("--model")
        .arg(fixture("qwen2_5_vl").join("model"))
        .arg("--data")
        .arg(&data)
        .arg("--images")
        .arg(&images)
        .arg("--log")
        .arg(&log)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let at = |line: usize| format!("{}:{line}: ", data.display());
    assert!(stderr.contains(&format!("{}not JSON", at(2))), "{stderr}");
    assert!(
        stderr.contains(&format!("{}the image `", at(3))) && stderr.contains("missing.png` does not exist"),
        "{stderr}"
    );
    let long = format!("{}93 tokens (75 of them for its 5 images), more than the plan's seq_len = 64", at(4));
    assert!(stderr.contains(&long), "{stderr}");
    assert!(!stderr.contains(&at(1)), "line 1 is good:\n{stderr}");
    assert!(!log.exists(), "a step ran:\n{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// One process of a torchrun job (RANK set) whose size is not the plan's: it says so naming its
/// rank and the size to launch, before any step, without a traceback.
#[test]
fn a_torchrun_job_of_another_size_is_refused_naming_the_rank() {
    let dir = scratch("torchrun");
    let job = dir.join("job");
    let model = fixture("llava").join("model");
    let data = fixture("llava").join("data.jsonl");
    let out = Command::new(env!("CARGO_BIN_EXE_mpipec"))
        .current_dir(root())
        .args(["train", VLM, "--python", python(), "--procs", "2", "--steps", "1", "--model"])
        .arg(&model)
        .arg("--data")
        .arg(&data)
        .arg("--prepare")
        .arg(&job)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    let package =
        stdout.split("PYTHONPATH=").nth(1).and_then(|rest| rest.split(' ').next()).expect("the printed command");
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let _turn = torch_turn();
    let out = Command::new(python())
        .args(["-m", "mpipec.train", "--job"])
        .arg(&job)
        .arg("--model")
        .arg(&model)
        .arg("--data")
        .arg(&data)
        .args(["--steps", "1"])
        .env("PYTHONPATH", package)
        .envs([("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "127.0.0.1")])
        .env("MASTER_PORT", port.to_string())
        .envs([("MPIPEC_BACKEND", "gloo"), ("MPIPE_TIMEOUT", "60")])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "error: rank 0: the plan has 2 ranks (pp 2 x dp 1 x tp 1); this job has 1 processes: launch it with 2"
        ) && !stderr.contains("Traceback"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A model whose layers are not the plan's is refused naming both.
#[test]
fn a_model_that_is_not_the_plans_is_refused() {
    let out = train_plan("tests/verify/lm.mpipe", "llava", &["--procs", "2", "--steps", "1"], &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("the model has 4 vision blocks and 12 decoder layers; the plan's model has 0 encoder layers and 16 decoder layers"),
        "{stderr}"
    );
}

/// Options that are wrong on their face, and a plan with tp > 1, are refused before Python starts.
#[test]
fn bad_options_are_refused_before_python_starts() {
    let refused = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_mpipec"))
            .current_dir(root())
            .args(["train", VLM, "--python", "/nonexistent/python", "--steps", "2"])
            .args(args)
            .output()
            .unwrap()
    };
    let out = refused(&["--model", "no/such/model", "--data", "no/such.jsonl", "--lr", "0"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    for needle in [
        "--model `no/such/model` is not a directory",
        "--data `no/such.jsonl` is not a file",
        "--lr must be a positive",
    ] {
        assert!(stderr.contains(needle), "{needle}:\n{stderr}");
    }
    let out = refused(&["--model", "tests", "--data", VLM, "--save-every", "2"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--save"), "{stderr}");
    let out = refused(&["--model", "tests", "--data", VLM, "--set", "cluster.tp=2", "--set", "cluster.devices=8"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("the plan has tp = 2") && stderr.contains("--target megatron"), "{stderr}");
}

/// `--prepare DIR` writes the run (the plan and what plan.json does not hold) and prints how to
/// start it here and under torchrun, without starting Python.
#[test]
fn prepare_writes_the_run_and_the_commands() {
    let dir = scratch("prepare");
    let out = Command::new(env!("CARGO_BIN_EXE_mpipec"))
        .current_dir(root())
        .args(["train", VLM, "--python", "/nonexistent/python", "--model", "tests", "--data", VLM, "--steps", "2"])
        .args(["--procs", "2", "--dp", "2", "--prepare"])
        .arg(&dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        stdout.contains("-m mpipec.train --job") && stdout.contains("torchrun") && stdout.contains("4 processes"),
        "{stdout}"
    );
    let layout: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("train.json")).unwrap()).unwrap();
    assert_eq!((layout["kinds"].as_array().map(Vec::len), &layout["seq_len"]), (Some(16), &serde_json::json!(4096)));
    let plan: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("plan.json")).unwrap()).unwrap();
    assert_eq!((&plan["pipeline"]["ranks"], &plan["pipeline"]["dp"]), (&serde_json::json!(2), &serde_json::json!(2)));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn help_names_the_data_format_and_the_log() {
    let out = Command::new(env!("CARGO_BIN_EXE_mpipec")).args(["train", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "--model",
        "--data",
        "LLaVA conversation JSONL",
        "--resume",
        "--save-every",
        "{\"step\", \"loss\", \"seconds\", \"tokens\"}",
    ] {
        assert!(help.contains(needle), "train --help does not name {needle}:\n{help}");
    }
}
