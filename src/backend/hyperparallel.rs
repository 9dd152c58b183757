//! The `hyperparallel` target: `OUT/hyperparallel/config.yaml` (the trainer's strict
//! model/data/train config of `hyper_parallel/trainer/config.py`, with `pp_schedule: mpipe`
//! and its `pp_mpipe_*` options for a transpose plan, as `train_pp_mpipe.yaml` writes them),
//! `launch.sh` (torchrun on `scripts/train_vl.py` or `train_lm.py`) and `exec_order.json`:
//! the per-rank order mpipec derived, in HyperParallel's step names.

use serde::Serialize;

use super::layout::{self, BodyLayout};
use super::shell;
use super::yaml::{self, Map, list, strings};
use crate::algebra::Skeleton;
use crate::build::Artifact;
use crate::check::spec::{Plan, Recompute};
use crate::derive::Derived;
use crate::ir::{Dir, Group, Instr, Op};

/// HyperParallel's VL models hold the vision tower at `model.visual` (Qwen3-VL): the module
/// `pp_mpipe_transpose_layers` and `freeze_modules` name.
const VISUAL: &str = "visual";

pub fn artifacts(plan: &Plan, derived: &Derived) -> Vec<Artifact> {
    let body = BodyLayout::of(plan, derived);
    let c = &plan.cluster;
    let vlm = layout::encoder(plan).is_some();
    let entry = if vlm { "scripts/train_vl.py" } else { "scripts/train_lm.py" };
    let header = vec![
        format!("{} on the HyperParallel trainer, written by mpipec {}.", plan.source, crate::VERSION),
        format!(
            "{} processes = pp {} x dp_shard {} x tp {}; {} microbatches; LLM layers by stage: {:?}.",
            c.devices, c.pp, c.dp, c.tp, plan.batch.microbatches, body.decoder
        ),
    ];
    let config = yaml::comment(&header) + &config(plan, derived, &body).render();
    let mut launch_comment = header.clone();
    launch_comment.extend([
        String::new(),
        format!("Runs {entry} of the hyper-parallel checkout in $HYPER_PARALLEL (default: the current directory)"),
        "with config.yaml beside this file; further arguments are the trainer's dot-path overrides.".into(),
    ]);
    let mut launch = shell::prologue(&launch_comment, c.devices, 29500);
    launch.push_str("hyper_parallel=\"${HYPER_PARALLEL:-$PWD}\"\n");
    launch.push_str(&shell::torchrun(
        shell::TORCHRUN,
        &format!("\"$hyper_parallel/{entry}\""),
        r#""$here/config.yaml" "$@""#,
    ));
    let order = serde_json::to_string_pretty(&exec_order(derived)).expect("the order serialises") + "\n";
    vec![
        Artifact { path: "hyperparallel/config.yaml".into(), contents: config },
        Artifact { path: "hyperparallel/exec_order.json".into(), contents: order },
        Artifact { path: "hyperparallel/launch.sh".into(), contents: launch },
    ]
}

fn config(plan: &Plan, derived: &Derived, body: &BodyLayout) -> Map {
    let c = &plan.cluster;
    let placement = &derived.placement;
    let encoder = layout::encoder(plan);
    let decoder = layout::decoder(plan);
    let mut model = Map::new().set("name", decoder.map(|(p, _)| p.arch.name.clone()).unwrap_or_default());
    let mut frozen = Vec::new();
    if encoder.is_some_and(|(p, _)| p.frozen) {
        frozen.push("model.visual");
    }
    if decoder.is_some_and(|(p, _)| p.frozen) {
        frozen.push("model.language_model");
    }
    if !frozen.is_empty() {
        model = model.set("freeze_modules", strings(&frozen));
    }
    if let Some((_, d)) = decoder {
        model = yaml::hugging_face(model, d, plan.batch.seq_len);
    }
    let transpose = placement.encoder;
    if encoder.is_some() {
        model = model.set("config_overrides", Map::new().set("vl", true));
    }
    let mut data = Map::new().set("type", if encoder.is_some() { "vl_dummy" } else { "dummy" });
    if transpose.is_some() {
        // Each rank's sampler yields only the microbatches it owns: gbs = M · mbs · dp_shard.
        data = data.set("load", "single");
    }
    data = data.set("max_seq_len", plan.batch.seq_len);
    let mut accelerator = Map::new().set("pp", c.pp);
    if c.pp > 1 {
        let schedule = match (transpose, placement.body.skeleton) {
            (Some(_), _) => "mpipe",
            (None, Skeleton::Gpipe) => "gpipe",
            (None, _) => "1f1b",
        };
        accelerator = accelerator.set("pp_micro_batch_num", plan.batch.microbatches).set("pp_schedule", schedule);
        if body.chunks > 1 {
            accelerator = accelerator.set("pp_vpp", u64::from(body.chunks));
        }
        accelerator = accelerator.set("pp_layer_split", list(&body.decoder));
        if let Some(enc) = transpose {
            accelerator = accelerator
                .set("pp_mpipe_transpose_layers", VISUAL)
                .set("pp_mpipe_transpose_overflow", "full")
                .set("pp_mpipe_owner_backward", enc.trainable);
        }
    }
    accelerator = accelerator.set("dp_shard", c.dp).set("tp", c.tp);
    if c.ep > 1 {
        accelerator = accelerator.set("ep", c.ep);
    }
    let checkpoint = match decoder.map(|(p, _)| p.recompute).unwrap_or(Recompute::None) {
        Recompute::None => "off",
        Recompute::Selective => "selective",
        Recompute::Full => "full",
    };
    let train = Map::new()
        .set("global_batch_size", layout::global_batch(plan))
        .set("micro_batch_size", plan.batch.micro_batch_size)
        .set("accelerator", accelerator)
        .set(
            "mixed_precision",
            Map::new().set("enabled", true).set("param_dtype", "bfloat16").set("reduce_dtype", "float32"),
        )
        .set("gradient_checkpointing", Map::new().set("activation_checkpoint", checkpoint));
    Map::new().set("model", model).set("data", data).set("train", train)
}

#[derive(Serialize)]
struct ExecOrder {
    format: &'static str,
    version: u32,
    ranks: Vec<RankOrder>,
}

#[derive(Serialize)]
struct RankOrder {
    rank: u32,
    steps: Vec<Step>,
}

/// One `MetaStep`: its type, microbatch and stage (`-1` for the transposed encoder, as
/// HyperParallel's prefix steps have it), and the peer of a transfer.
#[derive(Serialize)]
struct Step {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    micro_index: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stage_index: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    peer: Option<u32>,
}

fn exec_order(derived: &Derived) -> ExecOrder {
    let placement = &derived.placement;
    let encoder_stage = placement.encoder.map(|e| e.stage);
    let first = placement.body.first;
    let encoder_region = placement.encoder.map(|e| placement.regions[e.region].name.clone());
    let step = |i: &Instr| -> Option<Step> {
        // A message names the stage that produced it: the encoder's features come from the
        // encoder stage, their gradients from the first body stage (which has no body stage
        // upstream to send gradients to).
        let on_encoder = encoder_stage.is_some()
            && match i.dir {
                Some(Dir::Grad) => i.stage == Some(first),
                _ => i.stage == encoder_stage,
            };
        let kind = match (i.op, i.dir, on_encoder) {
            (Op::Forward, _, true) => "MPIPE_TRANSPOSE_FWD",
            (Op::Backward | Op::BackwardInput | Op::BackwardWeight, _, true) => "MPIPE_TRANSPOSE_BWD",
            (Op::Send, Some(Dir::Act), true) => "MPIPE_FWD_SEND",
            (Op::Recv, Some(Dir::Act), true) => "MPIPE_FWD_RECV",
            (Op::Send, _, true) => "MPIPE_GRAD_SEND",
            // The owner's backward follows its receive at once (the order graph puts a receive
            // right before its consumer); HyperParallel has the two as one step.
            (Op::Recv, _, true) => "MPIPE_GRAD_RECV_WITH_BACKWARD",
            (Op::Forward, ..) => "FWD",
            (Op::Backward, ..) => "BWD",
            (Op::BackwardInput, ..) => "BWD_INPUT",
            (Op::BackwardWeight, ..) => "BWD_WEIGHT",
            (Op::Send, Some(Dir::Act), _) => "FWD_SEND",
            (Op::Recv, Some(Dir::Act), _) => "FWD_RECV",
            (Op::Send, ..) => "BWD_SEND",
            (Op::Recv, ..) => "BWD_RECV",
            (Op::AllReduce, ..) if i.group == Some(Group::Pp) && i.region == encoder_region => "MPIPE_GRAD_REDUCE",
            (Op::AllReduce, ..) => "FSDP_REDUCE_GRAD",
            // HyperParallel's trainer steps the optimizer after the schedule, not in it.
            (Op::OptimizerStep, ..) => return None,
        };
        let stage_index = i.stage.map(|s| if on_encoder { -1 } else { i64::from(s) - i64::from(first) });
        Some(Step { kind, micro_index: i.mb, stage_index, peer: i.peer })
    };
    let steps = |instructions: &[Instr]| {
        let mut out: Vec<Step> = Vec::new();
        for s in instructions.iter().filter_map(step) {
            let merged = s.kind == "MPIPE_TRANSPOSE_BWD"
                && out
                    .last()
                    .is_some_and(|l| l.kind == "MPIPE_GRAD_RECV_WITH_BACKWARD" && l.micro_index == s.micro_index);
            if !merged {
                out.push(s);
            }
        }
        out
    };
    ExecOrder {
        format: "hyperparallel-exec-order",
        version: 1,
        ranks: derived.ir.ranks.iter().map(|r| RankOrder { rank: r.rank, steps: steps(&r.instructions) }).collect(),
    }
}
