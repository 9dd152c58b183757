//! Per-layer costs from the architecture definitions, with the standard formulas of
//! docs/costs.md: Narayanan et al. (SC'21) for FLOPs, Korthikanti et al. (MLSys'23)
//! for the activations kept for backward. Multiply-add = 2 FLOPs. Everything is for one
//! microbatch of `b` sequences on one pipeline rank before tensor parallelism divides it.

use crate::plan::{ArchKind, Attention, Decoder, Encoder, Mlp, Part, Recompute};

/// Bytes per element of weights and activations (bf16).
pub const ELEMENT: f64 = 2.0;

/// One layer's numbers for one microbatch.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LayerCost {
    /// Forward FLOPs.
    pub flops: f64,
    /// Of those, the FLOPs of matrix products with weights (their gradient is the weight
    /// gradient; the attention score products have none).
    pub weight_flops: f64,
    /// FLOPs a recompute adds to backward.
    pub recompute_flops: f64,
    /// Bytes read and written by the forward (weights and activations).
    pub bytes: f64,
    pub params: f64,
    /// Of those, the parameters of routed experts (sharded over expert parallelism).
    pub expert_params: f64,
    /// Activation bytes kept from forward to backward.
    pub activations: f64,
    /// Bytes of the layer's output: what crosses a seam after it.
    pub output: f64,
}

fn mlp_factor(mlp: Mlp) -> f64 {
    match mlp {
        Mlp::Gelu => 2.0,
        Mlp::SwiGlu => 3.0,
    }
}

/// Attention projections: (FLOPs per token, parameters).
fn attention_projections(h: f64, a: &Attention) -> (f64, f64) {
    let q = (a.heads * a.head_dim) as f64;
    let kv = (a.kv_heads * a.head_dim) as f64;
    let params = h * q + 2.0 * h * kv + q * h;
    (2.0 * params, params)
}

/// Activations kept per layer (Korthikanti et al.): s·b·h·(34 + 5·a·s/h) bytes without
/// recompute, 34·s·b·h with selective recompute or a flash-attention kernel (either way the
/// score matrix is not stored), the layer input 2·s·b·h with full recompute.
fn kept(tokens: f64, h: f64, heads: f64, seq: f64, recompute: Recompute, flash: bool) -> f64 {
    match recompute {
        Recompute::None if !flash => tokens * h * (34.0 + 5.0 * heads * seq / h),
        Recompute::None => 34.0 * tokens * h,
        Recompute::Selective => 34.0 * tokens * h,
        Recompute::Full => 2.0 * tokens * h,
    }
}

pub fn decoder_layer(d: &Decoder, index: u64, part: &Part, b: f64, s: f64, flash: bool) -> LayerCost {
    let h = d.hidden as f64;
    let tokens = b * s;
    let a = &d.attention;
    let (proj_per_token, mut params, scores) = match &d.mla {
        None => {
            let (f, p) = attention_projections(h, a);
            // Q·Kᵀ and the weighted sum of V, causal: half of 2·2·b·s²·(heads·head_dim).
            (f, p, 0.5 * 4.0 * b * s * s * (a.heads * a.head_dim) as f64)
        }
        Some(m) => {
            let heads = a.heads as f64;
            let qk = (m.nope_head_dim + m.rope_head_dim) as f64;
            let v = m.v_head_dim as f64;
            let q = if m.q_lora_rank > 0 {
                h * m.q_lora_rank as f64 + m.q_lora_rank as f64 * heads * qk
            } else {
                h * heads * qk
            };
            let kv = h * (m.kv_lora_rank + m.rope_head_dim) as f64
                + m.kv_lora_rank as f64 * heads * (m.nope_head_dim as f64 + v);
            let out = heads * v * h;
            let p = q + kv + out;
            (2.0 * p, p, 0.5 * 2.0 * b * s * s * heads * (qk + v))
        }
    };
    let dense = d.moe.as_ref().is_none_or(|m| index < m.dense_layers);
    let (mlp_per_token, mlp_params, expert_params) = match (&d.moe, dense) {
        (Some(m), false) => {
            // The router, then top_k routed and the shared experts per token.
            let expert = mlp_factor(d.mlp) * h * m.expert_ffn as f64;
            let active = (m.top_k + m.shared_experts) as f64 * 2.0 * expert + 2.0 * h * m.experts as f64;
            let routed = m.experts as f64 * expert;
            (active, routed + m.shared_experts as f64 * expert + h * m.experts as f64, routed)
        }
        _ => {
            let p = mlp_factor(d.mlp) * h * d.ffn as f64;
            (2.0 * p, p, 0.0)
        }
    };
    params += mlp_params;
    let mut weight_flops = tokens * (proj_per_token + mlp_per_token);
    let mut extra_params = 0.0;
    // The embedding sits with the first layer (no FLOPs, but parameters); the LM head with
    // the last.
    if index == 0 {
        extra_params += h * d.vocab as f64;
    }
    if index + 1 == d.layers {
        weight_flops += 2.0 * tokens * h * d.vocab as f64;
        if !d.tied_embeddings {
            extra_params += h * d.vocab as f64;
        }
    }
    params += extra_params;
    let kept = kept(tokens, h, a.heads as f64, s, part.recompute, flash);
    finish(
        Parts { weight_flops, scores, params, expert_params, tokens, hidden: h, kept, output: ELEMENT * tokens * h },
        part.recompute,
    )
}

/// One encoder layer over `image_tokens` tokens per sequence in `images` images: attention
/// spans one image (tiles and images are encoded independently, as InternViT and Qwen-VL do),
/// or a window within it.
pub fn encoder_layer(e: &Encoder, index: u64, part: &Part, b: f64, visual: (f64, f64), flash: bool) -> LayerCost {
    let h = e.hidden as f64;
    let (t, images) = visual;
    let tokens = b * t;
    let a = &e.attention;
    let (proj_per_token, attn_params) = attention_projections(h, a);
    let image = t / images.max(1.0);
    let windowed = match e.window {
        Some((w, full)) => index >= full.min(e.layers) && (w as f64) < image,
        None => false,
    };
    let span = if windowed { e.window.map_or(image, |(w, _)| w as f64) } else { image };
    let scores = 4.0 * b * t * span * (a.heads * a.head_dim) as f64;
    let mlp_params = mlp_factor(e.mlp) * h * e.ffn as f64;
    let mut params = attn_params + mlp_params;
    let mut weight_flops = tokens * (proj_per_token + 2.0 * mlp_params);
    let mut output = ELEMENT * tokens * h;
    if index == 0 {
        let patch = (3 * e.patch * e.patch * e.temporal_patch) as f64 * h;
        params += patch;
        // Patch embedding: a matmul of 2·s_img·(3·p²·temporal)·h.
        weight_flops += 2.0 * tokens * patch;
    }
    if index + 1 == e.layers {
        // Merge m×m patches (width h·m²), then project to the LLM's width.
        let m2 = (e.merge * e.merge) as f64;
        let merged = tokens / m2;
        let wide = h * m2;
        let projector = wide * wide + wide * e.out_hidden as f64;
        params += projector;
        weight_flops += 2.0 * merged * projector;
        output = ELEMENT * merged * e.out_hidden as f64;
    }
    let kept = kept(tokens, h, a.heads as f64, span, part.recompute, flash);
    finish(Parts { weight_flops, scores, params, expert_params: 0.0, tokens, hidden: h, kept, output }, part.recompute)
}

/// What each layer kind computes before the parts common to all of them.
struct Parts {
    weight_flops: f64,
    scores: f64,
    params: f64,
    expert_params: f64,
    tokens: f64,
    hidden: f64,
    kept: f64,
    output: f64,
}

/// The layer's totals: FLOPs, what recompute redoes, bytes moved (weights once, about twelve
/// activation-sized tensors read or written).
fn finish(p: Parts, recompute: Recompute) -> LayerCost {
    let flops = p.weight_flops + p.scores;
    let recompute_flops = match recompute {
        Recompute::None => 0.0,
        Recompute::Selective => p.scores,
        Recompute::Full => flops,
    };
    LayerCost {
        flops,
        weight_flops: p.weight_flops,
        recompute_flops,
        bytes: ELEMENT * p.params + ELEMENT * 12.0 * p.tokens * p.hidden,
        params: p.params,
        expert_params: p.expert_params,
        activations: p.kept,
        output: p.output,
    }
}

/// Layer `index` of `part` for a microbatch of `b` sequences with `visual` = (image tokens,
/// images) each.
pub fn layer(part: &Part, index: u64, b: f64, seq_len: f64, visual: (f64, f64), flash: bool) -> LayerCost {
    match &part.arch.kind {
        ArchKind::Decoder(d) => decoder_layer(d, index, part, b, seq_len, flash),
        ArchKind::Encoder(e) => encoder_layer(e, index, part, b, visual, flash),
    }
}
