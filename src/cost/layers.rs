//! Per-layer costs from the architecture definitions, with the standard formulas of
//! docs/costs.md: Narayanan et al. (SC'21) for FLOPs, Korthikanti et al. (MLSys'23)
//! for the activations kept for backward. Multiply-add = 2 FLOPs. Everything is for one
//! microbatch of `b` sequences on one pipeline rank before tensor parallelism divides it.

use crate::plan::{ArchKind, Attention, Cluster, Decoder, Encoder, Mlp, Part, Recompute};

/// What the training stack's kernels keep and fuse: whether attention is a flash kernel, and
/// whether the memory-bound kernels between the products are fused.
#[derive(Clone, Copy, Debug)]
pub struct Stack {
    pub flash: bool,
    pub fused: bool,
}

impl Stack {
    pub fn of(cluster: &Cluster) -> Stack {
        Stack { flash: cluster.flash_attention, fused: cluster.fused_kernels }
    }
}

/// Bytes per element of weights and activations (bf16).
pub const ELEMENT: f64 = 2.0;

/// How tensor parallelism divides a matrix product: its output columns (column-parallel, the
/// first product of a pair) or its reduction (row-parallel, the second).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum Split {
    #[default]
    Columns,
    Rows,
}

/// `batch` matrix products (m × k)·(k × n) of a layer's forward launched as one kernel (the
/// local experts of a MoE layer are one grouped product); `experts` when expert parallelism
/// divides the batch and gathers the tokens.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Gemm {
    pub m: f64,
    pub n: f64,
    pub k: f64,
    pub batch: f64,
    pub split: Split,
    pub experts: bool,
}

impl Gemm {
    fn new(m: f64, n: f64, k: f64, split: Split) -> Gemm {
        Gemm { m, n, k, batch: 1.0, split, experts: false }
    }

    pub fn flops(&self) -> f64 {
        2.0 * self.batch * self.m * self.n * self.k
    }
}

/// The most matrix products one layer has (MLA with MoE and the LM head: 11).
pub const MAX_GEMMS: usize = 12;

/// The matrix products of one layer's forward, in order.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Gemms {
    list: [Gemm; MAX_GEMMS],
    len: usize,
}

impl Gemms {
    fn push(&mut self, g: Gemm) {
        self.list[self.len] = g;
        self.len += 1;
    }

    pub fn iter(&self) -> impl Iterator<Item = &Gemm> {
        self.list[..self.len].iter()
    }

    fn flops(&self) -> f64 {
        self.iter().map(Gemm::flops).sum()
    }
}

/// The attention core of one layer: `heads` independent (query × key) problems (sequences ×
/// images × heads), each `queries` long against `keys` keys (the sequence, the image or the
/// window), with head sizes `qk` and `v`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Scores {
    pub heads: f64,
    pub queries: f64,
    pub keys: f64,
    pub qk: f64,
    pub v: f64,
    pub causal: bool,
}

impl Scores {
    /// FLOPs of Q·Kᵀ and the weighted sum of V over the whole score matrix.
    pub fn full_flops(&self) -> f64 {
        2.0 * self.heads * self.queries * self.keys * (self.qk + self.v)
    }

    /// The FLOPs the model needs: a causal mask halves them.
    fn flops(&self) -> f64 {
        if self.causal { 0.5 * self.full_flops() } else { self.full_flops() }
    }
}

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
    /// The products a per-op recompute (`Recompute::Ops`) runs again.
    pub recomputed: Gemms,
    /// Bytes read and written by the forward (weights and activations).
    pub bytes: f64,
    pub params: f64,
    /// Of those, the parameters of routed experts (sharded over expert parallelism).
    pub expert_params: f64,
    /// Activation bytes kept from forward to backward.
    pub activations: f64,
    /// Bytes of the layer's output: what crosses a seam after it.
    pub output: f64,
    /// The kernels of the forward: matrix products, the attention core, and the bytes the
    /// memory-bound kernels between them (norms, activation, residual adds, MoE dispatch) read
    /// and write.
    pub gemms: Gemms,
    pub attention: Scores,
    pub elementwise: f64,
}

fn mlp_factor(mlp: Mlp) -> f64 {
    match mlp {
        Mlp::Gelu => 2.0,
        Mlp::SwiGlu => 3.0,
    }
}

/// Attention projections over `tokens`: the fused Q, K, V product and the output product;
/// their parameters.
fn attention_projections(gemms: &mut Gemms, tokens: f64, h: f64, a: &Attention) -> f64 {
    let q = (a.heads * a.head_dim) as f64;
    let kv = (a.kv_heads * a.head_dim) as f64;
    gemms.push(Gemm::new(tokens, q + 2.0 * kv, h, Split::Columns));
    gemms.push(Gemm::new(tokens, h, q, Split::Rows));
    h * q + 2.0 * h * kv + q * h
}

/// An MLP of width `ffn` over `tokens` (gated: the gate and up products fused into one, as
/// Megatron and torchtitan's fused SwiGLU do); its parameters.
fn mlp(gemms: &mut Gemms, tokens: f64, h: f64, ffn: f64, kind: Mlp) -> f64 {
    let up = (mlp_factor(kind) - 1.0) * ffn;
    gemms.push(Gemm::new(tokens, up, h, Split::Columns));
    gemms.push(Gemm::new(tokens, h, ffn, Split::Rows));
    mlp_factor(kind) * h * ffn
}

/// The widths one layer's memory-bound kernels touch per token.
struct Widths {
    hidden: f64,
    /// The MLP's (every routed and shared expert's together).
    mlp: f64,
    kind: Mlp,
    /// Routed copies of a token (MoE).
    routed: f64,
    /// Queries' and keys' widths, and whether a rotary embedding turns them: in every decoder
    /// (the language says nothing of position embeddings; the eager count is for Llama's kind).
    queries: f64,
    keys: f64,
    rotary: bool,
}

/// Bytes the memory-bound kernels of one layer's forward read and write per token.
/// Fused: two norms and two residual adds (each reading and writing the hidden state: ten
/// hidden-sized tensors), the MLP activation (GeLU reads and writes its width, SwiGLU reads two
/// and writes one), and per routed copy of a token the MoE dispatch and combine (four more).
/// Eager (one kernel per operation, as PyTorch runs torchtitan's Llama without torch.compile,
/// torchtitan/models/llama/model.py and models/norms.py): each RMSNorm casts up to fp32,
/// squares, takes the mean, scales, casts down and multiplies by its weight (36 bytes per
/// element against 4); the rotary embedding casts queries and keys up, multiplies them as
/// complex fp32 and casts down (20 bytes per element); grouped-query attention copies keys and
/// values out to every head; the attention output is copied back to contiguous rows; SwiGLU's
/// SiLU and product are two kernels (10 bytes per element against 6).
fn elementwise(w: &Widths, fused: bool) -> f64 {
    let moe = 4.0 * ELEMENT * w.routed * w.hidden;
    let adds = 6.0 * ELEMENT * w.hidden;
    if fused {
        let activation = match w.kind {
            Mlp::Gelu => 2.0,
            Mlp::SwiGlu => 3.0,
        };
        return ELEMENT * (4.0 * w.hidden + activation * w.mlp) + adds + moe;
    }
    let norms = 2.0 * 36.0 * w.hidden;
    let rotary = if w.rotary { 20.0 * (w.queries + w.keys) } else { 0.0 };
    let repeat = if w.keys < w.queries { 2.0 * ELEMENT * (w.keys + w.queries) } else { 0.0 };
    let activation = match w.kind {
        Mlp::Gelu => 4.0,
        Mlp::SwiGlu => 10.0,
    };
    norms + rotary + repeat + 2.0 * ELEMENT * w.queries + activation * w.mlp + adds + moe
}

/// Activations kept per layer (Korthikanti et al.): s·b·h·(34 + 5·a·s/h) bytes without
/// recompute, 34·s·b·h with selective recompute or a flash-attention kernel (either way the
/// score matrix is not stored), the layer input 2·s·b·h with full recompute; per-op recompute
/// keeps the input and `finish` adds the outputs it saves.
fn kept(tokens: f64, h: f64, heads: f64, seq: f64, recompute: Recompute, flash: bool) -> f64 {
    match recompute {
        Recompute::None if !flash => tokens * h * (34.0 + 5.0 * heads * seq / h),
        Recompute::None => 34.0 * tokens * h,
        Recompute::Selective => 34.0 * tokens * h,
        Recompute::Full | Recompute::Ops => 2.0 * tokens * h,
    }
}

/// A dense layer's products one by one, as an unfused runtime runs them (torchtitan's Llama:
/// wq, wk, wv, wo, then w1, w3, w2), for per-op recompute to count every other one.
fn unfused(tokens: f64, h: f64, d: &Decoder) -> Gemms {
    let a = &d.attention;
    let q = (a.heads * a.head_dim) as f64;
    let kv = (a.kv_heads * a.head_dim) as f64;
    let ffn = d.ffn as f64;
    let mut g = Gemms::default();
    for n in [q, kv, kv] {
        g.push(Gemm::new(tokens, n, h, Split::Columns));
    }
    g.push(Gemm::new(tokens, h, q, Split::Rows));
    for _ in 1..mlp_factor(d.mlp) as usize {
        g.push(Gemm::new(tokens, ffn, h, Split::Columns));
    }
    g.push(Gemm::new(tokens, h, ffn, Split::Rows));
    g
}

pub fn decoder_layer(d: &Decoder, index: u64, part: &Part, b: f64, s: f64, stack: Stack) -> LayerCost {
    let h = d.hidden as f64;
    let tokens = b * s;
    let a = &d.attention;
    let mut gemms = Gemms::default();
    let causal = |heads: f64, qk: f64, v: f64| Scores { heads: b * heads, queries: s, keys: s, qk, v, causal: true };
    let (mut params, attention) = match &d.mla {
        None => {
            let p = attention_projections(&mut gemms, tokens, h, a);
            (p, causal(a.heads as f64, a.head_dim as f64, a.head_dim as f64))
        }
        Some(m) => {
            let heads = a.heads as f64;
            let qk = (m.nope_head_dim + m.rope_head_dim) as f64;
            let v = m.v_head_dim as f64;
            let (q_rank, kv_rank) = (m.q_lora_rank as f64, m.kv_lora_rank as f64);
            let q = if m.q_lora_rank > 0 {
                gemms.push(Gemm::new(tokens, q_rank, h, Split::Columns));
                gemms.push(Gemm::new(tokens, heads * qk, q_rank, Split::Columns));
                h * q_rank + q_rank * heads * qk
            } else {
                gemms.push(Gemm::new(tokens, heads * qk, h, Split::Columns));
                h * heads * qk
            };
            let kv_down = kv_rank + m.rope_head_dim as f64;
            let kv_up = heads * (m.nope_head_dim as f64 + v);
            gemms.push(Gemm::new(tokens, kv_down, h, Split::Columns));
            gemms.push(Gemm::new(tokens, kv_up, kv_rank, Split::Columns));
            gemms.push(Gemm::new(tokens, h, heads * v, Split::Rows));
            (q + h * kv_down + kv_rank * kv_up + heads * v * h, causal(heads, qk, v))
        }
    };
    let dense = d.moe.as_ref().is_none_or(|m| index < m.dense_layers);
    let (expert_params, width, routed) = match (&d.moe, dense) {
        (Some(m), false) => {
            // The router, then top_k routed and the shared experts per token: the routed ones
            // as one grouped product over the experts, each with its share of the tokens.
            let experts = m.experts as f64;
            let ffn = m.expert_ffn as f64;
            let top_k = m.top_k as f64;
            gemms.push(Gemm::new(tokens, experts, h, Split::Columns));
            let per_expert = tokens * top_k / experts;
            let mut routed = Gemms::default();
            let expert = mlp(&mut routed, per_expert, h, ffn, d.mlp);
            for g in routed.iter() {
                gemms.push(Gemm { batch: experts, experts: true, ..*g });
            }
            let shared = m.shared_experts as f64;
            if m.shared_experts > 0 {
                mlp(&mut gemms, tokens, h, shared * ffn, d.mlp);
            }
            params += experts * expert + shared * expert + h * experts;
            (experts * expert, (top_k + shared) * ffn, top_k)
        }
        _ => {
            params += mlp(&mut gemms, tokens, h, d.ffn as f64, d.mlp);
            (0.0, d.ffn as f64, 0.0)
        }
    };
    // What the runtime runs one by one, before the LM head (outside the checkpointed block):
    // a dense layer's products unfused, the others as listed.
    let sequence = if d.mla.is_none() && d.moe.is_none() { unfused(tokens, h, d) } else { gemms };
    // The embedding sits with the first layer (no FLOPs, but parameters); the LM head with
    // the last.
    if index == 0 {
        params += h * d.vocab as f64;
    }
    if index + 1 == d.layers {
        gemms.push(Gemm::new(tokens, d.vocab as f64, h, Split::Columns));
        if !d.tied_embeddings {
            params += h * d.vocab as f64;
        }
    }
    let kept = kept(tokens, h, a.heads as f64, s, part.recompute, stack.flash);
    let widths = Widths {
        hidden: h,
        mlp: width,
        kind: d.mlp,
        routed,
        queries: attention.heads / b * attention.qk,
        keys: (a.kv_heads * a.head_dim) as f64,
        rotary: true,
    };
    finish(
        Parts {
            gemms,
            sequence,
            attention,
            params,
            expert_params,
            tokens,
            hidden: h,
            kept,
            output: ELEMENT * tokens * h,
            elementwise: tokens * elementwise(&widths, stack.fused),
        },
        part.recompute,
    )
}

/// One encoder layer over `image_tokens` tokens per sequence in `images` images: attention
/// spans one image (tiles and images are encoded independently, as InternViT and Qwen-VL do),
/// or a window within it.
pub fn encoder_layer(e: &Encoder, index: u64, part: &Part, b: f64, visual: (f64, f64), stack: Stack) -> LayerCost {
    let h = e.hidden as f64;
    let (t, images) = visual;
    let tokens = b * t;
    let a = &e.attention;
    let mut gemms = Gemms::default();
    if index == 0 {
        // Patch embedding: a matmul of 2·s_img·(3·p²·temporal)·h.
        gemms.push(Gemm::new(tokens, h, (3 * e.patch * e.patch * e.temporal_patch) as f64, Split::Columns));
    }
    let mut params = attention_projections(&mut gemms, tokens, h, a) + mlp(&mut gemms, tokens, h, e.ffn as f64, e.mlp);
    let image = t / images.max(1.0);
    let windowed = match e.window {
        Some((w, full)) => index >= full.min(e.layers) && (w as f64) < image,
        None => false,
    };
    let span = if windowed { e.window.map_or(image, |(w, _)| w as f64) } else { image };
    // Windows tile the image: image / span windows of span queries each.
    let windows = if windowed { image / span } else { 1.0 };
    let d = a.head_dim as f64;
    let attention = Scores {
        heads: b * images.max(1.0) * windows * a.heads as f64,
        queries: span,
        keys: span,
        qk: d,
        v: d,
        causal: false,
    };
    let mut output = ELEMENT * tokens * h;
    if index == 0 {
        params += (3 * e.patch * e.patch * e.temporal_patch) as f64 * h;
    }
    if index + 1 == e.layers {
        // Merge m×m patches (width h·m²), then project to the LLM's width.
        let m2 = (e.merge * e.merge) as f64;
        let merged = tokens / m2;
        let wide = h * m2;
        gemms.push(Gemm::new(merged, wide, wide, Split::Columns));
        gemms.push(Gemm::new(merged, e.out_hidden as f64, wide, Split::Rows));
        params += wide * wide + wide * e.out_hidden as f64;
        output = ELEMENT * merged * e.out_hidden as f64;
    }
    let kept = kept(tokens, h, a.heads as f64, span, part.recompute, stack.flash);
    let width = (a.heads * a.head_dim) as f64;
    let widths =
        Widths { hidden: h, mlp: e.ffn as f64, kind: e.mlp, routed: 0.0, queries: width, keys: width, rotary: false };
    finish(
        Parts {
            gemms,
            sequence: gemms,
            attention,
            params,
            expert_params: 0.0,
            tokens,
            hidden: h,
            kept,
            output,
            elementwise: tokens * elementwise(&widths, stack.fused),
        },
        part.recompute,
    )
}

/// What each layer kind computes before the parts common to all of them.
struct Parts {
    gemms: Gemms,
    /// The products as the runtime launches them, for per-op recompute.
    sequence: Gemms,
    attention: Scores,
    params: f64,
    expert_params: f64,
    tokens: f64,
    hidden: f64,
    kept: f64,
    output: f64,
    elementwise: f64,
}

/// The layer's totals: FLOPs, what recompute redoes, bytes moved (weights once, about twelve
/// activation-sized tensors read or written).
fn finish(p: Parts, recompute: Recompute) -> LayerCost {
    let weight_flops = p.gemms.flops();
    let scores = p.attention.flops();
    let flops = weight_flops + scores;
    // Per-op recompute keeps every other product's output, from the first, and the attention
    // core's, and runs the products between them again.
    let mut recomputed = Gemms::default();
    let mut kept = p.kept;
    if recompute == Recompute::Ops {
        for (i, g) in p.sequence.iter().enumerate() {
            if i % 2 == 1 {
                recomputed.push(*g);
            } else {
                kept += ELEMENT * g.batch * g.m * g.n;
            }
        }
        kept += ELEMENT * p.attention.heads * p.attention.queries * p.attention.v;
    }
    let recompute_flops = match recompute {
        Recompute::None => 0.0,
        Recompute::Selective => scores,
        Recompute::Ops => recomputed.flops(),
        Recompute::Full => flops,
    };
    LayerCost {
        flops,
        weight_flops,
        recompute_flops,
        recomputed,
        bytes: ELEMENT * p.params + ELEMENT * 12.0 * p.tokens * p.hidden,
        params: p.params,
        expert_params: p.expert_params,
        activations: kept,
        output: p.output,
        gemms: p.gemms,
        attention: p.attention,
        elementwise: p.elementwise,
    }
}

/// Layer `index` of `part` for a microbatch of `b` sequences with `visual` = (image tokens,
/// images) each.
pub fn layer(part: &Part, index: u64, b: f64, seq_len: f64, visual: (f64, f64), stack: Stack) -> LayerCost {
    match &part.arch.kind {
        ArchKind::Decoder(d) => decoder_layer(d, index, part, b, seq_len, stack),
        ArchKind::Encoder(e) => encoder_layer(e, index, part, b, visual, stack),
    }
}
