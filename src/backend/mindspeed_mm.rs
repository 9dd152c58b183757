//! The `mindspeed-mm` target: `OUT/mindspeed-mm/launch.sh` (torchrun on torch_npu with the
//! Ascend/HCCL environment and Megatron's parallel flags, as MindSpeed-MM's
//! `examples/qwen2.5vl/finetune_qwen2_5_vl_7b.sh` does) and `model.json`, the `--mm-model`
//! file whose per-module `pipeline_num_layers` carry the stage split: `[pp]`, or `[vpp][pp]`
//! with virtual stages (`mindspeed_mm/models/vlm_model.py`).

use serde_json::{Value, json};

use super::layout::{self, BodyStages};
use super::megatron;
use super::shell::{self, flag, switch};
use crate::derive::resolved::Resolved;
use crate::ir::PlanIr;
use crate::outputs::Artifact;
use crate::plan::{Mlp, Plan};

/// What MindSpeed-MM's scripts export before torchrun (CANN logging, task queue, HCCL).
const ENVIRONMENT: &[(&str, &str)] = &[
    ("CUDA_DEVICE_MAX_CONNECTIONS", "1"),
    ("ASCEND_SLOG_PRINT_TO_STDOUT", "0"),
    ("ASCEND_GLOBAL_LOG_LEVEL", "3"),
    ("TASK_QUEUE_ENABLE", "2"),
    ("COMBINED_ENABLE", "1"),
    ("CPU_AFFINITY_CONF", "1"),
    ("HCCL_CONNECT_TIMEOUT", "1200"),
    ("NPU_ASD_ENABLE", "0"),
    ("ASCEND_LAUNCH_BLOCKING", "0"),
    ("ACLNN_CACHE_LIMIT", "100000"),
];

pub fn artifacts(resolved: &Resolved, ir: &PlanIr) -> Vec<Artifact> {
    let plan = resolved.plan;
    let body = BodyStages::of(resolved, ir);
    let entry = "pretrain_vlm.py";
    let runs = format!("Runs {entry} of the MindSpeed-MM checkout in $MINDSPEED_MM (default: the current directory);");
    let cann = "the CANN environment comes from $ASCEND_HOME (default /usr/local/Ascend) when it is there.";
    let ids =
        "model.json names modules by the plan's architectures: give them MindSpeed-MM's model_id (qwen2vit, ...).";
    let comment = megatron::header(plan, &body, "torch_npu + MindSpeed-MM", &[&runs, cann, ids]);
    let mut text = shell::prologue(&comment, plan.cluster.devices, 6000);
    text.push_str(
        r#"mindspeed_mm="${MINDSPEED_MM:-$PWD}"
ascend="${ASCEND_HOME:-/usr/local/Ascend}"
# CANN's set_env.sh scripts read unset variables.
set +u
for env in "$ascend/cann/set_env.sh" "$ascend/ascend-toolkit/set_env.sh" "$ascend/nnal/atb/set_env.sh"; do
    if [ -f "$env" ]; then source "$env"; fi
done
set -u
"#,
    );
    for (k, v) in ENVIRONMENT {
        text.push_str(&format!("export {k}=\"${{{k}:-{v}}}\"\n"));
    }
    let mut flags = megatron::parallel_flags(plan);
    if body.chunks > 1 {
        // MindSpeed-MM re-adds the VPP flag Megatron dropped, and reads VP_SIZE as well.
        text.push_str(&format!("export VP_SIZE={}\n", body.chunks));
        flags.push(flag("--virtual-pipeline-model-parallel-size", body.chunks));
    }
    flags.extend([
        switch("--use-mcore-models"),
        flag("--seq-length", plan.batch.seq_len),
        flag("--max-position-embeddings", plan.batch.seq_len),
        flag("--mm-model", "\"$here/model.json\""),
        flag("--mm-data", "\"${MM_DATA:?set MM_DATA to the --mm-data JSON of your dataset}\""),
        flag("--mm-tool", "\"$mindspeed_mm/mindspeed_mm/tools/tools.json\""),
        // torch_npu maps the nccl backend to HCCL.
        flag("--distributed-backend", "nccl"),
    ]);
    text.push_str(&shell::array("args", &flags));
    text.push_str(&shell::torchrun(shell::TORCHRUN, &format!("\"$mindspeed_mm/{entry}\""), megatron::ARGS));
    let model = serde_json::to_string_pretty(&model_json(plan, &body)).expect("json values serialise") + "\n";
    vec![
        Artifact { path: "mindspeed-mm/launch.sh".into(), contents: text },
        Artifact { path: "mindspeed-mm/model.json".into(), contents: model },
    ]
}

/// `[pp]` without virtual stages, `[vpp][pp]` with them.
fn pipeline_num_layers(body: &BodyStages, per_stage: &[u64]) -> Value {
    let by_chunk = body.by_chunk(per_stage);
    if body.chunks == 1 { json!(by_chunk[0]) } else { json!(by_chunk) }
}

fn model_json(plan: &Plan, body: &BodyStages) -> Value {
    let image_encoder = layout::encoder(plan).map(|(part, e)| {
        json!({
            "vision_encoder": {
                "model_id": part.arch.name,
                "num_layers": e.layers,
                "hidden_size": e.hidden,
                "ffn_hidden_size": e.ffn,
                "num_attention_heads": e.attention.heads,
                "patch_size": e.patch,
                "temporal_patch_size": e.temporal_patch,
                "spatial_merge_size": e.merge,
                "out_hidden_size": e.out_hidden,
                "pipeline_num_layers": pipeline_num_layers(body, &body.encoder),
                "freeze": part.frozen,
                "recompute_granularity": recompute(part.recompute),
            }
        })
    });
    let text_decoder = layout::decoder(plan).map(|(part, d)| {
        json!({
            "model_id": part.arch.name,
            "num_layers": d.layers,
            "hidden_size": d.hidden,
            "ffn_hidden_size": d.ffn,
            "num_attention_heads": d.attention.heads,
            "num_query_groups": d.attention.kv_heads,
            "kv_channels": d.attention.head_dim,
            "vocab_size": d.vocab,
            "swiglu": d.mlp == Mlp::SwiGlu,
            "untie_embeddings_and_output_weights": !d.tied_embeddings,
            "pipeline_num_layers": pipeline_num_layers(body, &body.decoder),
            "freeze": part.frozen,
            "recompute_granularity": recompute(part.recompute),
        })
    });
    json!({
        "model_id": plan.model.name,
        "image_encoder": image_encoder,
        "text_decoder": text_decoder,
        "text_encoder": null,
        "video_encoder": null,
    })
}

fn recompute(r: crate::plan::Recompute) -> Value {
    use crate::plan::Recompute::*;
    match r {
        None => Value::Null,
        // No per-op policy here either; selective is the nearest.
        Selective | Ops => json!("selective"),
        Full => json!("full"),
    }
}
