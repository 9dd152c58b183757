//! The `mindformers` target: `OUT/mindformers/config.yaml`, the MindFormers config (`parallel`
//! as `mindspore.set_auto_parallel_context` takes it, `parallel_config`, `recompute_config`,
//! `model.model_config` with the stage split as `offset`), and `launch.sh`, which starts
//! `run_mindformer.py` under `msrun`. Keys and rules follow mindformers 1.9.0 with
//! mindspore 2.9.0; tests load the file with the real `MindFormerConfig` and its validators.

use super::layout::{self, BodyStages};
use super::shell;
use super::yaml::{self, Map, list, nested};
use crate::algebra::Skeleton;
use crate::derive::resolved::Resolved;
use crate::ir::PlanIr;
use crate::outputs::Artifact;
use crate::plan::{Decoder, Recompute};

pub fn artifacts(resolved: &Resolved, ir: &PlanIr) -> Vec<Artifact> {
    let plan = resolved.plan;
    let body = BodyStages::of(resolved, ir);
    let c = &plan.cluster;
    let header = vec![
        format!("{} on MindSpore + MindFormers, written by mpipec {}.", plan.source, super::VERSION),
        format!(
            "{} devices = dp {} x mp {} x pp {}; {} microbatches; LLM layers by rank, one list per virtual stage: {:?}.",
            c.devices,
            c.dp,
            c.tp,
            c.pp,
            plan.batch.microbatches,
            body.by_chunk(&body.decoder)
        ),
        "Dataset, tokenizer, optimizer and checkpoint sections come from the MindFormers config you start from.".into(),
    ];
    let config = yaml::comment(&header) + &config(resolved, &body).render();
    let mut launch = shell::prologue(
        &[
            header[0].clone(),
            header[1].clone(),
            String::new(),
            "Runs run_mindformer.py of the MindFormers checkout in $MINDFORMERS (default: the current".into(),
            "directory; MINDFORMERS_ENTRY names another script) under msrun, with config.yaml beside this file.".into(),
        ],
        c.devices,
        8118,
    );
    launch.push_str(
        r#"mindformers="${MINDFORMERS:-$PWD}"
exec "${MSRUN:-msrun}" --worker_num="$world" --local_worker_num="$nproc" --node_rank="$node_rank" \
    --master_addr="$master_addr" --master_port="$master_port" --log_dir="${LOG_DIR:-output/msrun_log}" \
    --join=True --cluster_time_out="${CLUSTER_TIME_OUT:-7200}" \
    "${MINDFORMERS_ENTRY:-$mindformers/run_mindformer.py}" --config "$here/config.yaml" --run_mode train "$@"
"#,
    );
    vec![
        Artifact { path: "mindformers/config.yaml".into(), contents: config },
        Artifact { path: "mindformers/launch.sh".into(), contents: launch },
    ]
}

/// `pipeline_config`'s `(pipeline_interleave, pipeline_scheduler)` for a body skeleton the
/// target runs natively. MindSpore allows only `1f1b` without interleaving.
fn scheduler(body: Skeleton) -> (bool, &'static str) {
    match body {
        Skeleton::OneFOneB => (false, "1f1b"),
        Skeleton::Gpipe => (true, "gpipe"),
        Skeleton::Interleaved { .. } => (true, "1f1b"),
        Skeleton::Zbv => (true, "zero_bubble_v"),
        other => unreachable!("`{other}` is not native to mindformers (backend::native)"),
    }
}

/// LayerSetting's offsets: layers of stage = num_layers // (pp·vpp) + offset, as `[pp]` or,
/// with virtual stages, `[vpp][pp]` (row 1 of `zero_bubble_v` in rank order, as it reverses it).
fn offset(body: &BodyStages) -> yaml::Node {
    let stages = (body.pp * body.chunks) as u64;
    let average = body.decoder_layers() / stages;
    let rows: Vec<Vec<i64>> = body
        .by_chunk(&body.decoder)
        .into_iter()
        .map(|row| row.into_iter().map(|n| n as i64 - average as i64).collect())
        .collect();
    if body.chunks == 1 { list(&rows[0]) } else { nested(&rows) }
}

fn config(resolved: &Resolved, body: &BodyStages) -> Map {
    let plan = resolved.plan;
    let c = &plan.cluster;
    let (interleave, scheduler) = scheduler(resolved.body().0);
    let decoder = layout::decoder(plan);
    let recompute = decoder.map(|(p, _)| p.recompute).unwrap_or(Recompute::None);
    let hbm_gb = (plan.cluster.hardware.hbm_bytes / 1e9 * 0.9).floor() as u64;
    let mut parallel_config = Map::new()
        .set("data_parallel", c.dp)
        .set("model_parallel", c.tp)
        .set("pipeline_stage", c.pp)
        .set("context_parallel", 1u64);
    if c.ep > 1 {
        parallel_config = parallel_config.set("expert_parallel", c.ep);
    }
    parallel_config = parallel_config
        .set("micro_batch_num", plan.batch.microbatches)
        .set("vocab_emb_dp", false)
        .set("use_seq_parallel", c.tp > 1)
        .set("gradient_aggregation_group", 4u64);
    let mut model_config = Map::new();
    if let Some((part, d)) = decoder {
        model_config = yaml::hugging_face(model_config, d, plan.batch.seq_len);
        model_config = experts_and_latent_attention(model_config, d)
            .set("head_dim", d.attention.head_dim)
            .set("seq_length", plan.batch.seq_len)
            .set("tie_word_embeddings", d.tied_embeddings)
            .set("offset", offset(body))
            .set("pp_interleave_num", u64::from(body.chunks));
        if let Some((enc_part, e)) = layout::encoder(plan) {
            // The vision tower sits on pipeline stage 0 (its cells' `pipeline_stage`); only the
            // LLM's layers are split by `offset`.
            model_config = model_config.set("freeze_vision", enc_part.frozen).set("freeze_llm", part.frozen).set(
                "vision_model",
                Map::new().set(
                    "model_config",
                    Map::new()
                        .set("num_hidden_layers", e.layers)
                        .set("hidden_size", e.hidden)
                        .set("intermediate_size", e.ffn)
                        .set("num_heads", e.attention.heads)
                        .set("patch_size", e.patch)
                        .set("temporal_patch_size", e.temporal_patch)
                        .set("spatial_merge_size", e.merge)
                        .set("out_hidden_size", e.out_hidden)
                        .set("recompute", enc_part.recompute != Recompute::None),
                ),
            );
        }
    }
    Map::new()
        .set("seed", 0u64)
        .set("run_mode", "train")
        .set("use_parallel", true)
        .set(
            "context",
            Map::new().set("mode", 0u64).set("device_target", "Ascend").set("max_device_memory", format!("{hbm_gb}GB")),
        )
        .set(
            "parallel",
            Map::new()
                .set("parallel_mode", 1u64)
                .set("full_batch", true)
                .set("enable_parallel_optimizer", c.distributed_optimizer)
                .set(
                    "pipeline_config",
                    Map::new().set("pipeline_interleave", interleave).set("pipeline_scheduler", scheduler),
                ),
        )
        .set("parallel_config", parallel_config)
        .set("micro_batch_interleave_num", 1u64)
        .set(
            "recompute_config",
            Map::new()
                .set("recompute", recompute == Recompute::Full)
                // MindFormers' select_recompute is the nearest to a per-op policy too.
                .set("select_recompute", matches!(recompute, Recompute::Selective | Recompute::Ops))
                .set("parallel_optimizer_comm_recompute", false)
                .set("mp_comm_recompute", true),
        )
        .set(
            "runner_config",
            Map::new()
                .set("batch_size", plan.batch.micro_batch_size)
                .set("epochs", 1u64)
                .set("sink_mode", true)
                .set("sink_size", 1u64)
                .set("gradient_accumulation_steps", 1u64),
        )
        .set("model", Map::new().set("model_config", model_config))
}

/// A mixture-of-experts or latent-attention decoder's own keys, by their Hugging Face names
/// and, where MindFormers has its own switch, by that (as its configs/deepseek3 YAML writes
/// them): without them its TransformerConfig refuses expert parallelism ("num_moe_experts must
/// be non None") and a linear bias beside experts, and builds plain attention.
fn experts_and_latent_attention(mut map: Map, d: &Decoder) -> Map {
    if let Some(moe) = &d.moe {
        map = map
            .set("n_routed_experts", moe.experts)
            .set("num_experts_per_tok", moe.top_k)
            .set("n_shared_experts", moe.shared_experts)
            .set("moe_intermediate_size", moe.expert_ffn)
            .set("first_k_dense_replace", moe.dense_layers)
            .set("add_bias_linear", false);
    }
    if let Some(mla) = &d.mla {
        map = map
            .set("q_lora_rank", mla.q_lora_rank)
            .set("kv_lora_rank", mla.kv_lora_rank)
            .set("qk_rope_head_dim", mla.rope_head_dim)
            .set("qk_nope_head_dim", mla.nope_head_dim)
            .set("v_head_dim", mla.v_head_dim)
            .set("multi_latent_attention", true);
    }
    map
}
