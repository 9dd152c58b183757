//! The launch-configuration backends. Every example and every plan under tests/backends/plans
//! is emitted for every target (with `nearest` where the target needs it): the files are
//! snapshotted, and checked by each stack's own code where it runs on a CPU (megatron-core's
//! TransformerConfig and layout parser; MindFormers' config, validators and LayerSetting with
//! MindSpore's auto-parallel context and msrun). Where the stack's code cannot run here, its
//! documented rules are checked: in Rust for MindSpeed-MM (`check_mindspeed_mm`), in
//! tests/backends/hyperparallel_check.py for HyperParallel. The Python environments come from
//! scripts/torch-env and scripts/mindformers-env, created outside the repository on first use.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use mpipe::backend::layout::{self, BodyStages};
use mpipe::backend::{Request, Resolved, Target};
use mpipe::build::Artifact;
use mpipe::derive::Derived;
use mpipe::derive::skeletons::rank_of;
use mpipe::plan::Plan;
use serde_json::{Value, json};

const TARGETS: [Target; 4] = [Target::Megatron, Target::MindFormers, Target::MindSpeedMm, Target::HyperParallel];

struct Source {
    key: String,
    plan: Plan,
    derived: Derived,
    step: f64,
}

fn sources() -> Vec<Source> {
    let loader = common::repo_loader(&["examples", "tests/backends/plans"]);
    let mut out = Vec::new();
    for dir in ["examples", "tests/backends/plans"] {
        for path in common::files_under(&common::root().join(dir), "mpipe") {
            let key = path.strip_prefix(common::root()).unwrap().to_string_lossy().into_owned();
            if key.contains("/lib/") {
                continue;
            }
            let checked = mpipe::check(&key, &key, std::fs::read(&path).unwrap(), &loader);
            let plan = checked.plan.unwrap_or_else(|| panic!("{key} does not check"));
            let derived = mpipe::build::derive_checked(&plan).unwrap();
            let step = mpipe::build::simulate(&plan, &derived).report.step_time_s;
            out.push(Source { key, plan, derived, step });
        }
    }
    out
}

/// What `target` emits for `source` with `nearest`, and the plan it runs.
fn emitted(source: &Source, target: Target) -> (Vec<Artifact>, Plan, Derived) {
    let request = Request { target, nearest: true, span: None };
    let (plan, derived) = match mpipe::backend::resolve(request, &source.plan, &source.derived, source.step) {
        Ok(Resolved::AsWritten) => (source.plan.clone(), mpipe::build::derive_checked(&source.plan).unwrap()),
        Ok(Resolved::Nearest { plan, derived, .. }) => (*plan, *derived),
        Err(d) => panic!("{} for {}: {:?}", source.key, target.name(), d),
    };
    (mpipe::backend::artifacts(target, &plan, &derived), plan, derived)
}

fn stem(key: &str) -> String {
    Path::new(key).file_stem().unwrap().to_string_lossy().into_owned()
}

/// A per-rank order is long; its snapshot keeps the step counts and each rank's first steps.
fn digest_order(text: &str) -> String {
    let order: Value = serde_json::from_str(text).unwrap();
    let mut out = String::new();
    for rank in order["ranks"].as_array().unwrap() {
        let steps = rank["steps"].as_array().unwrap();
        let mut counts = std::collections::BTreeMap::<&str, usize>::new();
        for s in steps {
            *counts.entry(s["type"].as_str().unwrap()).or_default() += 1;
        }
        out.push_str(&format!("rank {}: {} steps {:?}\n", rank["rank"], steps.len(), counts));
        for s in steps.iter().take(12) {
            out.push_str(&format!("  {}\n", serde_json::to_string(s).unwrap()));
        }
    }
    out
}

#[test]
fn every_plan_emits_every_target() {
    for source in sources() {
        for target in TARGETS {
            let (artifacts, ..) = emitted(&source, target);
            let mut text = String::new();
            for a in &artifacts {
                text.push_str(&format!("==> {} <==\n", a.path));
                if a.path.ends_with("exec_order.json") {
                    text.push_str(&digest_order(&a.contents));
                } else {
                    text.push_str(&a.contents);
                }
            }
            insta::assert_snapshot!(format!("{}__{}", stem(&source.key), target.name()), text);
        }
    }
}

#[test]
fn emission_is_deterministic() {
    let (first, again) = (sources(), sources());
    for (a, b) in first.iter().zip(&again) {
        for target in TARGETS {
            assert_eq!(emitted(a, target).0, emitted(b, target).0, "{} for {}", a.key, target.name());
        }
    }
}

/// Writes every emitted file under `dir/<plan>/` and returns, per plan, the expectations the
/// checks compare the stacks' own reading with.
fn write_all(dir: &Path, target: Target) -> Vec<Value> {
    let mut cases = Vec::new();
    for source in sources() {
        let (artifacts, plan, derived) = emitted(&source, target);
        let root = dir.join(stem(&source.key));
        for a in &artifacts {
            let path = root.join(&a.path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &a.contents).unwrap();
        }
        let body = BodyStages::of(&plan, &derived);
        let at = |file: &str| root.join(target.name()).join(file).to_string_lossy().into_owned();
        let mut ranks = Vec::new();
        for (b, &n) in body.decoder.iter().enumerate() {
            ranks.extend(std::iter::repeat_n(rank_of(body.mapping, body.pp, b as u32), n as usize));
        }
        let flat = |v: Vec<Vec<u64>>| if body.chunks == 1 { json!(v[0]) } else { json!(v) };
        let c = &plan.cluster;
        let encoder = layout::encoder(&plan);
        cases.push(json!({
            "name": stem(&source.key),
            "launch": at("launch.sh"),
            "config": at("config.yaml"),
            "model": at("model.json"),
            "exec_order": at("exec_order.json"),
            "world": c.devices, "devices": c.devices, "tp": c.tp, "pp": c.pp, "dp": c.dp,
            "microbatches": plan.batch.microbatches,
            "global_batch": layout::global_batch(&plan),
            "vpp": body.chunks,
            "decoder": body.by_chunk(&body.decoder),
            "decoder_stages": body.decoder,
            "decoder_layer_ranks": ranks,
            "encoder_flat": flat(body.by_chunk(&body.encoder)),
            "decoder_flat": flat(body.by_chunk(&body.decoder)),
            "vlm": encoder.is_some(),
            "frozen_encoder": encoder.is_some_and(|(p, _)| p.frozen),
            "trainable_encoder": encoder.is_some_and(|(p, _)| !p.frozen),
            "frozen_decoder": layout::decoder(&plan).is_some_and(|(p, _)| p.frozen),
            "transpose": derived.placement.encoder.is_some(),
            "scheduler": match derived.placement.body.skeleton.name() {
                "gpipe" => "gpipe",
                "zbv" => "zero_bubble_v",
                _ => "1f1b",
            },
        }));
    }
    cases
}

fn python(script: &str) -> PathBuf {
    let out = Command::new(common::root().join("scripts").join(script)).output().expect("runs the env script");
    assert!(out.status.success(), "scripts/{script} failed:\n{}", String::from_utf8_lossy(&out.stderr));
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// Runs `tests/backends/<check>` over the cases of `target` with `python`, in a scratch directory.
fn run_check(python: &Path, check: &str, target: Target) {
    let dir = tempfile_dir(target.name());
    let cases = write_all(&dir, target);
    let cases_path = dir.join("cases.json");
    std::fs::write(&cases_path, serde_json::to_string_pretty(&cases).unwrap()).unwrap();
    let out = Command::new(python)
        .arg(common::root().join("tests/backends").join(check))
        .arg(&cases_path)
        .current_dir(&dir)
        .env("PYTHONPATH", common::root().join("tests/backends"))
        .env("PYTHONWARNINGS", "ignore")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{check} failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(stdout.matches(" ok: ").count(), cases.len(), "{check}: one line per case:\n{stdout}");
    let _ = std::fs::remove_dir_all(&dir);
}

fn tempfile_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mpipec-backends-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Flags of Megatron-LM's parser: `megatron/training/arguments.py` (many generated from the
/// TransformerConfig and TrainingConfig fields) and `examples/multimodal/multimodal_args.py`, at
/// NVIDIA/Megatron-LM d98e8a64. megatron-core's package has no `megatron/training`, so the
/// list is kept here.
const MEGATRON_FLAGS: &[&str] = &[
    "--tensor-model-parallel-size",
    "--pipeline-model-parallel-size",
    "--context-parallel-size",
    "--expert-model-parallel-size",
    "--sequence-parallel",
    "--micro-batch-size",
    "--global-batch-size",
    "--bf16",
    "--fp16",
    "--use-distributed-optimizer",
    "--recompute-granularity",
    "--recompute-method",
    "--recompute-num-layers",
    "--decoder-first-pipeline-num-layers",
    "--decoder-last-pipeline-num-layers",
    "--pipeline-model-parallel-layout",
    "--num-layers-per-virtual-pipeline-stage",
    "--num-virtual-stages-per-pipeline-rank",
    "--num-layers",
    "--hidden-size",
    "--ffn-hidden-size",
    "--num-attention-heads",
    "--kv-channels",
    "--group-query-attention",
    "--num-query-groups",
    "--swiglu",
    "--untie-embeddings-and-output-weights",
    "--num-experts",
    "--moe-router-topk",
    "--moe-ffn-hidden-size",
    "--moe-shared-expert-intermediate-size",
    "--moe-layer-freq",
    "--multi-latent-attention",
    "--q-lora-rank",
    "--kv-lora-rank",
    "--qk-head-dim",
    "--qk-pos-emb-head-dim",
    "--v-head-dim",
    "--seq-length",
    "--decoder-seq-length",
    "--max-position-embeddings",
    // examples/multimodal/multimodal_args.py
    "--language-model-type",
    "--tokenizer-prompt-format",
    "--vision-model-type",
    "--img-h",
    "--img-w",
    "--patch-dim",
    "--freeze-ViT",
    "--freeze-LM",
    "--recompute-vision",
];

/// The environment the Megatron-LM launch scripts are run with, for their checks.
const MEGATRON_ENV: [(&str, &str); 4] = [
    ("LANGUAGE_MODEL_TYPE", "qwen2.5_7B"),
    ("TOKENIZER_PROMPT_FORMAT", "qwen2p5"),
    ("VISION_MODEL_TYPE", "clip"),
    ("MEGATRON_LM", "/opt/Megatron-LM"),
];

/// Megatron-LM's rules on the flags that megatron-core cannot check (they live in
/// `megatron/training/arguments.py`, which its package lacks): every flag is the parser's,
/// none is one "Remove Encoder PP" (b600e38d7b, core_v0.14.0) took away, and `validate_args`
/// holds: WORLD_SIZE divisible by tp·pp·cp, at most one VPP flag, no layout with the first/last
/// flags, `--max-position-embeddings` covering both sequence lengths.
fn check_megatron(case: &Value) {
    let name = case["name"].as_str().unwrap();
    let (argv, env) = launched(case["launch"].as_str().unwrap(), &MEGATRON_ENV, "TORCHRUN");
    let (options, script, f) = torchrun(&argv);
    let world = case["world"].as_u64().unwrap();
    let option = |k: &str| options.get(k).map(String::as_str);
    assert_eq!(option("--nnodes"), Some("1"), "{name}");
    assert_eq!(option("--nproc-per-node"), Some(world.to_string().as_str()), "{name}");
    assert_eq!((option("--node-rank"), option("--master-addr")), (Some("0"), Some("127.0.0.1")), "{name}");
    let entry = if case["vlm"] == true { "examples/multimodal/train.py" } else { "pretrain_gpt.py" };
    assert_eq!(script, format!("/opt/Megatron-LM/{entry}"), "{name}");
    assert_eq!(env.get("CUDA_DEVICE_MAX_CONNECTIONS").map(String::as_str), Some("1"), "{name}");
    let unknown: Vec<&String> = f.keys().filter(|k| !MEGATRON_FLAGS.contains(&k.as_str())).collect();
    assert!(unknown.is_empty(), "{name}: flags Megatron-LM does not have: {unknown:?}");
    let (tp, pp) = (number(&f, "--tensor-model-parallel-size"), number(&f, "--pipeline-model-parallel-size"));
    let cp = f.get("--context-parallel-size").map_or(1, |_| number(&f, "--context-parallel-size"));
    assert_eq!(world % (tp * pp * cp), 0, "{name}");
    let dp = world / (tp * pp * cp);
    assert_eq!(json!([tp, pp, dp]), json!([case["tp"], case["pp"], case["dp"]]), "{name}");
    let vpp_flags = ["--num-layers-per-virtual-pipeline-stage", "--num-virtual-stages-per-pipeline-rank"];
    let layout = f.contains_key("--pipeline-model-parallel-layout");
    assert!(vpp_flags.iter().filter(|v| f.contains_key(**v)).count() + usize::from(layout) <= 1, "{name}");
    let first_last =
        f.contains_key("--decoder-first-pipeline-num-layers") || f.contains_key("--decoder-last-pipeline-num-layers");
    assert!(!(first_last && layout), "{name}: a layout and the first/last flags");
    let positions = number(&f, "--max-position-embeddings");
    assert!(positions >= number(&f, "--seq-length"), "{name}");
    assert!(f.get("--decoder-seq-length").is_none_or(|_| positions >= number(&f, "--decoder-seq-length")), "{name}");
    if case["vlm"] == true {
        assert_eq!(json!(f.contains_key("--freeze-ViT")), case["frozen_encoder"], "{name}");
        assert_eq!(json!(f.contains_key("--freeze-LM")), case["frozen_decoder"], "{name}");
        assert!(f.contains_key("--language-model-type") && f.contains_key("--tokenizer-prompt-format"), "{name}");
    }
}

#[test]
fn megatron_lm_accepts_the_flags() {
    let dir = tempfile_dir("megatron-flags");
    for case in write_all(&dir, Target::Megatron) {
        check_megatron(&case);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn megatron_core_reads_the_split_the_plan_has() {
    run_check(&python("torch-env"), "megatron_check.py", Target::Megatron);
}

#[test]
fn mindformers_and_mindspore_accept_the_configs() {
    run_check(&python("mindformers-env"), "mindformers_check.py", Target::MindFormers);
}

/// What the launcher gets from an emitted launch.sh run as written with `env` added: its
/// command line and environment, recorded by a shim standing in for `$launcher`.
fn launched(script: &str, env: &[(&str, &str)], launcher: &str) -> (Vec<String>, BTreeMap<String, String>) {
    let dir = tempfile_dir(&format!("launch-{launcher}"));
    let (shim, record) = (dir.join("launcher"), dir.join("record"));
    std::fs::write(
        &shim,
        "#!/usr/bin/env bash\nprintf '%s\\0' \"$@\" > \"$MPIPEC_RECORD.argv\"\nenv -0 > \"$MPIPEC_RECORD.env\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&shim, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = Command::new("bash")
        .arg(script)
        .current_dir(&dir)
        .env_remove("NNODES")
        .env_remove("NODE_RANK")
        .env_remove("NPROC_PER_NODE")
        .envs(env.iter().copied())
        .env(launcher, &shim)
        .env("MPIPEC_RECORD", &record)
        .output()
        .unwrap();
    assert!(out.status.success(), "{script}: {}", String::from_utf8_lossy(&out.stderr));
    let read = |ext: &str| std::fs::read_to_string(record.with_extension(ext)).unwrap();
    let argv: Vec<String> = read("argv").split_terminator('\0').map(String::from).collect();
    let env_text = read("env");
    let env = env_text.split_terminator('\0').filter_map(|kv| kv.split_once('=')).map(|(k, v)| (k.into(), v.into()));
    let env = env.collect();
    let _ = std::fs::remove_dir_all(&dir);
    (argv, env)
}

/// torchrun's own options, the script it starts, and that script's `--flag [value]`s (a switch
/// has no value).
type Flags = BTreeMap<String, Option<String>>;

fn torchrun(argv: &[String]) -> (BTreeMap<String, String>, String, Flags) {
    let mut options = BTreeMap::new();
    let mut i = 0;
    while argv[i].starts_with("--") {
        options.insert(argv[i].clone(), argv[i + 1].clone());
        i += 2;
    }
    let mut flags = Flags::new();
    let mut rest = argv[i + 1..].iter().peekable();
    while let Some(name) = rest.next() {
        assert!(name.starts_with("--"), "expected a flag, got {name:?} in {argv:?}");
        let value = rest.next_if(|v| !v.starts_with("--")).cloned();
        flags.insert(name.clone(), value);
    }
    (options, argv[i].clone(), flags)
}

fn number(flags: &Flags, name: &str) -> u64 {
    flags[name].as_deref().and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("{name} is no number: {flags:?}"))
}

/// A module's `pipeline_num_layers` in stage order, after the rules of MindSpeed-MM's
/// `models/vlm_model.py` (pp entries, or with VPP `[vpp][pp]`) and of its checkpoint
/// converters' `check_pp_config` (the list sums to the module's `num_layers`).
fn stage_order(name: &str, module: &Value, pp: u64, vpp: u64) -> Vec<u64> {
    let layers = &module["pipeline_num_layers"];
    let rows: Vec<&Value> = if vpp > 1 { layers.as_array().unwrap().iter().collect() } else { vec![layers] };
    assert_eq!(rows.len() as u64, vpp, "{name}: {layers}");
    let order: Vec<u64> = rows
        .iter()
        .flat_map(|row| {
            let row = row.as_array().unwrap_or_else(|| panic!("{name}: {layers} is not a list per stage"));
            assert_eq!(row.len() as u64, pp, "{name}: {layers}");
            row.iter().map(|n| n.as_u64().unwrap_or_else(|| panic!("{name}: {n} is no layer count")))
        })
        .collect();
    assert_eq!(order.iter().sum::<u64>(), module["num_layers"].as_u64().unwrap(), "{name}: {layers}");
    order
}

/// MindSpeed-MM cannot run here (torch_npu needs CANN, and it is not on PyPI), so its rules,
/// each cited, are checked on what mpipec writes: launch.sh run as written, with torchrun
/// recorded, and model.json read as `configs/config.py:MMConfig` reads it (JSON).
fn check_mindspeed_mm(case: &Value) {
    let name = case["name"].as_str().unwrap();
    let env = [("MINDSPEED_MM", "/opt/MindSpeed-MM"), ("MM_DATA", "/data/data.json"), ("ASCEND_HOME", "/nonexistent")];
    let (argv, launch_env) = launched(case["launch"].as_str().unwrap(), &env, "TORCHRUN");
    let (options, script, f) = torchrun(&argv);
    let world = case["world"].as_u64().unwrap();
    assert_eq!((options["--nproc-per-node"].clone(), options["--nnodes"].as_str()), (world.to_string(), "1"), "{name}");
    assert_eq!(script, "/opt/MindSpeed-MM/pretrain_vlm.py", "{name}");
    // The environment of examples/qwen2.5vl/finetune_qwen2_5_vl_7b.sh.
    for (k, v) in [
        ("CUDA_DEVICE_MAX_CONNECTIONS", "1"),
        ("HCCL_CONNECT_TIMEOUT", "1200"),
        ("TASK_QUEUE_ENABLE", "2"),
        ("CPU_AFFINITY_CONF", "1"),
        ("ASCEND_GLOBAL_LOG_LEVEL", "3"),
    ] {
        assert_eq!(launch_env.get(k).map(String::as_str), Some(v), "{name}: {k}");
    }
    assert_eq!(f["--distributed-backend"].as_deref(), Some("nccl"), "{name}");
    assert_eq!(f["--mm-data"].as_deref(), Some("/data/data.json"), "{name}");
    // docs/features/virtual_pipeline_parallel.md: these two are deprecated.
    assert!(!f.contains_key("--num-layers-per-virtual-pipeline-stage"), "{name}");
    assert!(!f.contains_key("--num-virtual-stages-per-pipeline-rank"), "{name}");
    // megatron/core/num_microbatches_calculator.py's batch rules.
    let (tp, pp) = (number(&f, "--tensor-model-parallel-size"), number(&f, "--pipeline-model-parallel-size"));
    assert_eq!(world % (tp * pp), 0, "{name}");
    let dp = world / (tp * pp);
    let (gbs, mbs) = (number(&f, "--global-batch-size"), number(&f, "--micro-batch-size"));
    assert_eq!(gbs % (mbs * dp), 0, "{name}");
    assert_eq!(gbs / (mbs * dp), case["microbatches"].as_u64().unwrap(), "{name}");
    let model: Value =
        serde_json::from_str(&std::fs::read_to_string(f["--mm-model"].as_deref().unwrap()).unwrap()).unwrap();
    // The arguments patch: --virtual-pipeline-model-parallel-size is the decoder list's length,
    // exported as VP_SIZE beside it.
    let vpp = f
        .get("--virtual-pipeline-model-parallel-size")
        .map_or(1, |_| number(&f, "--virtual-pipeline-model-parallel-size"));
    if vpp > 1 {
        assert_eq!(launch_env.get("VP_SIZE"), Some(&vpp.to_string()), "{name}");
    }
    let decoder = stage_order(name, &model["text_decoder"], pp, vpp);
    assert_eq!(model["text_decoder"]["pipeline_num_layers"], case["decoder_flat"], "{name}");
    if case["vlm"] == true {
        let vit = &model["image_encoder"]["vision_encoder"];
        let encoder = stage_order(name, vit, pp, vpp);
        assert_eq!(vit["pipeline_num_layers"], case["encoder_flat"], "{name}");
        // Stage order is D0V0 -> D1V0 -> ... -> D0V1: the ViT's layers all come first.
        let last_vit = encoder.iter().rposition(|&n| n > 0).unwrap();
        let first_llm = decoder.iter().position(|&n| n > 0).unwrap();
        assert!(last_vit <= first_llm, "{name}: ViT layers after the first LLM layer: {encoder:?} / {decoder:?}");
        assert_eq!(vit["freeze"], case["frozen_encoder"], "{name}");
    } else {
        assert!(model["image_encoder"].is_null(), "{name}");
    }
}

#[test]
fn mindspeed_mm_rules_hold() {
    let dir = tempfile_dir("mindspeed-mm");
    let cases = write_all(&dir, Target::MindSpeedMm);
    for case in &cases {
        check_mindspeed_mm(case);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn hyperparallel_rules_hold() {
    run_check(&python("mindformers-env"), "hyperparallel_check.py", Target::HyperParallel);
}

/// The emitted msrun script, as written, starts a scheduler and two CPU workers on loopback;
/// each joins the cluster, applies the config's parallel context and exits.
#[test]
fn msrun_starts_two_workers_on_loopback() {
    let python = python("mindformers-env");
    let dir = tempfile_dir("msrun");
    let source = sources().into_iter().find(|s| s.key.ends_with("two_devices.mpipe")).unwrap();
    let (artifacts, ..) = emitted(&source, Target::MindFormers);
    for a in &artifacts {
        let path = dir.join(&a.path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &a.contents).unwrap();
    }
    let bin = python.parent().unwrap();
    let port = 20000 + std::process::id() % 20000;
    let out = Command::new("bash")
        .arg(dir.join("mindformers/launch.sh"))
        .current_dir(&dir)
        .env("PATH", format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default()))
        .env("MSRUN", bin.join("msrun"))
        .env("MINDFORMERS_ENTRY", common::root().join("tests/backends/mindformers_worker.py"))
        .env("MASTER_PORT", port.to_string())
        .env("LOG_DIR", dir.join("logs"))
        .env("CLUSTER_TIME_OUT", "120")
        .output()
        .unwrap();
    let logs: String = std::fs::read_dir(dir.join("logs"))
        .map(|entries| {
            entries.filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok()).collect::<Vec<_>>().join("\n")
        })
        .unwrap_or_default();
    assert!(
        out.status.success(),
        "msrun failed:\n{}\n{}\nlogs:\n{logs}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    for rank in 0..2 {
        assert!(logs.contains(&format!("mpipec worker ok: rank {rank} of 2")), "worker {rank} did not finish:\n{logs}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// One cell of the skeleton × target table of docs/backends.md: what `verdict` says of `schedule`.
fn cell(text: &str, target: Target) -> String {
    let checked = mpipe::check("plan.mpipe", "plan.mpipe", text.as_bytes().to_vec(), &common::repo_loader(&[]));
    let plan = checked.plan.unwrap_or_else(|| panic!("{text}: {:?}", checked.diagnostics));
    let derived = mpipe::build::derive_checked(&plan).unwrap();
    match mpipe::backend::native::verdict(target, &plan, &derived) {
        mpipe::backend::native::Verdict::Native => "native".into(),
        mpipe::backend::native::Verdict::Impossible { .. } => "no".into(),
        mpipe::backend::native::Verdict::Nearest { plan: nearest, .. } => {
            let skeletons: Vec<String> = nearest.schedule.iter().map(|s| s.skeleton.to_string()).collect();
            let mut text = if nearest.cut.regions.len() < plan.cut.regions.len() {
                format!("encoder in stage 0, {}", skeletons.join(", "))
            } else {
                skeletons.join(", ")
            };
            if nearest.owner != plan.owner && nearest.owner.is_some() {
                text.push_str(", round_robin");
            }
            format!("nearest: {text}")
        }
    }
}

/// The table of docs/backends.md, from the code: a row per schedule, a column per target.
fn native_table() -> String {
    let lm = |schedule: &str| {
        format!(
            "use std::hardware::h100_sxm;\nuse std::models::llama3_8b;\nmodel lm {{ llm = llama3_8b; }}\n\
             cluster {{ hardware = h100_sxm; devices = 4; pp = 4; }}\nbatch {{ microbatches = 8; seq_len = 4096; }}\n\
             cut llm;\nschedule {schedule};\n"
        )
    };
    let vlm = |cut: &str, schedule: &str, owner: &str| {
        let head = if cut.contains("head") { "head = siglip_so400m;" } else { "" };
        format!(
            "use std::hardware::h100_sxm;\nuse std::models::{{siglip_so400m, qwen3_8b}};\n\
             model vlm {{ enc = siglip_so400m {{ frozen = true; }} llm = qwen3_8b; {head} }}\n\
             cluster {{ hardware = h100_sxm; devices = 4; pp = 4; }}\n\
             batch {{ microbatches = 8; seq_len = 4096; image_tokens = 729; }}\ncut {cut};\nschedule {schedule};\n{owner}"
        )
    };
    let rows: Vec<(&str, String)> = vec![
        ("`gpipe`", lm("gpipe")),
        ("`1f1b`", lm("1f1b")),
        ("`interleaved(2)`", lm("interleaved(2)")),
        ("`zb1p(2)`", lm("zb1p(2)")),
        ("`zbv`", lm("zbv")),
        ("`dualpipev`", lm("dualpipev")),
        ("`transpose, 1f1b` (`by_microbatch`)", vlm("enc | llm", "transpose, 1f1b", "owner by_microbatch;\n")),
        (
            "`transpose(prefix), 1f1b` (`round_robin`)",
            vlm("enc | llm", "transpose(prefix), 1f1b", "owner round_robin;\n"),
        ),
        (
            "`transpose(prefix), zbv` (`round_robin`)",
            vlm("enc | llm", "transpose(prefix), zbv", "owner round_robin;\n"),
        ),
        ("`1f1b, 1f1b` (encoder sharded)", vlm("enc | llm", "1f1b, 1f1b", "")),
        ("`1f1b, transpose` (a replicated head)", vlm("enc + llm | head", "1f1b, transpose", "")),
    ];
    let mut out = String::from("| schedule | torch | megatron | mindformers | mindspeed-mm | hyperparallel |\n");
    out.push_str("|---|---|---|---|---|---|\n");
    for (name, text) in rows {
        let cells: Vec<String> = Target::ALL.iter().map(|&t| cell(&text, t)).collect();
        out.push_str(&format!("| {name} | {} |\n", cells.join(" | ")));
    }
    out
}

#[test]
fn the_documented_table_is_what_the_backends_do() {
    let doc = std::fs::read_to_string(common::root().join("docs/backends.md")).unwrap();
    let table = native_table();
    assert!(doc.contains(&table), "docs/backends.md's skeleton x target table is stale; it should read:\n{table}");
}

/// `build` refuses a target that cannot run the plan as written and writes nothing; with
/// `--nearest` it writes the nearest plan's files and warns.
#[test]
fn build_refuses_or_emits_the_nearest_plan() {
    let dir = tempfile_dir("cli");
    let out = dir.join("out");
    let build = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_mpipec"))
            .current_dir(common::root())
            .args(["build", "examples/paper_small.mpipe", "-o"])
            .arg(&out)
            .args(extra)
            .output()
            .unwrap()
    };
    let refused = build(&["--target", "torch,megatron"]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("error[E0401]") && stderr.contains("--nearest"), "{stderr}");
    assert!(!out.exists(), "a refused build wrote {}", out.display());
    let emitted = build(&["--target", "torch,megatron", "--nearest"]);
    let stderr = String::from_utf8_lossy(&emitted.stderr);
    assert!(emitted.status.success(), "{stderr}");
    assert!(stderr.contains("warning[W0004]"), "{stderr}");
    assert!(out.join("megatron/launch.sh").exists() && out.join("torch/launch.sh").exists());
    let unknown = build(&["--target", "deepspeed", "--force"]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("unknown target `deepspeed`"));
    let _ = std::fs::remove_dir_all(&dir);
}
