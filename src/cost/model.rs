//! The cost model of a plan: roofline compute on the declared hardware, α–β communication per
//! link class, memory per device. Times are seconds on one device of a pipeline rank (tensor
//! parallelism divides a stage's work over `tp` devices).

use std::ops::Range;

use super::Costs;
use super::layers::{self, LayerCost};
use super::profile::Measured;
use crate::plan::{Link, Plan};

/// Bytes per gradient element reduced across replicas (fp32 main gradients, as Megatron
/// keeps them) and per parameter of mixed-precision Adam state (fp32 master, m, v).
pub const GRAD_BYTES: f64 = 4.0;
pub const OPTIMIZER_BYTES: f64 = 12.0;

/// Borrows its plan: a build derives and simulates with one model, and nothing copies the plan.
pub struct CostModel<'p> {
    /// Per global layer: (part index, index within the part).
    layers: Vec<(usize, u64)>,
    plan: &'p Plan,
    /// Decoder layers cost the same for every microbatch: computed once.
    fixed: Vec<Option<LayerCost>>,
    /// The end of the frozen prefix (`super::first_trainable`).
    first_trainable: u64,
    /// The plan's profile over its layers: measured numbers, asked before the formulas.
    measured: Option<Measured>,
}

impl<'p> CostModel<'p> {
    pub fn new(plan: &'p Plan) -> CostModel<'p> {
        let mut layers = Vec::new();
        for (p, part) in plan.model.parts.iter().enumerate() {
            for i in 0..part.arch.layers() {
                layers.push((p, i));
            }
        }
        let b = plan.batch.micro_batch_size as f64;
        let s = plan.batch.seq_len as f64;
        let fixed = layers
            .iter()
            .map(|&(p, i)| {
                let part = &plan.model.parts[p];
                (!part.arch.is_encoder())
                    .then(|| layers::layer(part, i, b, s, (0.0, 1.0), plan.cluster.flash_attention))
            })
            .collect();
        let measured = plan.cluster.profile.as_ref().map(|p| Measured::new(p.clone(), plan));
        CostModel { layers, plan, fixed, first_trainable: super::first_trainable(plan), measured }
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

    /// The numbers of global layer `layer` for microbatch `mb`.
    pub fn layer(&self, layer: u64, mb: u32) -> LayerCost {
        if let Some(c) = self.fixed[layer as usize] {
            return c;
        }
        let (p, i) = self.layers[layer as usize];
        let b = &self.plan.batch;
        layers::layer(
            &self.plan.model.parts[p],
            i,
            b.micro_batch_size as f64,
            b.seq_len as f64,
            (b.image_tokens_of(u64::from(mb)) as f64, b.images as f64),
            self.plan.cluster.flash_attention,
        )
    }

    fn tp(&self) -> f64 {
        self.plan.cluster.tp as f64
    }

    /// Roofline: the slower of compute at peak × efficiency and memory traffic at HBM bandwidth.
    pub fn roofline(&self, flops: f64, bytes: f64) -> f64 {
        let hw = &self.plan.cluster.hardware;
        let tp = self.tp();
        (flops / (hw.peak_bf16 * self.plan.cluster.efficiency * tp)).max(bytes / (hw.hbm_bandwidth * tp))
    }

    /// Tensor parallelism's two all-reduces of the layer's activations per pass (after the
    /// attention and after the MLP), on the intra-node link, not overlapped.
    fn tensor_parallel_time(&self, layer: u64, mb: u32) -> f64 {
        let c = &self.plan.cluster;
        if c.tp <= 1 {
            return 0.0;
        }
        2.0 * self.all_reduce(self.layer(layer, mb).output, c.tp, &c.hardware.intra_node)
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

    /// Weights, gradients and optimizer state one device holds of `layers`.
    pub fn static_bytes(&self, layers: Range<u64>) -> f64 {
        let c = &self.plan.cluster;
        let optimizer = if c.distributed_optimizer { OPTIMIZER_BYTES / c.dp as f64 } else { OPTIMIZER_BYTES };
        layers
            .map(|l| {
                let params = self.device_params(l..l + 1);
                if self.part_of(l).frozen {
                    layers::ELEMENT * params
                } else {
                    (layers::ELEMENT + GRAD_BYTES + optimizer) * params
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

    /// The optimizer step over one device's parameters: memory-bound, reading and writing
    /// weights, gradients and Adam state.
    pub fn optimizer_time(&self, layers: Range<u64>) -> f64 {
        let trainable: f64 = layers.filter(|l| !self.part_of(*l).frozen).map(|l| self.device_params(l..l + 1)).sum();
        2.0 * (layers::ELEMENT + GRAD_BYTES + OPTIMIZER_BYTES) * trainable / self.plan.cluster.hardware.hbm_bandwidth
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
                None => {
                    let c = self.layer(l, mb);
                    self.roofline(c.flops, c.bytes) + self.tensor_parallel_time(l, mb)
                }
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
                    (None, None) => {
                        let c = self.layer(l, mb);
                        let scores = c.flops - c.weight_flops;
                        self.roofline(c.weight_flops + 2.0 * scores + c.recompute_flops, c.bytes)
                            + self.tensor_parallel_time(l, mb)
                    }
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
                    (None, None) => {
                        let c = self.layer(l, mb);
                        self.roofline(c.weight_flops, c.bytes)
                    }
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
