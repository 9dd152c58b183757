//! The `megatron` target: `OUT/megatron/launch.sh`, torchrun with the exact Megatron-LM flags
//! for the plan (`examples/multimodal/train.py` with an encoder, `pretrain_gpt.py` without).
//! Flag names follow `megatron/training/arguments.py` and `examples/multimodal/multimodal_args.py`
//! (core_v0.16); the stage split is checked in tests by megatron-core's own
//! `TransformerConfig` and `PipelineParallelLayerLayout`.

use super::layout::{self, BodyStages};
use super::shell::{self, Flag, flag, switch};
use crate::derive::resolved::Resolved;
use crate::ir::PlanIr;
use crate::outputs::Artifact;
use crate::plan::{Plan, Recompute};

pub fn artifacts(resolved: &Resolved, ir: &PlanIr) -> Vec<Artifact> {
    let plan = resolved.plan;
    let body = BodyStages::of(resolved, ir);
    let vlm = layout::encoder(plan).is_some();
    let entry = if vlm { "examples/multimodal/train.py" } else { "pretrain_gpt.py" };
    let mut flags = parallel_flags(plan);
    flags.extend(split_flags(&body));
    flags.extend(model_flags(plan));
    if vlm {
        flags.extend(multimodal_flags(plan));
    }
    let runs = format!("Runs {entry} of the Megatron-LM checkout in $MEGATRON_LM (default: the current directory).");
    let mut text = shell::prologue(&header(plan, &body, "Megatron-LM", &[&runs]), plan.cluster.devices, 29500);
    text.push_str("megatron=\"${MEGATRON_LM:-$PWD}\"\n");
    text.push_str("export CUDA_DEVICE_MAX_CONNECTIONS=1\n");
    text.push_str(&shell::array("args", &flags));
    text.push_str(&shell::torchrun(shell::TORCHRUN, &format!("\"$megatron/{entry}\""), ARGS));
    vec![Artifact { path: "megatron/launch.sh".into(), contents: text }]
}

/// The comment at the top of a Megatron-style launch script (Megatron-LM, MindSpeed-MM).
/// The script's arguments after its flags: the `args` array, then what the user passes.
pub const ARGS: &str = r#""${args[@]}" "$@""#;

/// `runs` says what the script starts and from where.
pub fn header(plan: &Plan, body: &BodyStages, stack: &str, runs: &[&str]) -> Vec<String> {
    let c = &plan.cluster;
    let by_rank: Vec<String> = body.by_chunk(&body.decoder).iter().map(|r| format!("{r:?}")).collect();
    let mut lines = vec![
        format!("{} on {stack}, written by mpipec {}.", plan.source, super::VERSION),
        format!(
            "{} processes = tp {} x pp {} x dp {}; {} microbatches of {} per replica, global batch {}.",
            c.devices,
            c.tp,
            c.pp,
            c.dp,
            plan.batch.microbatches,
            plan.batch.micro_batch_size,
            layout::global_batch(plan)
        ),
        format!("LLM layers by pipeline rank, one list per virtual stage: {}.", by_rank.join(", ")),
        String::new(),
    ];
    lines.extend(runs.iter().map(|r| r.to_string()));
    lines.extend([
        "Data, tokenizer, checkpoint and the architecture flags the plan does not describe".into(),
        "(normalization, position embedding) go after the script's name: ./launch.sh --data-path ...".into(),
    ]);
    lines
}

/// Parallel sizes, batch, precision, optimizer and recompute: what Megatron-LM and
/// MindSpeed-MM (which runs Megatron's parser) share.
pub fn parallel_flags(plan: &Plan) -> Vec<Flag> {
    let c = &plan.cluster;
    let mut flags = vec![flag("--tensor-model-parallel-size", c.tp), flag("--pipeline-model-parallel-size", c.pp)];
    if c.tp > 1 {
        flags.push(switch("--sequence-parallel"));
    }
    if c.ep > 1 {
        flags.push(flag("--expert-model-parallel-size", c.ep));
    }
    flags.push(flag("--micro-batch-size", plan.batch.micro_batch_size));
    flags.push(flag("--global-batch-size", layout::global_batch(plan)));
    // pp > 1 needs a pipeline dtype, which comes from the precision flag (ModelParallelConfig).
    flags.push(switch("--bf16"));
    if c.distributed_optimizer {
        flags.push(switch("--use-distributed-optimizer"));
    }
    if let Some((part, _)) = layout::decoder(plan) {
        match part.recompute {
            Recompute::None => {}
            // Megatron has no per-op policy; its selective granularity is the nearest.
            Recompute::Selective | Recompute::Ops => flags.push(flag("--recompute-granularity", "selective")),
            Recompute::Full => flags.extend([
                flag("--recompute-granularity", "full"),
                flag("--recompute-method", "uniform"),
                flag("--recompute-num-layers", 1),
            ]),
        }
    }
    flags
}

/// The LLM's layers per stage: nothing for an even split, the first/last flags for a split
/// that is even between its ends, a virtual-stage count for an even interleaved split, else
/// the layout string (`E` embedding, `t` decoder layer, `L` loss, `|` between stages).
pub fn split_flags(body: &BodyStages) -> Vec<Flag> {
    let d = &body.decoder;
    let pp = body.pp as usize;
    let even = d.iter().all(|&n| n == d[0]);
    if body.chunks == 1 {
        if even {
            return Vec::new();
        }
        let middle = &d[1..pp - 1];
        let (first, last) = (d[0], d[pp - 1]);
        if first > 0 && last > 0 && middle.iter().all(|&n| n > 0 && n == middle[0]) {
            let mut flags = Vec::new();
            if middle.is_empty() || first != middle[0] {
                flags.push(flag("--decoder-first-pipeline-num-layers", first));
            }
            if middle.is_empty() || last != middle[0] {
                flags.push(flag("--decoder-last-pipeline-num-layers", last));
            }
            return flags;
        }
    } else if even {
        return vec![flag("--num-virtual-stages-per-pipeline-rank", body.chunks)];
    }
    vec![flag("--pipeline-model-parallel-layout", layout_string(d))]
}

/// Megatron's layout string for decoder layers per stage, in stage order.
pub fn layout_string(decoder: &[u64]) -> String {
    let last = decoder.len() - 1;
    let stages: Vec<String> = decoder
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let mut s = String::new();
            if i == 0 {
                s.push('E');
            }
            match n {
                0 => {}
                1 => s.push('t'),
                n => s.push_str(&format!("t*{n}")),
            }
            if i == last {
                s.push('L');
            }
            s
        })
        .collect();
    stages.join("|")
}

/// The LLM's architecture, in `TransformerConfig`'s flags.
pub fn model_flags(plan: &Plan) -> Vec<Flag> {
    let Some((_, d)) = layout::decoder(plan) else { return Vec::new() };
    let a = &d.attention;
    let mut flags = vec![
        flag("--num-layers", d.layers),
        flag("--hidden-size", d.hidden),
        flag("--ffn-hidden-size", d.ffn),
        flag("--num-attention-heads", a.heads),
    ];
    if a.head_dim * a.heads != d.hidden {
        flags.push(flag("--kv-channels", a.head_dim));
    }
    if a.kv_heads < a.heads {
        flags.push(switch("--group-query-attention"));
        flags.push(flag("--num-query-groups", a.kv_heads));
    }
    if d.mlp == crate::plan::Mlp::SwiGlu {
        flags.push(switch("--swiglu"));
    }
    if !d.tied_embeddings {
        flags.push(switch("--untie-embeddings-and-output-weights"));
    }
    if let Some(moe) = &d.moe {
        flags.extend([
            flag("--num-experts", moe.experts),
            flag("--moe-router-topk", moe.top_k),
            flag("--moe-ffn-hidden-size", moe.expert_ffn),
        ]);
        if moe.shared_experts > 0 {
            flags.push(flag("--moe-shared-expert-intermediate-size", moe.shared_experts * moe.expert_ffn));
        }
        if moe.dense_layers > 0 {
            flags.push(flag(
                "--moe-layer-freq",
                format!("([0]*{}+[1]*{})", moe.dense_layers, d.layers - moe.dense_layers),
            ));
        }
    }
    if let Some(mla) = &d.mla {
        flags.extend([
            switch("--multi-latent-attention"),
            flag("--q-lora-rank", mla.q_lora_rank),
            flag("--kv-lora-rank", mla.kv_lora_rank),
            flag("--qk-head-dim", mla.nope_head_dim),
            flag("--qk-pos-emb-head-dim", mla.rope_head_dim),
            flag("--v-head-dim", mla.v_head_dim),
        ]);
    }
    let seq = plan.batch.seq_len;
    // The multimodal example reads --seq-length as the vision sequence; validate_args wants
    // --max-position-embeddings to cover it.
    let seq_length = if layout::encoder(plan).is_some() { layout::max_image_tokens(plan).max(1) } else { seq };
    flags.push(flag("--seq-length", seq_length));
    if layout::encoder(plan).is_some() {
        flags.push(flag("--decoder-seq-length", seq));
    }
    flags.push(flag("--max-position-embeddings", seq.max(seq_length)));
    flags
}

/// `examples/multimodal`'s own flags: what is frozen, the vision model, the image geometry.
fn multimodal_flags(plan: &Plan) -> Vec<Flag> {
    let Some((enc_part, enc)) = layout::encoder(plan) else { return Vec::new() };
    let mut flags = vec![
        flag("--language-model-type", "\"${LANGUAGE_MODEL_TYPE:?set LANGUAGE_MODEL_TYPE (e.g. qwen2.5_7B)}\""),
        flag("--tokenizer-prompt-format", "\"${TOKENIZER_PROMPT_FORMAT:?set TOKENIZER_PROMPT_FORMAT (e.g. qwen2p5)}\""),
    ];
    let name = enc_part.arch.name.to_ascii_lowercase();
    let vision = ["siglip", "internvit", "radio", "clip"].into_iter().find(|v| name.contains(v));
    flags.push(match vision {
        Some(v) => flag("--vision-model-type", format!("\"${{VISION_MODEL_TYPE:-{v}}}\"")),
        None => flag(
            "--vision-model-type",
            "\"${VISION_MODEL_TYPE:?set VISION_MODEL_TYPE (clip, siglip, internvit, radio)}\"",
        ),
    });
    let tokens = layout::max_image_tokens(plan);
    let side = (tokens as f64).sqrt().round() as u64;
    if side > 0 && side * side == tokens {
        flags.extend([
            flag("--img-h", side * enc.patch),
            flag("--img-w", side * enc.patch),
            flag("--patch-dim", enc.patch),
        ]);
    }
    if enc_part.frozen {
        flags.push(switch("--freeze-ViT"));
    }
    if layout::decoder(plan).is_some_and(|(p, _)| p.frozen) {
        flags.push(switch("--freeze-LM"));
    }
    if enc_part.recompute != Recompute::None {
        flags.push(switch("--recompute-vision"));
    }
    flags
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::Mapping;

    fn body(pp: u32, chunks: u32, decoder: Vec<u64>) -> BodyStages {
        BodyStages { pp, chunks, mapping: Mapping::Loop, encoder: vec![0; decoder.len()], decoder }
    }

    #[test]
    fn the_split_takes_the_simplest_flags_that_say_it() {
        assert!(split_flags(&body(4, 1, vec![8, 8, 8, 8])).is_empty());
        assert_eq!(split_flags(&body(4, 1, vec![5, 9, 9, 9])), vec![flag("--decoder-first-pipeline-num-layers", 5)]);
        assert_eq!(
            split_flags(&body(2, 1, vec![5, 27])),
            vec![flag("--decoder-first-pipeline-num-layers", 5), flag("--decoder-last-pipeline-num-layers", 27)]
        );
        assert_eq!(split_flags(&body(4, 2, vec![4; 8])), vec![flag("--num-virtual-stages-per-pipeline-rank", 2)]);
        assert_eq!(
            split_flags(&body(4, 1, vec![0, 10, 11, 11])),
            vec![flag("--pipeline-model-parallel-layout", "E|t*10|t*11|t*11L")]
        );
    }

    #[test]
    fn layout_strings_mark_embedding_and_loss() {
        assert_eq!(layout_string(&[2, 4, 4, 5, 4, 4, 4, 5]), "Et*2|t*4|t*4|t*5|t*4|t*4|t*4|t*5L");
        assert_eq!(layout_string(&[1, 1]), "Et|tL");
    }
}
