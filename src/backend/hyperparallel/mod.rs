//! The `hyperparallel` target: `OUT/hyperparallel/config.yaml` (the trainer's strict
//! model/data/train config of `hyper_parallel/trainer/config.py`, with `pp_schedule: mpipe`
//! and its `pp_mpipe_*` and `pp_less_memory` options for a transpose plan, as
//! `train_pp_mpipe.yaml` writes them), `launch.sh` (torchrun on `scripts/train_vl.py` or
//! `train_lm.py`) and, for a transpose plan, `exec_order.json`: the steps HyperParallel's MPipe
//! schedule builds for it (docs/hyperparallel.md).

use serde::Serialize;

use super::layout::{self, BodyStages};
use super::shell;
use super::yaml::{self, Map, list, strings};
use crate::algebra::{Fill, Skeleton};
use crate::derive::resolved::Resolved;
use crate::ir::PlanIr;
use crate::outputs::Artifact;
use crate::plan::Recompute;
pub use order::{Form, Step};

mod order;

#[cfg(test)]
mod golden;

/// HyperParallel's VL models hold the vision tower at `model.visual` (Qwen3-VL): the module
/// `pp_mpipe_transpose_layers` and `freeze_modules` name.
const VISUAL: &str = "visual";

pub fn artifacts(resolved: &Resolved, ir: &PlanIr) -> Vec<Artifact> {
    let plan = resolved.plan;
    let body = BodyStages::of(resolved, ir);
    let c = &plan.cluster;
    let vlm = layout::encoder(plan).is_some();
    let entry = if vlm { "scripts/train_vl.py" } else { "scripts/train_lm.py" };
    let header = vec![
        format!("{} on the HyperParallel trainer, written by mpipec {}.", plan.source, super::VERSION),
        format!(
            "{} processes = pp {} x dp_shard {} x tp {}; {} microbatches; LLM layers by stage: {:?}.",
            c.devices, c.pp, c.dp, c.tp, plan.batch.microbatches, body.decoder
        ),
    ];
    let config = yaml::comment(&header) + &config(resolved, ir, &body).render();
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
    let mut out = vec![Artifact { path: "hyperparallel/config.yaml".into(), contents: config }];
    if let Some(form) = form(resolved, ir) {
        out.push(Artifact { path: "hyperparallel/exec_order.json".into(), contents: exec_order(&form) });
    }
    out.push(Artifact { path: "hyperparallel/launch.sh".into(), contents: launch });
    out
}

fn config(resolved: &Resolved, ir: &PlanIr, body: &BodyStages) -> Map {
    let plan = resolved.plan;
    let c = &plan.cluster;
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
    let mpipe = form(resolved, ir);
    if encoder.is_some() {
        model = model.set("config_overrides", Map::new().set("vl", true));
    }
    let mut data = Map::new().set("type", if encoder.is_some() { "vl_dummy" } else { "dummy" });
    if mpipe.is_some() {
        // Each rank's sampler yields only the microbatches it owns: gbs = M · mbs · dp_shard.
        data = data.set("load", "single");
    }
    data = data.set("max_seq_len", plan.batch.seq_len);
    let mut accelerator = Map::new().set("pp", c.pp);
    if c.pp > 1 {
        let schedule = match (mpipe, resolved.body().0) {
            (Some(_), _) => "mpipe",
            (None, Skeleton::Gpipe) => "gpipe",
            (None, _) => "1f1b",
        };
        accelerator = accelerator.set("pp_micro_batch_num", plan.batch.microbatches).set("pp_schedule", schedule);
        if body.chunks > 1 {
            accelerator = accelerator.set("pp_vpp", u64::from(body.chunks));
        }
        accelerator = accelerator.set("pp_layer_split", list(&body.decoder));
        if let Some(form) = mpipe {
            accelerator = accelerator
                .set("pp_mpipe_transpose_layers", VISUAL)
                .set("pp_mpipe_transpose_overflow", "full")
                .set("pp_mpipe_owner_backward", form.trainable)
                .set("pp_less_memory", form.less_memory);
        }
    }
    accelerator = accelerator.set("dp_shard", c.dp).set("tp", c.tp);
    if c.ep > 1 {
        accelerator = accelerator.set("ep", c.ep);
    }
    let checkpoint = match decoder.map(|(p, _)| p.recompute).unwrap_or(Recompute::None) {
        Recompute::None => "off",
        Recompute::Selective | Recompute::Ops => "selective",
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

/// The plan's MPipe form, when it has one: a `transpose(prefix)` encoder on more than one
/// pipeline rank, its microbatches owned round-robin, over a `1f1b` body (HyperParallel's one-chunk body with
/// `pp_less_memory`) or an interleaved one. The nearest plan of every other transpose plan has
/// this form.
pub fn form(resolved: &Resolved, ir: &PlanIr) -> Option<Form> {
    let plan = resolved.plan;
    let Some(Skeleton::Transpose { fill, .. }) = resolved.choices.encoder else { return None };
    let (body, chunks) = resolved.body();
    let less_memory = match body {
        Skeleton::OneFOneB => true,
        Skeleton::Interleaved { .. } => false,
        _ => return None,
    };
    let (ranks, microbatches) = (ir.pipeline.ranks, ir.pipeline.microbatches);
    let owners = ir.owner.get(&plan.cut.regions[0].name).map(Vec::as_slice).unwrap_or_default();
    let round_robin = owners.iter().enumerate().all(|(mb, &r)| r == mb as u32 % ranks.min(microbatches));
    (plan.cluster.pp > 1 && round_robin && fill == Fill::Prefix).then_some(Form {
        ranks,
        chunks,
        microbatches,
        less_memory,
        trainable: ir.regions[0].trainable,
    })
}

fn exec_order(form: &Form) -> String {
    let ranks = order::steps(form)
        .into_iter()
        .enumerate()
        .map(|(rank, steps)| RankOrder { rank: rank as u32, steps })
        .collect();
    let order = ExecOrder { format: "hyperparallel-exec-order", version: 2, ranks };
    serde_json::to_string_pretty(&order).expect("the order serialises") + "\n"
}
