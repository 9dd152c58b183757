//! The launch-configuration backends. Every example and every plan under tests/backends/plans
//! is emitted for every target (with `nearest` where the target needs it): the files are
//! snapshotted, and checked by each stack's own code where it runs on a CPU (megatron-core's
//! TransformerConfig and layout parser; MindFormers' config, validators and LayerSetting with
//! MindSpore's auto-parallel context and msrun). Where the stack's code cannot run here, its
//! documented rules are checked in Rust: MindSpeed-MM's (`check_mindspeed_mm`), HyperParallel's
//! config and launch line (`check_hyperparallel_config`, reading the YAML with serde_norway) and
//! its orders (`check_hyperparallel_order`). Megatron-LM's parser and validate_args, which
//! megatron-core lacks, are re-checked in Rust too (`check_megatron`). The Python environments
//! come from scripts/torch-env and scripts/mindformers-env, created outside the repository on
//! first use.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use mpipe::backend::layout::{self, BodyStages};
use mpipe::backend::native::{Verdict, verdict};
use mpipe::backend::{Request, Target};
use mpipe::driver::{Make, Products};
use mpipe::outputs::Artifact;
use mpipe::plan::Plan;
use mpipe::skeletons::rank_of;
use serde_json::{Value, json};

const TARGETS: [Target; 4] = [Target::Megatron, Target::MindFormers, Target::MindSpeedMm, Target::HyperParallel];

struct Source {
    key: String,
    plan: Plan,
}

fn sources() -> Vec<Source> {
    let loader = common::repo_loader(&["examples", "tests/backends/plans"]);
    let mut out = Vec::new();
    for dir in ["examples", "tests/backends/plans"] {
        for path in common::files_under(&common::root().join(dir), "mpipe") {
            let key = path.strip_prefix(common::root()).unwrap().to_string_lossy().into_owned();
            // The published runs are the cost model's reference plans (tests/published.rs), up
            // to thousands of devices; the examples already cover what they would emit.
            if key.contains("/lib/") || key.contains("/published/") {
                continue;
            }
            let checked = mpipe::driver::compile(&key, &key, std::fs::read(&path).unwrap(), &loader);
            let plan = checked.plan.unwrap_or_else(|| panic!("{key} does not check"));
            out.push(Source { key, plan });
        }
    }
    out
}

/// What each of `targets` emits for `source` with `nearest`, through the driver as `mpipec
/// build --target … --nearest` runs it: the plan as written built once for all of them (its
/// search is what costs, on the large examples).
fn answers<'p>(source: &'p Source, targets: &[Target]) -> Products<'p> {
    let requests: Vec<Request> = targets.iter().map(|&target| Request { target, nearest: true, span: None }).collect();
    let products = mpipe::driver::produce(&source.plan, &requests, Make::Files, &|| true).unwrap().unwrap();
    for answer in &products.answers {
        assert!(!answer.refused, "{} for {}: {:?}", source.key, answer.target.name(), answer.diagnostics);
    }
    products
}

/// What `target` emits for `source` with `nearest`.
fn emitted(source: &Source, target: Target) -> Vec<Artifact> {
    answers(source, &[target]).answers.remove(0).artifacts
}

/// What every target emits for `source`.
fn emitted_by_each(source: &Source) -> Vec<(Target, Vec<Artifact>)> {
    answers(source, &TARGETS).answers.into_iter().map(|a| (a.target, a.artifacts)).collect()
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
        for (target, artifacts) in emitted_by_each(&source) {
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
        assert_eq!(emitted_by_each(a), emitted_by_each(b), "{}", a.key);
    }
}

/// Writes every emitted file under `dir/<plan>/` and returns, per plan, the expectations the
/// checks compare the stacks' own reading with.
fn write_all(dir: &Path, target: Target) -> Vec<Value> {
    let mut cases = Vec::new();
    for source in sources() {
        let mut products = answers(&source, &[target]);
        let answer = products.answers.remove(0);
        // The plan in the form the target runs: its nearest, or as written.
        let built = answer.nearest.as_ref().unwrap_or(&products.built);
        let (artifacts, plan) = (&answer.artifacts, &source.plan);
        let body = BodyStages::of(&built.resolved, &built.derived.ir);
        let root = dir.join(stem(&source.key));
        for a in artifacts {
            let path = root.join(&a.path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &a.contents).unwrap();
        }
        let at = |file: &str| root.join(target.name()).join(file).to_string_lossy().into_owned();
        let mut ranks = Vec::new();
        for (b, &n) in body.decoder.iter().enumerate() {
            ranks.extend(std::iter::repeat_n(rank_of(body.mapping, body.pp, b as u32), n as usize));
        }
        let flat = |v: Vec<Vec<u64>>| if body.chunks == 1 { json!(v[0]) } else { json!(v) };
        let c = &plan.cluster;
        let encoder = layout::encoder(plan);
        cases.push(json!({
            "name": stem(&source.key),
            "launch": at("launch.sh"),
            "config": at("config.yaml"),
            "model": at("model.json"),
            "exec_order": at("exec_order.json"),
            "world": c.devices, "devices": c.devices, "tp": c.tp, "pp": c.pp, "dp": c.dp,
            "microbatches": plan.batch.microbatches,
            "global_batch": layout::global_batch(plan),
            "vpp": body.chunks,
            "decoder": body.by_chunk(&body.decoder),
            "decoder_stages": body.decoder,
            "decoder_layer_ranks": ranks,
            "encoder_flat": flat(body.by_chunk(&body.encoder)),
            "decoder_flat": flat(body.by_chunk(&body.decoder)),
            "vlm": encoder.is_some(),
            "frozen_encoder": encoder.is_some_and(|(p, _)| p.frozen),
            "trainable_encoder": encoder.is_some_and(|(p, _)| !p.frozen),
            "frozen_decoder": layout::decoder(plan).is_some_and(|(p, _)| p.frozen),
            "transpose": built.resolved.choices.encoder.is_some(),
            "scheduler": match built.resolved.body().0.name() {
                "gpipe" => "gpipe",
                "zbv" => "zero_bubble_v",
                _ => "1f1b",
            },
        }));
    }
    cases
}

fn python(script: &str) -> PathBuf {
    PathBuf::from(common::setup(script))
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
    let (options, script, args) = split_torchrun(argv);
    let mut flags = Flags::new();
    let mut rest = args.iter().peekable();
    while let Some(name) = rest.next() {
        assert!(name.starts_with("--"), "expected a flag, got {name:?} in {argv:?}");
        let value = rest.next_if(|v| !v.starts_with("--")).cloned();
        flags.insert(name.clone(), value);
    }
    (options, script.clone(), flags)
}

/// torchrun's own options, the script it starts, and that script's arguments as given.
fn split_torchrun(argv: &[String]) -> (BTreeMap<String, String>, &String, &[String]) {
    let mut options = BTreeMap::new();
    let mut i = 0;
    while argv[i].starts_with("--") {
        options.insert(argv[i].clone(), argv[i + 1].clone());
        i += 2;
    }
    (options, &argv[i], &argv[i + 1..])
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

/// HyperParallel's step types: MetaStepType (core/pipeline_parallel/utils.py) and MpipeStepType
/// (mpipe/step_types.py, with the owner-backward steps of the ttachon/hyper-parallel version).
const HYPERPARALLEL_STEPS: &[&str] = &[
    "DATA_LOAD",
    "DATA_SEND",
    "DATA_RECV",
    "FWD",
    "BWD",
    "FWD_SEND",
    "FWD_RECV",
    "BWD_SEND",
    "BWD_RECV",
    "MPIPE_PARAM_BROADCAST",
    "MPIPE_TRANSPOSE_FWD",
    "MPIPE_FWD_SEND",
    "MPIPE_FWD_RECV",
    "MPIPE_GRAD_SEND",
    "MPIPE_GRAD_RECV_WITH_BACKWARD",
    "MPIPE_GRAD_REDUCE",
];

/// One step of exec_order.json: its type, microbatch and stage (-1 for the encoder's prefix).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Step {
    kind: String,
    mb: Option<i64>,
    stage: Option<i64>,
}

impl Step {
    fn of(value: &Value) -> Step {
        let mut keys: Vec<&str> = value.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(keys, ["micro_index", "stage_index", "type"], "{value}");
        Step {
            kind: value["type"].as_str().unwrap().into(),
            mb: value["micro_index"].as_i64(),
            stage: value["stage_index"].as_i64(),
        }
    }

    fn new(kind: &str, mb: Option<i64>, stage: i64) -> Step {
        Step { kind: kind.into(), mb, stage: Some(stage) }
    }

    /// The peer rank and the step it must post at the same place of its queue, for a transfer.
    fn counterpart(&self, pp: i64, nt: i64) -> Option<(i64, Step)> {
        let (kind, mb, stage) = (self.kind.as_str(), self.mb, self.stage.unwrap_or(0));
        let owner = || mb.unwrap() % nt;
        if self.stage == Some(-1) {
            return match kind {
                "DATA_SEND" | "MPIPE_FWD_SEND" => Some((0, Step::new(&kind.replace("SEND", "RECV"), mb, -1))),
                "DATA_RECV" | "MPIPE_FWD_RECV" => Some((owner(), Step::new(&kind.replace("RECV", "SEND"), mb, -1))),
                _ => None,
            };
        }
        let (peer, wants, at) = match kind {
            "MPIPE_GRAD_SEND" => return Some((owner(), Step::new("MPIPE_GRAD_RECV_WITH_BACKWARD", mb, 0))),
            "MPIPE_GRAD_RECV_WITH_BACKWARD" => return Some((0, Step::new("MPIPE_GRAD_SEND", mb, 0))),
            "DATA_SEND" => (stage + 1, "DATA_RECV", stage + 1),
            "FWD_SEND" => (stage + 1, "FWD_RECV", stage + 1),
            "BWD_RECV" => (stage + 1, "BWD_SEND", stage + 1),
            "DATA_RECV" => (stage - 1, "DATA_SEND", stage - 1),
            "FWD_RECV" => (stage - 1, "FWD_SEND", stage - 1),
            "BWD_SEND" => (stage - 1, "BWD_RECV", stage - 1),
            _ => return None,
        };
        Some((peer.rem_euclid(pp), Step::new(wants, mb, at)))
    }
}

/// The rules of HyperParallel's ScheduleMPipeTranspose (overflow "full", owner-backward for a
/// trainable tower) over ScheduleInterleaved1F1B, from docs/mpipe_transpose.md, mpipe/schedule.py
/// and tests/ut/core/pipeline_parallel/test_mpipe_transpose.py and
/// test_interleaved_less_memory.py (mindspore-ai/hyper-parallel 427916e), checked on an emitted
/// exec_order.json. HyperParallel is not on PyPI, so none of its code runs here.
fn check_hyperparallel_order(case: &Value) {
    let name = case["name"].as_str().unwrap();
    let order: Value =
        serde_json::from_str(&std::fs::read_to_string(case["exec_order"].as_str().unwrap()).unwrap()).unwrap();
    let int = |k: &str| case[k].as_i64().unwrap();
    let (pp, m, vpp) = (int("pp"), int("microbatches"), int("vpp"));
    let nt = pp.min(m);
    assert_eq!(order["format"], "hyperparallel-exec-order", "{name}");
    let ranks: BTreeMap<i64, Vec<Step>> = order["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["rank"].as_i64().unwrap(), r["steps"].as_array().unwrap().iter().map(Step::of).collect()))
        .collect();
    assert_eq!(ranks.len() as i64, pp, "{name}");
    for step in ranks.values().flatten() {
        assert!(HYPERPARALLEL_STEPS.contains(&step.kind.as_str()), "{name}: HyperParallel has no step {}", step.kind);
    }
    transfers_meet(name, &ranks, pp, nt);
    computes_once(name, &ranks, pp, m, vpp);
    for (&rank, steps) in &ranks {
        // With a 1f1b body (one chunk) HyperParallel runs the interleaved schedule with
        // pp_less_memory, which check_hyperparallel_config pins in the config.
        warmup(name, rank, steps, pp, m, vpp, vpp == 1);
        prefix_and_grads(name, rank, steps, m, nt, case["trainable_encoder"] == true);
    }
}

/// parse_and_validate, and the queue order HCCL needs: between two ranks the n-th transfer
/// posted by one meets the n-th posted by the other.
fn transfers_meet(name: &str, ranks: &BTreeMap<i64, Vec<Step>>, pp: i64, nt: i64) {
    let mut queues: BTreeMap<(i64, i64), Vec<(&Step, Step)>> = BTreeMap::new();
    for (&rank, steps) in ranks {
        for step in steps {
            if let Some((peer, wants)) = step.counterpart(pp, nt) {
                queues.entry((rank, peer)).or_default().push((step, wants));
            }
        }
    }
    for ((a, b), mine) in &queues {
        let wanted: Vec<&Step> = mine.iter().map(|(_, w)| w).collect();
        let theirs: Vec<&Step> = queues.get(&(*b, *a)).map(|q| q.iter().map(|(p, _)| *p).collect()).unwrap_or_default();
        assert_eq!(wanted, theirs, "{name}: transfers {a}->{b} do not meet in order");
    }
}

/// Every body stage's forward and backward of every microbatch, once each, on its own rank.
fn computes_once(name: &str, ranks: &BTreeMap<i64, Vec<Step>>, pp: i64, m: i64, vpp: i64) {
    let mut computed = BTreeMap::<(String, i64, i64), usize>::new();
    for (&rank, steps) in ranks {
        for s in steps.iter().filter(|s| s.kind == "FWD" || s.kind == "BWD") {
            let (stage, mb) = (s.stage.unwrap(), s.mb.unwrap());
            assert_eq!(stage % pp, rank, "{name}: {s:?} on rank {rank}");
            *computed.entry((s.kind.clone(), stage, mb)).or_default() += 1;
        }
    }
    let mut everything = BTreeMap::new();
    for kind in ["FWD", "BWD"] {
        for stage in 0..pp * vpp {
            for mb in 0..m {
                everything.insert((kind.to_string(), stage, mb), 1);
            }
        }
    }
    assert_eq!(computed, everything, "{name}");
}

/// Forwards before the first backward: (V-1)·R + 2(P-1-i), or (V-1)·R + (P-1-i) with
/// pp_less_memory, capped at V·M; R is the first round's microbatches.
fn warmup(name: &str, rank: i64, steps: &[Step], pp: i64, m: i64, vpp: i64, less_memory: bool) {
    let rounds = (m / pp).max(1);
    let first_round = if m < pp { m } else { pp + (m % pp) / rounds + i64::from((m % pp) % rounds != 0) };
    let compute: Vec<&str> = steps.iter().map(|s| s.kind.as_str()).filter(|k| *k == "FWD" || *k == "BWD").collect();
    let depth = pp - 1 - rank;
    let warmup = ((vpp - 1) * first_round + if less_memory { depth } else { 2 * depth }).min(vpp * m);
    let expected = if warmup < vpp * m { warmup + 1 } else { warmup };
    assert_eq!(compute.iter().position(|k| *k == "BWD").unwrap() as i64, expected, "{name}: rank {rank}");
}

/// The encoder's prefix (stage -1) comes first: the rank encodes the microbatches it owns
/// (overflow "full": m on rank m % NT), ships data then features to rank 0 in microbatch order,
/// broadcasts the tower's weights first when it trains; and a trained tower's gradients go
/// back (GRAD_SEND from rank 0, GRAD_RECV_WITH_BACKWARD on the owners, GRAD_REDUCE last).
fn prefix_and_grads(name: &str, rank: i64, steps: &[Step], m: i64, nt: i64, trainable: bool) {
    let prefix: Vec<&Step> = steps.iter().filter(|s| s.stage == Some(-1)).collect();
    assert!(steps.iter().zip(&prefix).all(|(a, b)| a == *b), "{name}: rank {rank}'s prefix is not first");
    let owned: Vec<i64> = (0..m).filter(|mb| mb % nt == rank).collect();
    let encoded: Vec<i64> = prefix.iter().filter(|s| s.kind == "MPIPE_TRANSPOSE_FWD").filter_map(|s| s.mb).collect();
    assert_eq!(encoded, owned, "{name}: rank {rank}");
    let broadcast: Vec<&&Step> = prefix.iter().filter(|s| s.kind == "MPIPE_PARAM_BROADCAST").collect();
    let first: Vec<&&Step> = if trainable { prefix.iter().take(1).collect() } else { Vec::new() };
    assert_eq!(broadcast, first, "{name}: rank {rank} broadcast");
    let shipped: Vec<i64> = if rank == 0 { (0..m).filter(|mb| mb % nt != 0).collect() } else { owned.clone() };
    let way = if rank == 0 { "RECV" } else { "SEND" };
    let transfers: Vec<(&str, Option<i64>)> =
        prefix.iter().filter(|s| s.kind.ends_with(way)).map(|s| (s.kind.as_str(), s.mb)).collect();
    let (data, features) = (format!("DATA_{way}"), format!("MPIPE_FWD_{way}"));
    let expected: Vec<(&str, Option<i64>)> = shipped
        .iter()
        .map(|&mb| (data.as_str(), Some(mb)))
        .chain(shipped.iter().map(|&mb| (features.as_str(), Some(mb))))
        .collect();
    assert_eq!(transfers, expected, "{name}: rank {rank} ships data then features, each in microbatch order");
    let tail: Vec<(&str, Option<i64>)> =
        steps.iter().filter(|s| s.kind.starts_with("MPIPE_GRAD")).map(|s| (s.kind.as_str(), s.mb)).collect();
    if !trainable {
        assert!(tail.is_empty(), "{name}: a frozen tower has no backward");
        return;
    }
    let mut grads: Vec<(&str, Option<i64>)> = if rank == 0 {
        shipped.iter().map(|&mb| ("MPIPE_GRAD_SEND", Some(mb))).collect()
    } else {
        owned.iter().map(|&mb| ("MPIPE_GRAD_RECV_WITH_BACKWARD", Some(mb))).collect()
    };
    grads.push(("MPIPE_GRAD_REDUCE", None));
    assert_eq!(tail, grads, "{name}: rank {rank}");
    let last: Vec<(&str, Option<i64>)> =
        steps[steps.len() - tail.len()..].iter().map(|s| (s.kind.as_str(), s.mb)).collect();
    assert_eq!(last, tail, "{name}: rank {rank}'s gradient steps are not last");
}

#[test]
fn hyperparallel_orders_follow_mpipe_transpose() {
    let dir = tempfile_dir("hyperparallel-order");
    let cases = write_all(&dir, Target::HyperParallel);
    let orders: Vec<&Value> = cases.iter().filter(|c| Path::new(c["exec_order"].as_str().unwrap()).exists()).collect();
    assert!(orders.len() >= 3, "the plans give {} exec_order.json files", orders.len());
    for case in orders {
        check_hyperparallel_order(case);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The fields of HyperParallel's trainer config, from hyper_parallel/trainer/config.py
/// (mindspore-ai/hyper-parallel 427916e): ModelConfig, DataConfig, TrainConfig,
/// AcceleratorConfig (with the pp_mpipe_* keys of
/// examples/qwen3_vl_30b_a3b_instruct/train_pp_mpipe.yaml, 51e4a86) and MixedPrecisionConfig.
const HYPERPARALLEL_MODEL: &[&str] = &[
    "name",
    "weights_path",
    "tokenizer_path",
    "freeze_modules",
    "tp_plan",
    "cp_modules",
    "ep_modules",
    "num_hidden_layers",
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "vocab_size",
    "max_position_embeddings",
    "config_overrides",
];
const HYPERPARALLEL_DATA: &[&str] = &[
    "type",
    "train_path",
    "subset",
    "max_seq_len",
    "text_key",
    "train_size",
    "template",
    "image_key",
    "messages_key",
    "image_token_id",
    "video_token_id",
    "vl_video",
    "vl_grid_t",
    "vl_grid_h",
    "vl_grid_w",
    "streaming",
    "num_workers",
    "prefetch_factor",
    "pin_memory",
    "shuffle",
    "load",
];
const HYPERPARALLEL_TRAIN: &[&str] = &[
    "max_steps",
    "num_train_epochs",
    "global_batch_size",
    "micro_batch_size",
    "seed",
    "backend",
    "init_device",
    "comm_backend",
    "local_rank",
    "accelerator",
    "mixed_precision",
    "gradient_checkpointing",
    "optimizer",
    "checkpoint",
    "logging",
    "tensorboard",
    "wandb",
    "profile",
    "memory_monitor",
    "moe_monitor",
    "eval",
    "debug",
];
const HYPERPARALLEL_ACCELERATOR: &[&str] = &[
    "dp",
    "dp_replicate",
    "dp_shard",
    "tp",
    "cp",
    "pp",
    "pp_micro_batch_num",
    "pp_schedule",
    "pp_vpp",
    "pp_layer_split",
    "ep",
    "etp",
    "moe_token_dispatcher_type",
    "npu_nums_per_device",
    "zero_stage",
    "reshard_after_forward",
    "async_cp",
    "ulysses_degree",
    "comm_fusion",
    "cpu_offload",
    "pp_mpipe_transpose_layers",
    "pp_mpipe_transpose_overflow",
    "pp_mpipe_owner_backward",
    "pp_less_memory",
    "fsdp_forward_prefetch",
    "fsdp_backward_prefetch",
];
const HYPERPARALLEL_MIXED: &[&str] = &["enabled", "param_dtype", "reduce_dtype", "output_dtype"];

/// HyperParallel's trainer is not on PyPI, so its config rules are checked here on what mpipec
/// writes: launch.sh run as written with torchrun recorded, and config.yaml read as the trainer
/// reads it (a YAML parser, then the dataclasses).
fn check_hyperparallel_config(case: &Value) {
    let path = case["config"].as_str().unwrap();
    let text = std::fs::read_to_string(path).unwrap();
    let cfg: Value = serde_norway::from_str(&text).unwrap_or_else(|e| panic!("{path} is not YAML: {e}"));
    hyperparallel_launch(case);
    hyperparallel_config(case, &cfg);
}

fn hyperparallel_launch(case: &Value) {
    let name = case["name"].as_str().unwrap();
    let (argv, _) =
        launched(case["launch"].as_str().unwrap(), &[("HYPER_PARALLEL", "/opt/hyper-parallel")], "TORCHRUN");
    let (options, script, args) = split_torchrun(&argv);
    assert_eq!(options.get("--nproc-per-node"), Some(&case["devices"].to_string()), "{name}");
    let entry = if case["vlm"] == true { "scripts/train_vl.py" } else { "scripts/train_lm.py" };
    assert_eq!(*script, format!("/opt/hyper-parallel/{entry}"), "{name}");
    assert_eq!(args, [case["config"].as_str().unwrap()], "{name}");
}

fn keys_within(name: &str, what: &str, table: &Value, allowed: &[&str]) {
    let table = table.as_object().unwrap_or_else(|| panic!("{name}: {what} is not a table"));
    let unknown: Vec<&String> = table.keys().filter(|k| !allowed.contains(&k.as_str())).collect();
    assert!(unknown.is_empty(), "{name}: {what} has keys HyperParallel's config does not: {unknown:?}");
}

/// config.py's strict three-tier schema and its sizes: world = dp_replicate·dp_shard·cp·tp·pp;
/// exec_order.json goes with pp_schedule mpipe only.
fn hyperparallel_config(case: &Value, cfg: &Value) {
    let name = case["name"].as_str().unwrap();
    let tiers: std::collections::BTreeSet<&str> = cfg.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(tiers, ["data", "model", "train"].into(), "{name}");
    let (train, acc) = (&cfg["train"], &cfg["train"]["accelerator"]);
    keys_within(name, "model", &cfg["model"], HYPERPARALLEL_MODEL);
    keys_within(name, "data", &cfg["data"], HYPERPARALLEL_DATA);
    keys_within(name, "train", train, HYPERPARALLEL_TRAIN);
    keys_within(name, "train.accelerator", acc, HYPERPARALLEL_ACCELERATOR);
    keys_within(name, "train.mixed_precision", &train["mixed_precision"], HYPERPARALLEL_MIXED);
    let checkpoint = train["gradient_checkpointing"]["activation_checkpoint"].as_str();
    assert!(matches!(checkpoint, Some("off" | "full" | "selective")), "{name}: activation_checkpoint {checkpoint:?}");
    let size = |k: &str| acc.get(k).map_or(1, |v| v.as_u64().unwrap_or_else(|| panic!("{name}: {k} is {v}")));
    let world = size("dp_replicate") * acc["dp_shard"].as_u64().unwrap() * size("cp") * size("tp") * size("pp");
    assert_eq!(json!(world), case["devices"], "{name}");
    assert_eq!(json!([size("pp"), acc["dp_shard"], size("tp")]), json!([case["pp"], case["dp"], case["tp"]]), "{name}");
    if size("pp") > 1 {
        hyperparallel_pipeline(case, cfg);
    }
    let mpipe = acc["pp_schedule"] == "mpipe";
    let order = Path::new(case["exec_order"].as_str().unwrap()).exists();
    assert_eq!(order, mpipe, "{name}: exec_order.json goes with pp_schedule mpipe");
}

/// The accelerator's pipeline keys: pp_layer_split has pp·pp_vpp entries summing to the
/// model's layers (and is the plan's split); global_batch_size is divisible by
/// pp_micro_batch_num, and with data.load single it is pp_micro_batch_num·micro_batch_size·dp_shard.
fn hyperparallel_pipeline(case: &Value, cfg: &Value) {
    let name = case["name"].as_str().unwrap();
    let (train, acc) = (&cfg["train"], &cfg["train"]["accelerator"]);
    let schedule = acc["pp_schedule"].as_str();
    assert!(matches!(schedule, Some("gpipe" | "1f1b" | "mpipe")), "{name}: pp_schedule {schedule:?}");
    assert_eq!(acc["pp_micro_batch_num"], case["microbatches"], "{name}");
    let vpp = acc.get("pp_vpp").map_or(json!(1), Value::clone);
    assert_eq!(vpp, case["vpp"], "{name}: pp_vpp");
    let split: Vec<u64> = serde_json::from_value(acc["pp_layer_split"].clone()).unwrap();
    assert_eq!(json!(split.len()), json!(acc["pp"].as_u64().unwrap() * vpp.as_u64().unwrap()), "{name}: {split:?}");
    assert_eq!(json!(split.iter().sum::<u64>()), cfg["model"]["num_hidden_layers"], "{name}: {split:?}");
    assert_eq!(json!(split), case["decoder_stages"], "{name}");
    let int = |v: &Value| v.as_u64().unwrap_or_else(|| panic!("{name}: {v} is no count"));
    let (gbs, microbatches) = (int(&train["global_batch_size"]), int(&acc["pp_micro_batch_num"]));
    assert_eq!(gbs % microbatches, 0, "{name}: global_batch_size {gbs}");
    if cfg["data"]["load"] == "single" {
        let per_step = microbatches * int(&train["micro_batch_size"]) * int(&acc["dp_shard"]);
        assert_eq!(gbs, per_step, "{name}: global_batch_size with data.load single");
    }
    if schedule == Some("mpipe") {
        assert_eq!(case["transpose"], true, "{name}: pp_schedule mpipe for a plan without transpose");
        let overflow = acc["pp_mpipe_transpose_overflow"].as_str();
        assert!(matches!(overflow, Some("full" | "min")), "{name}: pp_mpipe_transpose_overflow {overflow:?}");
        assert_eq!(acc["pp_mpipe_owner_backward"], case["trainable_encoder"], "{name}");
        // A 1f1b body is the one-chunk interleaved generator with the shallow warmup.
        assert_eq!(acc["pp_less_memory"], json!(vpp == 1), "{name}");
        let frozen = cfg["model"]["freeze_modules"].as_array().is_some_and(|m| m.contains(&json!("model.visual")));
        assert_eq!(json!(frozen), json!(case["trainable_encoder"] != true), "{name}: model.visual frozen");
    }
}

/// Each rule of check_hyperparallel_config rejects a config or launch broken in its one way.
#[test]
fn hyperparallel_config_rules_can_fail() {
    let dir = tempfile_dir("hyperparallel-broken");
    let case = write_all(&dir, Target::HyperParallel).into_iter().find(|c| c["name"] == "vlm_trainable").unwrap();
    let text = std::fs::read_to_string(case["config"].as_str().unwrap()).unwrap();
    let cfg: Value = serde_norway::from_str(&text).unwrap();
    hyperparallel_launch(&case);
    hyperparallel_config(&case, &cfg);
    type Break = fn(&mut Value, &mut Value);
    let breaks: &[(&str, Break)] = &[
        ("a fourth tier", |_, c| c["eval"] = json!({})),
        ("a model key", |_, c| c["model"]["layers"] = json!(1)),
        ("a data key", |_, c| c["data"]["path"] = json!("x")),
        ("a train key", |_, c| c["train"]["steps"] = json!(1)),
        ("an accelerator key", |_, c| c["train"]["accelerator"]["vpp"] = json!(2)),
        ("a mixed_precision key", |_, c| c["train"]["mixed_precision"]["dtype"] = json!("bf16")),
        ("activation_checkpoint", |_, c| c["train"]["gradient_checkpointing"]["activation_checkpoint"] = json!("on")),
        ("the world", |_, c| c["train"]["accelerator"]["dp_shard"] = json!(4)),
        ("dp and cp", |_, c| {
            c["train"]["accelerator"]["dp_shard"] = json!(1);
            c["train"]["accelerator"]["cp"] = json!(2);
        }),
        ("pp_schedule", |_, c| c["train"]["accelerator"]["pp_schedule"] = json!("zbv")),
        ("pp_micro_batch_num", |_, c| c["train"]["accelerator"]["pp_micro_batch_num"] = json!(4)),
        ("pp_vpp", |_, c| c["train"]["accelerator"]["pp_vpp"] = json!(1)),
        ("the split's length", |_, c| {
            c["train"]["accelerator"]["pp_layer_split"].as_array_mut().unwrap().push(json!(0))
        }),
        ("the split's sum", |_, c| c["train"]["accelerator"]["pp_layer_split"][7] = json!(3)),
        ("the split", |_, c| c["train"]["accelerator"]["pp_layer_split"].as_array_mut().unwrap().swap(0, 7)),
        ("global_batch_size's divisor", |_, c| c["train"]["global_batch_size"] = json!(12)),
        ("global_batch_size with data.load single", |_, c| c["train"]["global_batch_size"] = json!(24)),
        ("mpipe without transpose", |k, _| k["transpose"] = json!(false)),
        ("pp_mpipe_transpose_overflow", |_, c| {
            c["train"]["accelerator"]["pp_mpipe_transpose_overflow"] = json!("half")
        }),
        ("pp_mpipe_owner_backward", |_, c| c["train"]["accelerator"]["pp_mpipe_owner_backward"] = json!(false)),
        ("pp_less_memory", |_, c| c["train"]["accelerator"]["pp_less_memory"] = json!(true)),
        ("a frozen tower", |_, c| c["model"]["freeze_modules"] = json!(["model.visual"])),
        ("exec_order.json", |k, _| k["exec_order"] = json!("/nonexistent/exec_order.json")),
        ("torchrun's processes", |k, _| k["devices"] = json!(8)),
        ("the entry script", |k, _| k["vlm"] = json!(false)),
        ("the config path", |k, _| k["config"] = json!("other.yaml")),
    ];
    for (what, break_it) in breaks {
        let (mut case, mut cfg) = (case.clone(), cfg.clone());
        break_it(&mut case, &mut cfg);
        let checked = std::panic::catch_unwind(|| {
            hyperparallel_launch(&case);
            hyperparallel_config(&case, &cfg);
        });
        assert!(checked.is_err(), "a broken {what} passes");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn hyperparallel_configs_follow_its_trainer() {
    let dir = tempfile_dir("hyperparallel-config");
    for case in write_all(&dir, Target::HyperParallel) {
        check_hyperparallel_config(&case);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The emitted msrun script, as written, starts a scheduler and two CPU workers on loopback;
/// each joins the cluster, applies the config's parallel context and exits.
#[test]
fn msrun_starts_two_workers_on_loopback() {
    let python = python("mindformers-env");
    let dir = tempfile_dir("msrun");
    let source = sources().into_iter().find(|s| s.key.ends_with("two_devices.mpipe")).unwrap();
    let artifacts = emitted(&source, Target::MindFormers);
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
    let checked =
        mpipe::driver::compile("plan.mpipe", "plan.mpipe", text.as_bytes().to_vec(), &common::repo_loader(&[]));
    let plan = checked.plan.unwrap_or_else(|| panic!("{text}: {:?}", checked.diagnostics));
    let request = Request { target, nearest: true, span: None };
    match verdict(request, &mpipe::driver::build(&plan).unwrap()) {
        Verdict::AsWritten => "native".into(),
        Verdict::Impossible(_) => "no".into(),
        Verdict::Nearest(form) => {
            let nearest = form.written_into(&plan);
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
