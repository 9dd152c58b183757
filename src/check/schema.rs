//! What each block of the language may hold: field names, types, whether required, and a
//! one-line doc. The checker, `fmt`-independent tooling (hover, completion) and `explain`
//! read these tables, so a field is declared once.

use crate::ast::DefKind;
use crate::units::Dimension;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Ty {
    /// A whole number of at least `min`, no unit.
    Count {
        min: u64,
    },
    /// A number in (0, 1].
    Fraction,
    Bool,
    Quantity(Dimension),
    Choice(&'static [&'static str]),
    /// A name bound to a definition of one of these kinds.
    Ref(&'static [DefKind]),
    /// A whole number, or a list of them (one per microbatch).
    CountOrList {
        min: u64,
    },
    Block(&'static Schema),
    /// A string naming a file, relative to the plan.
    Path,
}

impl Ty {
    pub fn describe(&self) -> String {
        match self {
            Ty::Count { min: 0 } => "a whole number".into(),
            Ty::Count { .. } => "a positive whole number".into(),
            Ty::Fraction => "a number between 0 and 1".into(),
            Ty::Bool => "`true` or `false`".into(),
            Ty::Quantity(d) => d.to_string(),
            Ty::Choice(c) => format!("one of {}", c.join(", ")),
            Ty::Ref(kinds) => format!("the name of a {} definition", crate::resolve::kind_word(kinds)),
            Ty::CountOrList { .. } => "a whole number or a list of them".into(),
            Ty::Block(_) => "a block `{ … }`".into(),
            Ty::Path => "a file name in quotes".into(),
        }
    }

    /// Placeholder text for "add `field = …;`" help lines.
    pub fn hint(&self) -> String {
        match self {
            Ty::Count { .. } | Ty::CountOrList { .. } => "1".into(),
            Ty::Fraction => "0.5".into(),
            Ty::Bool => "true".into(),
            Ty::Quantity(Dimension::Bytes) => "64GiB".into(),
            Ty::Quantity(Dimension::Bandwidth) => "100GB/s".into(),
            Ty::Quantity(Dimension::Time) => "10us".into(),
            Ty::Quantity(Dimension::FlopRate) => "300TFLOP/s".into(),
            Ty::Quantity(Dimension::Flops) => "1TFLOP".into(),
            Ty::Choice(c) => c[0].into(),
            Ty::Ref(_) => "name".into(),
            Ty::Block(_) => "{ … }".into(),
            Ty::Path => "\"tokens.csv\"".into(),
        }
    }
}

#[derive(Debug, PartialEq)]
pub struct FieldSpec {
    pub name: &'static str,
    pub ty: Ty,
    pub required: bool,
    pub doc: &'static str,
}

#[derive(Debug, PartialEq)]
pub struct Schema {
    /// How messages name the block: "`hardware`", "`cluster`".
    pub context: &'static str,
    pub fields: &'static [FieldSpec],
}

impl Schema {
    pub fn field(&self, name: &str) -> Option<&FieldSpec> {
        self.fields.iter().find(|f| f.name == name)
    }
}

const fn req(name: &'static str, ty: Ty, doc: &'static str) -> FieldSpec {
    FieldSpec { name, ty, required: true, doc }
}

const fn opt(name: &'static str, ty: Ty, doc: &'static str) -> FieldSpec {
    FieldSpec { name, ty, required: false, doc }
}

const POSITIVE: Ty = Ty::Count { min: 1 };
const WHOLE: Ty = Ty::Count { min: 0 };

pub static LINK: Schema = Schema {
    context: "a link class",
    fields: &[
        req("alpha", Ty::Quantity(Dimension::Time), "latency of one message on this link class (α)"),
        req("beta", Ty::Quantity(Dimension::Bandwidth), "achievable bandwidth per device, one direction (β)"),
    ],
};

pub static HARDWARE: Schema = Schema {
    context: "`hardware`",
    fields: &[
        req("peak_bf16", Ty::Quantity(Dimension::FlopRate), "peak dense bf16 FLOP rate of one device"),
        req("hbm", Ty::Quantity(Dimension::Bytes), "device memory"),
        req("hbm_bandwidth", Ty::Quantity(Dimension::Bandwidth), "device memory bandwidth"),
        opt("compute_units", POSITIVE, "streaming multiprocessors or AI cores a matrix product's tiles run on"),
        opt("matmul_efficiency", Ty::Fraction, "fraction of peak a large matrix product sustains (default 0.7)"),
        opt(
            "attention_efficiency",
            Ty::Fraction,
            "fraction of peak a flash-attention forward sustains (default 0.84 × matmul_efficiency)",
        ),
        req("devices_per_node", POSITIVE, "devices sharing the fast intra-node link"),
        req("intra_node", Ty::Block(&LINK), "the link between devices of one node"),
        req("inter_node", Ty::Block(&LINK), "the link between devices of different nodes"),
    ],
};

const MLP: &[&str] = &["gelu", "swiglu"];

pub static ENCODER: Schema = Schema {
    context: "`encoder`",
    fields: &[
        req("layers", POSITIVE, "transformer layers"),
        req("hidden", POSITIVE, "hidden size"),
        req("ffn", POSITIVE, "MLP intermediate size"),
        req("heads", POSITIVE, "attention heads"),
        opt("kv_heads", POSITIVE, "key/value heads (default: heads)"),
        opt("head_dim", POSITIVE, "size of one head (default: hidden / heads)"),
        opt("mlp", Ty::Choice(MLP), "MLP form: gelu (2 matrices) or swiglu (3; default gelu)"),
        req("patch", POSITIVE, "patch size in pixels"),
        opt("temporal_patch", POSITIVE, "frames per patch (default 1)"),
        opt("merge", POSITIVE, "patches merged per side before the LLM, e.g. 2 for 2x2 (default 1)"),
        opt("out_hidden", POSITIVE, "width of the features handed to the LLM (default: hidden)"),
        opt("window", POSITIVE, "tokens per attention window of windowed layers (default: full attention)"),
        opt("full_attention_layers", WHOLE, "layers with full attention when `window` is set"),
    ],
};

pub static MOE: Schema = Schema {
    context: "`moe`",
    fields: &[
        req("experts", POSITIVE, "routed experts per MoE layer"),
        req("top_k", POSITIVE, "routed experts active per token"),
        opt("shared_experts", WHOLE, "always-active shared experts (default 0)"),
        req("expert_ffn", POSITIVE, "intermediate size of one expert"),
        opt("dense_layers", WHOLE, "leading layers that are dense, with `ffn` (default 0)"),
    ],
};

pub static MLA: Schema = Schema {
    context: "`mla`",
    fields: &[
        opt("q_lora_rank", WHOLE, "rank of the query compression (0: none)"),
        req("kv_lora_rank", POSITIVE, "rank of the key/value compression"),
        req("rope_head_dim", POSITIVE, "rotary part of each query/key head"),
        req("nope_head_dim", POSITIVE, "non-rotary part of each query/key head"),
        req("v_head_dim", POSITIVE, "size of each value head"),
    ],
};

pub static DECODER: Schema = Schema {
    context: "`decoder`",
    fields: &[
        req("layers", POSITIVE, "transformer layers"),
        req("hidden", POSITIVE, "hidden size"),
        req("ffn", POSITIVE, "MLP intermediate size (of dense layers)"),
        req("heads", POSITIVE, "attention heads"),
        opt("kv_heads", POSITIVE, "key/value heads, for grouped-query attention (default: heads)"),
        opt("head_dim", POSITIVE, "size of one head (default: hidden / heads)"),
        req("vocab", POSITIVE, "vocabulary size"),
        opt("mlp", Ty::Choice(MLP), "MLP form: gelu or swiglu (default swiglu)"),
        opt("tied_embeddings", Ty::Bool, "input embedding shared with the LM head (default false)"),
        opt("moe", Ty::Block(&MOE), "mixture-of-experts layers"),
        opt("mla", Ty::Block(&MLA), "multi-head latent attention"),
    ],
};

pub const RECOMPUTE: &[&str] = &["none", "selective", "ops", "full"];

pub static PART: Schema = Schema {
    context: "a model part",
    fields: &[
        opt("frozen", Ty::Bool, "no weight gradients for this part (default false)"),
        opt(
            "recompute",
            Ty::Choice(RECOMPUTE),
            "activation recompute: none, selective (the attention core), ops (every other product and the memory-bound kernels) or full (default none)",
        ),
        opt("forward_time", Ty::Quantity(Dimension::Time), "measured forward time of one layer for one microbatch"),
        opt("backward_time", Ty::Quantity(Dimension::Time), "measured backward time of one layer for one microbatch"),
    ],
};

pub static CLUSTER: Schema = Schema {
    context: "`cluster`",
    fields: &[
        req("hardware", Ty::Ref(&[DefKind::Hardware]), "the device type"),
        req("devices", POSITIVE, "devices in the job"),
        req("pp", POSITIVE, "pipeline-parallel ranks"),
        opt("dp", POSITIVE, "data-parallel replicas (default 1)"),
        opt("tp", POSITIVE, "tensor-parallel ranks (default 1)"),
        opt("ep", POSITIVE, "expert-parallel ranks, within data parallelism (default 1)"),
        opt("distributed_optimizer", Ty::Bool, "shard optimizer state over dp, ZeRO-1 (default false)"),
        opt(
            "shard_weights",
            Ty::Bool,
            "shard weights and gradients over dp too, ZeRO-3/FSDP: each layer gathered and its gradients reduce-scattered beside its neighbours' compute (default false)",
        ),
        opt("efficiency", Ty::Fraction, "one fraction of peak FLOP/s for every kernel, in place of the kernel model"),
        opt("overlap_comm", Ty::Bool, "sends and receives overlap compute (default true)"),
        opt("flash_attention", Ty::Bool, "attention kernels keep no score matrix for backward (default true)"),
        opt(
            "fused_kernels",
            Ty::Bool,
            "norms, activations and residual adds run fused (Megatron, torch.compile); false: eager, one kernel per operation (default true)",
        ),
        opt(
            "profile",
            Ty::Path,
            "a profile `mpipec profile` wrote: measured costs used where it has them, the analytic model elsewhere",
        ),
    ],
};

pub static BATCH: Schema = Schema {
    context: "`batch`",
    fields: &[
        req("microbatches", POSITIVE, "microbatches per step and pipeline (M)"),
        opt("micro_batch_size", POSITIVE, "sequences per microbatch (default 1)"),
        req("seq_len", POSITIVE, "LLM tokens per sequence, image features included"),
        opt("image_tokens", Ty::CountOrList { min: 0 }, "encoder tokens per sequence, or a list, one per microbatch"),
        opt(
            "images",
            POSITIVE,
            "images (or tiles) per sequence, each encoded on its own: attention spans one image (default 1)",
        ),
        opt(
            "image_histogram",
            Ty::Path,
            "a CSV of `tokens,weight` lines: the distribution `sim --samples` draws image tokens from",
        ),
    ],
};

pub fn of_definition(kind: DefKind) -> &'static Schema {
    match kind {
        DefKind::Hardware => &HARDWARE,
        DefKind::Encoder => &ENCODER,
        DefKind::Decoder => &DECODER,
        DefKind::Model => &PART,
    }
}
