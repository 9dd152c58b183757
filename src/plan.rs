//! The checked plan, the compiler's vocabulary from `check` on: every name resolved, every
//! quantity in base units, every rule of the language and of the algebra satisfied. `check`
//! builds it; `cost`, `derive`, `sim`, the backends and `explore` read it.

use crate::algebra::{Cut, OwnerSpec, Skeleton};
use crate::span::Span;

/// The closed set of backends, each named once: the enum, its list and its names come from
/// one table (as `diagnostics::codes` does for codes).
macro_rules! targets {
    ($($target:ident = $name:literal,)*) => {
        /// A training stack `build` writes for.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Target { $($target,)* }

        impl Target {
            pub const ALL: &'static [Target] = &[$(Target::$target,)*];
            /// The names the language and `--target` use, in the order of `ALL`.
            pub const NAMES: &'static [&'static str] = &[$($name,)*];

            pub fn name(self) -> &'static str {
                match self { $(Target::$target => $name,)* }
            }
        }
    };
}

targets! {
    Torch = "torch",
    Megatron = "megatron",
    MindFormers = "mindformers",
    MindSpeedMm = "mindspeed-mm",
    HyperParallel = "hyperparallel",
}

impl Target {
    pub fn parse(name: &str) -> Option<Target> {
        Target::ALL.iter().copied().find(|t| t.name() == name)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Link {
    /// Seconds per message.
    pub alpha: f64,
    /// Bytes per second.
    pub beta: f64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Hardware {
    pub name: String,
    /// FLOP per second, dense bf16.
    pub peak_bf16: f64,
    pub hbm_bytes: f64,
    pub hbm_bandwidth: f64,
    /// Streaming multiprocessors (AI cores): the tiles of a matrix product run in waves of
    /// this many; without it the kernel model leaves wave quantization out.
    pub compute_units: Option<u64>,
    /// Fraction of `peak_bf16` a large matrix product sustains in training.
    pub matmul_efficiency: Option<f64>,
    /// Fraction of `peak_bf16` a fused (flash) attention forward sustains.
    pub attention_efficiency: Option<f64>,
    pub devices_per_node: u64,
    pub intra_node: Link,
    pub inter_node: Link,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mlp {
    Gelu,
    SwiGlu,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Attention {
    pub heads: u64,
    pub kv_heads: u64,
    pub head_dim: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Encoder {
    pub layers: u64,
    pub hidden: u64,
    pub ffn: u64,
    pub attention: Attention,
    pub mlp: Mlp,
    pub patch: u64,
    pub temporal_patch: u64,
    pub merge: u64,
    pub out_hidden: u64,
    /// Tokens per window of windowed layers, and how many layers attend fully.
    pub window: Option<(u64, u64)>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Moe {
    pub experts: u64,
    pub top_k: u64,
    pub shared_experts: u64,
    pub expert_ffn: u64,
    pub dense_layers: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Mla {
    pub q_lora_rank: u64,
    pub kv_lora_rank: u64,
    pub rope_head_dim: u64,
    pub nope_head_dim: u64,
    pub v_head_dim: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Decoder {
    pub layers: u64,
    pub hidden: u64,
    pub ffn: u64,
    pub attention: Attention,
    pub vocab: u64,
    pub mlp: Mlp,
    pub tied_embeddings: bool,
    pub moe: Option<Moe>,
    pub mla: Option<Mla>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ArchKind {
    Encoder(Encoder),
    Decoder(Decoder),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Arch {
    pub name: String,
    pub kind: ArchKind,
}

impl Arch {
    pub fn is_encoder(&self) -> bool {
        matches!(self.kind, ArchKind::Encoder(_))
    }

    pub fn layers(&self) -> u64 {
        match &self.kind {
            ArchKind::Encoder(e) => e.layers,
            ArchKind::Decoder(d) => d.layers,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recompute {
    None,
    /// Megatron's: the attention core again in backward, nothing else.
    Selective,
    /// Per operation (torchtitan's `selective_ac_option = 'op'`): the attention core and every
    /// other matrix product kept, the other products and every memory-bound kernel again.
    Ops,
    Full,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Part {
    pub name: String,
    pub arch: Arch,
    pub frozen: bool,
    pub recompute: Recompute,
    /// Measured seconds per layer and microbatch, when the plan pins them.
    pub forward_time: Option<f64>,
    pub backward_time: Option<f64>,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Model {
    pub name: String,
    pub parts: Vec<Part>,
}

impl Model {
    pub fn layers(&self) -> u64 {
        self.parts.iter().map(|p| p.arch.layers()).sum()
    }

    /// The kind of every global layer, as a profile names it (`crate::profile::kinds`).
    pub fn layer_kinds(&self, miniature: bool) -> Vec<String> {
        let parts = self.parts.iter().map(|p| crate::profile::PartShape {
            arch: &p.arch.name,
            encoder: p.arch.is_encoder(),
            layers: p.arch.layers(),
        });
        crate::profile::kinds(parts, miniature)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Cluster {
    pub hardware: Hardware,
    pub devices: u64,
    pub pp: u64,
    pub dp: u64,
    pub tp: u64,
    pub ep: u64,
    pub distributed_optimizer: bool,
    /// Weights and gradients sharded over dp too (ZeRO-3, FSDP): each layer's weights gathered
    /// for its forward and its backward, its gradients reduce-scattered after.
    pub shard_weights: bool,
    /// Fraction of peak compute every kernel reaches, when the plan pins one; otherwise the
    /// kernel model of `cost::kernels` times each kernel by its shape.
    pub efficiency: Option<f64>,
    /// Whether transfers overlap compute; if not, the sender is busy while it sends.
    pub overlap_comm: bool,
    /// Fused attention: the s×s score matrix is recomputed in backward, never stored.
    pub flash_attention: bool,
    /// The memory-bound kernels between the products fused (Megatron's kernels, torch.compile);
    /// false: eager PyTorch, one kernel per operation.
    pub fused_kernels: bool,
    /// Measured costs (`profile = "file.json"` or `--profile`) the cost model prefers to its own.
    pub profile: Option<std::sync::Arc<crate::profile::Profile>>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Batch {
    pub microbatches: u64,
    pub micro_batch_size: u64,
    pub seq_len: u64,
    /// Encoder tokens per sequence: one value for every microbatch, or one per microbatch.
    pub image_tokens: Vec<u64>,
    /// Images per sequence, each encoded independently (attention within one image), so one
    /// microbatch's encode divides by images across ranks.
    pub images: u64,
    /// The distribution image tokens are drawn from by `sim --samples`: (tokens, weight).
    pub histogram: Vec<(u64, f64)>,
}

impl Batch {
    pub fn image_tokens_of(&self, mb: u64) -> u64 {
        match self.image_tokens.as_slice() {
            [] => 0,
            [one] => *one,
            many => many[mb as usize % many.len()],
        }
    }
}

/// One region's skeleton with its optional pinned split (layers per stage).
#[derive(Clone, Debug, PartialEq)]
pub struct RegionSchedule {
    pub skeleton: Skeleton,
    pub split: Option<Vec<u64>>,
    /// The skeleton as written in the `schedule` statement.
    pub span: Span,
}

/// A backend the plan asks `build` for, and whether a skeleton the backend cannot run is
/// replaced by its nearest native equivalent (`target megatron(nearest);`).
#[derive(Clone, Debug, PartialEq)]
pub struct TargetSpec {
    pub target: Target,
    pub nearest: bool,
    pub span: Option<Span>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The plan file as named on the command line.
    pub source: String,
    pub model: Model,
    pub cluster: Cluster,
    pub batch: Batch,
    pub cut: Cut,
    pub schedule: Vec<RegionSchedule>,
    pub owner: Option<OwnerSpec>,
    pub targets: Vec<TargetSpec>,
}

impl Plan {
    /// The model parts the cut's region `region` takes layers from, a part once per run of its
    /// layers there.
    pub fn region_parts(&self, region: usize) -> impl Iterator<Item = &Part> {
        self.cut.regions[region].segments.iter().map(|(part, _)| &self.model.parts[*part])
    }
}

/// Counts that must divide another (`kv_heads` of `heads`, `ep` of `dp`, `images` of
/// `image_tokens`): the checker's fix-its and tune's candidates keep them whole.
pub fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// The divisor of `n` nearest `near` (the smaller on a tie).
pub fn nearest_divisor(n: u64, near: u64) -> u64 {
    let small = (1..).take_while(|d| d * d <= n).filter(|d| n.is_multiple_of(*d));
    let divisors = small.flat_map(|d| [d, n / d]);
    divisors.min_by_key(|&d| (d.abs_diff(near), d)).unwrap_or(1)
}
