//! The cost model of a plan: roofline compute on the declared hardware, α–β communication per
//! link class, memory per device. Times are seconds on one device of a pipeline rank (tensor
//! parallelism divides a stage's work over `tp` devices).

use std::ops::Range;

use super::Costs;
use super::kernels::Kernels;
use super::layers::{self, LayerCost};
use super::profile::Measured;
use crate::plan::{Link, Plan, Recompute};

/// Bytes per gradient element reduced across replicas (fp32 main gradients, as Megatron
/// keeps them) and per parameter of mixed-precision Adam state (fp32 master, m, v).
pub const GRAD_BYTES: f64 = 4.0;
pub const OPTIMIZER_BYTES: f64 = 12.0;

/// Borrows its plan: a build derives and simulates with one model, and nothing copies the plan.
pub struct CostModel<'p> {
    /// Per global layer: (part index, index within the part).
    layers: Vec<(usize, u64)>,
    plan: &'p Plan,
    /// Per global layer: its numbers and times for each distinct image-token count of the
    /// batch (an encoder layer's cost follows its microbatch's images; a decoder layer has one).
    cache: Vec<Vec<Cached>>,
    /// Per entry of the batch's `image_tokens`: the index of its count in a layer's cache.
    slots: Vec<usize>,
    /// The end of the frozen prefix (`super::first_trainable`).
    first_trainable: u64,
    /// The plan's profile over its layers: measured numbers, asked before the formulas.
    measured: Option<Measured>,
    compute: Compute,
}

/// How compute is timed: the kernel model, or the plan's one `efficiency` for every kernel.
enum Compute {
    Kernels(Kernels),
    Pinned(f64),
}

/// One layer's numbers for one image-token count, and the times of its three passes (the
/// kernel model costs more than a lookup; the simulator and the searches ask millions of times).
struct Cached {
    cost: LayerCost,
    forward: f64,
    backward_input: f64,
    backward_weight: f64,
}

impl<'p> CostModel<'p> {
    pub fn new(plan: &'p Plan) -> CostModel<'p> {
        let mut layers = Vec::new();
        for (p, part) in plan.model.parts.iter().enumerate() {
            for i in 0..part.arch.layers() {
                layers.push((p, i));
            }
        }
        let compute = match plan.cluster.efficiency {
            Some(e) => Compute::Pinned(e),
            None => Compute::Kernels(Kernels::new(&plan.cluster)),
        };
        let mut counts: Vec<u64> = plan.batch.image_tokens.clone();
        counts.sort_unstable();
        counts.dedup();
        if counts.is_empty() {
            counts.push(0);
        }
        let slots = plan.batch.image_tokens.iter().map(|t| counts.binary_search(t).unwrap_or(0)).collect();
        let mut model = CostModel {
            layers,
            plan,
            cache: Vec::new(),
            slots,
            first_trainable: super::first_trainable(plan),
            measured: plan.cluster.profile.as_ref().map(|p| Measured::new(p.clone(), plan)),
            compute,
        };
        model.cache = model.layers.iter().map(|&(p, i)| model.cached(p, i, &counts)).collect();
        model
    }

    /// Layer `i` of part `p` for each image-token count in `counts` (once for a decoder).
    fn cached(&self, p: usize, i: u64, counts: &[u64]) -> Vec<Cached> {
        let part = &self.plan.model.parts[p];
        let b = &self.plan.batch;
        let counts = if part.arch.is_encoder() { counts } else { &counts[..1] };
        counts
            .iter()
            .map(|&tokens| {
                let cost = layers::layer(
                    part,
                    i,
                    b.micro_batch_size as f64,
                    b.seq_len as f64,
                    (tokens as f64, b.images as f64),
                    layers::Stack::of(&self.plan.cluster),
                );
                Cached {
                    forward: self.forward_time(&cost),
                    backward_input: self.backward_input_time(&cost, part.recompute),
                    backward_weight: self.backward_weight_time(&cost),
                    cost,
                }
            })
            .collect()
    }

    pub fn plan(&self) -> &'p Plan {
        self.plan
    }

    pub fn measured(&self) -> Option<&Measured> {
        self.measured.as_ref()
    }

    /// The profile's numbers of `layer`, when it has its kind.
    fn profiled(&self, layer: u64) -> Option<&crate::profile::LayerProfile> {
        self.measured.as_ref()?.layer(layer)
    }

    fn entry(&self, layer: u64, mb: u32) -> &Cached {
        let per_count = &self.cache[layer as usize];
        if per_count.len() == 1 {
            return &per_count[0];
        }
        &per_count[self.slots[mb as usize % self.slots.len()]]
    }

    /// The numbers of global layer `layer` for microbatch `mb`.
    pub fn layer(&self, layer: u64, mb: u32) -> &LayerCost {
        &self.entry(layer, mb).cost
    }

    fn tp(&self) -> f64 {
        self.plan.cluster.tp as f64
    }

    /// Roofline with the plan's one `efficiency`: the slower of compute at peak × efficiency
    /// and memory traffic at HBM bandwidth.
    fn roofline(&self, efficiency: f64, flops: f64, bytes: f64) -> f64 {
        let hw = &self.plan.cluster.hardware;
        let tp = self.tp();
        (flops / (hw.peak_bf16 * efficiency * tp)).max(bytes / (hw.hbm_bandwidth * tp))
    }

    /// Tensor parallelism's two all-reduces of the layer's activations per pass (after the
    /// attention and after the MLP), on the intra-node link, not overlapped.
    fn tensor_parallel_time(&self, c: &LayerCost) -> f64 {
        let cluster = &self.plan.cluster;
        if cluster.tp <= 1 {
            return 0.0;
        }
        2.0 * self.all_reduce(c.output, cluster.tp, &cluster.hardware.intra_node)
    }

    /// A forward of the layer's own kernels and its tensor-parallel all-reduces.
    fn forward_time(&self, c: &LayerCost) -> f64 {
        let kernels = match &self.compute {
            Compute::Kernels(k) => k.forward(c),
            Compute::Pinned(e) => self.roofline(*e, c.flops, c.bytes),
        };
        kernels + self.tensor_parallel_time(c)
    }

    /// The activation gradient: the products' input gradients, the attention core's backward,
    /// the all-reduces, and what recompute redoes first (the attention core, or the whole
    /// forward with its all-reduces).
    fn backward_input_time(&self, c: &LayerCost, recompute: Recompute) -> f64 {
        let own = match &self.compute {
            Compute::Kernels(k) => {
                let again = match recompute {
                    Recompute::None => 0.0,
                    Recompute::Selective => k.attention_forward(&c.attention),
                    Recompute::Ops => k.recompute_ops(c),
                    Recompute::Full => k.forward(c),
                };
                k.backward_input(c) + again
            }
            Compute::Pinned(e) => {
                let scores = c.flops - c.weight_flops;
                self.roofline(*e, c.weight_flops + 2.0 * scores + c.recompute_flops, c.bytes)
            }
        };
        let all_reduces = if recompute == Recompute::Full { 2.0 } else { 1.0 };
        own + all_reduces * self.tensor_parallel_time(c)
    }

    fn backward_weight_time(&self, c: &LayerCost) -> f64 {
        match &self.compute {
            Compute::Kernels(k) => k.backward_weight(c),
            Compute::Pinned(e) => self.roofline(*e, c.weight_flops, c.bytes),
        }
    }

    fn part_of(&self, layer: u64) -> &crate::plan::Part {
        &self.plan.model.parts[self.layers[layer as usize].0]
    }

    /// Whether a gradient reaches `layer`: false in the frozen prefix, whatever stage holds it.
    fn has_backward(&self, layer: u64) -> bool {
        layer >= self.first_trainable
    }

    /// Forward FLOPs of a step's model work (forward + backward, no recompute) over all
    /// pipelines: what MFU counts.
    pub fn model_flops(&self) -> f64 {
        let m = self.plan.batch.microbatches as u32;
        let mut total = 0.0;
        for l in 0..self.layers.len() as u64 {
            let input = self.has_backward(l);
            let weight = !self.part_of(l).frozen;
            for mb in 0..m {
                let c = self.layer(l, mb);
                let scores = c.flops - c.weight_flops;
                total += c.flops;
                if input {
                    total += c.weight_flops + 2.0 * scores;
                }
                if weight {
                    total += c.weight_flops;
                }
            }
        }
        total * self.plan.cluster.dp as f64
    }

    /// Bytes of the activation leaving `layers` (its last layer's output) per device.
    pub fn boundary_bytes(&self, layers: Range<u64>, mb: u32) -> f64 {
        self.layer(layers.end - 1, mb).output / self.tp()
    }

    /// The link between two global ranks: intra-node when they share a node.
    pub fn link(&self, a: u64, b: u64) -> &Link {
        let hw = &self.plan.cluster.hardware;
        if a / hw.devices_per_node == b / hw.devices_per_node { &hw.intra_node } else { &hw.inter_node }
    }

    /// Global rank of pipeline rank `pp` (dp 0, tp 0) in Megatron's order.
    pub fn global(&self, pp: u32) -> u64 {
        let c = &self.plan.cluster;
        u64::from(pp) * c.dp * c.tp
    }

    /// Point to point: α + n/β.
    pub fn p2p(&self, bytes: f64, from: u32, to: u32) -> f64 {
        let link = self.link(self.global(from), self.global(to));
        link.alpha + bytes / link.beta
    }

    /// Ring all-reduce of `bytes` over `k` ranks: 2(k−1)·α + 2(k−1)/k · n/β.
    pub fn all_reduce(&self, bytes: f64, k: u64, link: &Link) -> f64 {
        if k <= 1 {
            return 0.0;
        }
        let k = k as f64;
        2.0 * (k - 1.0) * link.alpha + 2.0 * (k - 1.0) / k * bytes / link.beta
    }

    /// All-gather or reduce-scatter of `bytes` (the whole tensor) over `k` ranks on a ring:
    /// (k−1)·α + (k−1)/k · n/β.
    pub fn gather(&self, bytes: f64, k: u64, link: &Link) -> f64 {
        let k = k as f64;
        (k - 1.0) * link.alpha + (k - 1.0) / k * bytes / link.beta
    }

    /// What sharded weights (ZeRO-3, FSDP) add to a step over `layers` in order, on a
    /// data-parallel ring on `link`. Each layer's weights are gathered before its forward and
    /// again before its backward (the last layer's stay from one to the other) and its
    /// gradients reduce-scattered after it, on a stream of their own: the next layer's gather
    /// runs beside a layer's forward, and beside its backward the gather of the layer before
    /// and the reduce-scatter of the layer after (FSDP's prefetch). The step waits for the
    /// first gather, for the last reduce-scatter, and wherever a layer's collectives outlast
    /// the compute they run beside (one microbatch's).
    pub fn sharded_collectives(&self, layers: &[u64], link: &Link) -> f64 {
        let k = self.plan.cluster.dp;
        if k <= 1 || layers.is_empty() {
            return 0.0;
        }
        let params = |i: usize| layers.get(i).map_or(0.0, |&l| self.device_params(l..l + 1));
        let gathered =
            |i: usize| if layers.get(i).is_some() { self.gather(layers::ELEMENT * params(i), k, link) } else { 0.0 };
        let reduced = |i: usize| {
            let trainable = layers.get(i).is_some_and(|&l| !self.part_of(l).frozen);
            if trainable { self.gather(GRAD_BYTES * params(i), k, link) } else { 0.0 }
        };
        let mut exposed = gathered(0) + reduced(0);
        for (i, &l) in layers.iter().enumerate() {
            exposed += (gathered(i + 1) - self.forward(l..l + 1, 0)).max(0.0);
            let before = if i > 0 { gathered(i - 1) } else { 0.0 };
            exposed += (before + reduced(i + 1) - self.backward(l..l + 1, 0)).max(0.0);
        }
        exposed
    }

    /// The link a data-parallel ring of pipeline rank `pp` runs on.
    pub fn dp_link(&self, pp: u32) -> &Link {
        let c = &self.plan.cluster;
        let first = self.global(pp);
        self.link(first, first + (c.dp - 1) * c.tp)
    }

    /// The link the pipeline-group ring runs on.
    pub fn pp_link(&self) -> &Link {
        self.link(self.global(0), self.global(self.plan.cluster.pp as u32 - 1))
    }

    /// Parameters one device holds of `layers`.
    pub fn device_params(&self, layers: Range<u64>) -> f64 {
        let ep = self.plan.cluster.ep as f64;
        layers
            .map(|l| {
                let c = self.layer(l, 0);
                (c.params - c.expert_params + c.expert_params / ep) / self.tp()
            })
            .sum()
    }

    /// The share of the optimizer state, and of the weights and gradients, one device of a
    /// data-parallel group keeps: ZeRO-1 shards the first, ZeRO-3 (FSDP) all three.
    fn shares(&self) -> (f64, f64) {
        let c = &self.plan.cluster;
        let shard = 1.0 / c.dp as f64;
        let optimizer = if c.distributed_optimizer || c.shard_weights { shard } else { 1.0 };
        (optimizer, if c.shard_weights { shard } else { 1.0 })
    }

    /// Weights, gradients and optimizer state one device holds of `layers`.
    pub fn static_bytes(&self, layers: Range<u64>) -> f64 {
        let (optimizer, weights) = self.shares();
        layers
            .map(|l| {
                let params = self.device_params(l..l + 1) * weights;
                if self.part_of(l).frozen {
                    layers::ELEMENT * params
                } else {
                    (layers::ELEMENT + GRAD_BYTES + OPTIMIZER_BYTES * optimizer / weights) * params
                }
            })
            .sum()
    }

    /// Activation bytes one device keeps from a forward of `layers` to its backward; the
    /// frozen prefix keeps none, as no backward will read them.
    pub fn activation_bytes(&self, layers: Range<u64>, mb: u32) -> f64 {
        layers.filter(|l| self.has_backward(*l)).map(|l| self.layer(l, mb).activations / self.tp()).sum()
    }

    /// Gradient bytes one device reduces for `layers`.
    pub fn grad_bytes(&self, layers: Range<u64>) -> f64 {
        layers.filter(|l| !self.part_of(*l).frozen).map(|l| GRAD_BYTES * self.device_params(l..l + 1)).sum()
    }

    /// The optimizer step over the parameters one device updates (its shard, where the
    /// optimizer is sharded): memory-bound, reading and writing weights, gradients and Adam
    /// state.
    pub fn optimizer_time(&self, layers: Range<u64>) -> f64 {
        let share = self.shares().0;
        let trainable: f64 =
            layers.filter(|l| !self.part_of(*l).frozen).map(|l| self.device_params(l..l + 1) * share).sum();
        let bytes = 2.0 * (layers::ELEMENT + GRAD_BYTES + OPTIMIZER_BYTES) * trainable;
        match &self.compute {
            Compute::Kernels(k) => k.memory(bytes),
            Compute::Pinned(_) => bytes / self.plan.cluster.hardware.hbm_bandwidth,
        }
    }
}

impl Costs for CostModel<'_> {
    fn transfer(&self, layers: Range<u64>, mb: u32, share: f64, from: u32, to: u32) -> f64 {
        if let Some(t) = self.measured.as_ref().and_then(|m| m.transfer(layers.end - 1, share)) {
            return t;
        }
        self.p2p(self.boundary_bytes(layers, mb) * share, from, to)
    }

    fn send_occupies(&self) -> bool {
        !self.plan.cluster.overlap_comm
    }

    fn forward(&self, layers: Range<u64>, mb: u32) -> f64 {
        layers
            .map(|l| match self.profiled(l).map(|p| p.forward_s).or(self.part_of(l).forward_time) {
                Some(t) => t,
                None => self.entry(l, mb).forward,
            })
            .sum()
    }

    /// The activation gradient: the weight products once more, the score products twice,
    /// plus whatever recompute redoes.
    fn backward_input(&self, layers: Range<u64>, mb: u32) -> f64 {
        layers
            .filter(|l| self.has_backward(*l))
            .map(|l| {
                if let Some(p) = self.profiled(l) {
                    return p.backward_input_s;
                }
                let part = self.part_of(l);
                match (part.backward_time, part.forward_time) {
                    (Some(t), _) => {
                        if part.frozen {
                            t
                        } else {
                            t / 2.0
                        }
                    }
                    (None, Some(f)) => f,
                    (None, None) => self.entry(l, mb).backward_input,
                }
            })
            .sum()
    }

    fn backward_weight(&self, layers: Range<u64>, mb: u32) -> f64 {
        layers
            .filter(|l| !self.part_of(*l).frozen)
            .map(|l| {
                if let Some(p) = self.profiled(l) {
                    return p.backward_weight_s;
                }
                let part = self.part_of(l);
                match (part.backward_time, part.forward_time) {
                    (Some(t), _) => t / 2.0,
                    (None, Some(f)) => f,
                    (None, None) => self.entry(l, mb).backward_weight,
                }
            })
            .sum()
    }

    /// A layer the profile measured in one pass takes that pass's time; the others, both halves.
    fn backward(&self, layers: Range<u64>, mb: u32) -> f64 {
        layers
            .map(|l| match self.profiled(l).and_then(|p| p.backward_s) {
                Some(t) if self.has_backward(l) && !self.part_of(l).frozen => t,
                _ => self.backward_input(l..l + 1, mb) + self.backward_weight(l..l + 1, mb),
            })
            .sum()
    }
}
