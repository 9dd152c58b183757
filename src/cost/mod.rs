//! What derive asks of a cost model: how long a stage's work takes for one microbatch. The
//! split of layers into stages, the warmup slack that `transpose` fills and the owner map all
//! read these numbers, so a better cost model gives a better static schedule, never a
//! different kind of schedule.

pub mod kernels;
pub mod layers;
pub mod model;
pub mod profile;

use std::ops::Range;

use crate::plan::Plan;

/// The first layer (global numbering) of a trainable part, or the layer count when every part
/// is frozen. The layers before it are the frozen prefix: no gradient ever reaches them, so
/// they have no backward and keep no activations for one, whichever stage holds them.
pub fn first_trainable(plan: &Plan) -> u64 {
    let mut offset = 0;
    for part in &plan.model.parts {
        if !part.frozen {
            return offset;
        }
        offset += part.arch.layers();
    }
    offset
}

/// Durations in seconds (or any one unit, consistently). `Sync`: derive's search times its
/// candidates on several threads with one cost model.
pub trait Costs: Sync {
    /// Forward of the model's layers `layers` (global numbering) for microbatch `mb`,
    /// including what sits at the ends of a part (embedding, LM head, patch embedding).
    fn forward(&self, layers: Range<u64>, mb: u32) -> f64;
    /// Backward-input (the activation gradient) of those layers.
    fn backward_input(&self, layers: Range<u64>, mb: u32) -> f64;
    /// Backward-weight (the parameter gradient) of those layers; zero for frozen ones.
    fn backward_weight(&self, layers: Range<u64>, mb: u32) -> f64;
    /// Both halves in one pass (a schedule's fused backward).
    fn backward(&self, layers: Range<u64>, mb: u32) -> f64 {
        self.backward_input(layers.clone(), mb) + self.backward_weight(layers, mb)
    }
    /// The flight of the output of `layers` for microbatch `mb`, or of the `share` of its
    /// images a part of an encode made, from pipeline rank `from` to `to` (a gradient has the
    /// same size); zero where the cost model has no links.
    fn transfer(&self, _layers: Range<u64>, _mb: u32, _share: f64, _from: u32, _to: u32) -> f64 {
        0.0
    }
    /// Whether a send keeps its rank busy for the flight (communication not overlapped).
    fn send_occupies(&self) -> bool {
        false
    }
}

/// Until a plan's hardware and formulas are used: every layer of a microbatch costs one unit
/// forward, one unit per backward half; an encoder layer scales with that microbatch's image
/// tokens against the batch's mean, so variable load still steers the owner map.
pub struct UnitCosts {
    /// Per global layer: whether it belongs to an encoder, and whether it is frozen.
    layers: Vec<(bool, bool)>,
    image_tokens: Vec<u64>,
    mean_tokens: f64,
    first_trainable: u64,
}

impl UnitCosts {
    pub fn new(plan: &Plan) -> UnitCosts {
        let mut layers = Vec::new();
        for part in &plan.model.parts {
            for _ in 0..part.arch.layers() {
                layers.push((part.arch.is_encoder(), part.frozen));
            }
        }
        let image_tokens = plan.batch.image_tokens.clone();
        let mean_tokens = if image_tokens.is_empty() {
            1.0
        } else {
            image_tokens.iter().sum::<u64>() as f64 / image_tokens.len() as f64
        };
        UnitCosts { layers, image_tokens, mean_tokens: mean_tokens.max(1.0), first_trainable: first_trainable(plan) }
    }

    fn scale(&self, layer: u64, mb: u32) -> f64 {
        let (encoder, _) = self.layers[layer as usize];
        if !encoder || self.image_tokens.is_empty() {
            return 1.0;
        }
        let tokens = self.image_tokens[mb as usize % self.image_tokens.len()] as f64;
        tokens / self.mean_tokens
    }
}

impl Costs for UnitCosts {
    fn forward(&self, layers: Range<u64>, mb: u32) -> f64 {
        layers.map(|l| self.scale(l, mb)).sum()
    }

    fn backward_input(&self, layers: Range<u64>, mb: u32) -> f64 {
        self.forward(layers.start.max(self.first_trainable)..layers.end.max(self.first_trainable), mb)
    }

    fn backward_weight(&self, layers: Range<u64>, mb: u32) -> f64 {
        layers.filter(|l| !self.layers[*l as usize].1).map(|l| self.scale(l, mb)).sum()
    }
}

/// Duration of one compute instruction of a stage holding `layers`.
pub fn compute_time(costs: &dyn Costs, op: crate::ir::Op, layers: Range<u64>, mb: u32) -> f64 {
    use crate::ir::Op;
    match op {
        Op::Forward => costs.forward(layers, mb),
        Op::Backward => costs.backward(layers, mb),
        Op::BackwardInput => costs.backward_input(layers, mb),
        Op::BackwardWeight => costs.backward_weight(layers, mb),
        _ => 0.0,
    }
}
