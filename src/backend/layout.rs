//! The sharded body as the launch-configuration backends describe it: per body stage, how
//! many of its layers belong to the encoder and how many to the LLM, and which rank holds it.

use crate::derive::nearest::body_layers;
use crate::derive::resolved::Resolved;
use crate::ir::{Mapping, PlanIr};
use crate::plan::{ArchKind, Decoder, Encoder, Part, Plan};
use crate::skeletons::rank_of;

/// The body's stages as a launch configuration writes its split: the layers of each kind per
/// stage, and how stages map onto ranks.
#[derive(Clone, Debug, PartialEq)]
pub struct BodyStages {
    pub pp: u32,
    /// Body stages per rank (virtual pipeline stages).
    pub chunks: u32,
    pub mapping: Mapping,
    /// Per body stage, in body order: its layers of encoder parts and of decoder parts.
    pub encoder: Vec<u64>,
    pub decoder: Vec<u64>,
}

impl BodyStages {
    pub fn of(resolved: &Resolved, ir: &PlanIr) -> BodyStages {
        let (encoder, decoder) = body_layers(resolved.plan, ir);
        BodyStages { pp: ir.pipeline.ranks, chunks: resolved.body().1, mapping: ir.pipeline.mapping, encoder, decoder }
    }

    /// `per_stage` as `[chunk][rank]`: what rank r holds in its chunk c. With the loop mapping
    /// that is body stage c·pp + r; with the V mapping odd chunks run back up the ranks.
    pub fn by_chunk(&self, per_stage: &[u64]) -> Vec<Vec<u64>> {
        let pp = self.pp as usize;
        let mut out = vec![vec![0; pp]; self.chunks as usize];
        for (b, &n) in per_stage.iter().enumerate() {
            out[b / pp][rank_of(self.mapping, self.pp, b as u32) as usize] = n;
        }
        out
    }

    pub fn decoder_layers(&self) -> u64 {
        self.decoder.iter().sum()
    }
}

/// The LLM: the model's first decoder part.
pub fn decoder(plan: &Plan) -> Option<(&Part, &Decoder)> {
    plan.model.parts.iter().find_map(|p| match &p.arch.kind {
        ArchKind::Decoder(d) => Some((p, d)),
        ArchKind::Encoder(_) => None,
    })
}

/// The modality encoder: the model's first encoder part.
pub fn encoder(plan: &Plan) -> Option<(&Part, &Encoder)> {
    plan.model.parts.iter().find_map(|p| match &p.arch.kind {
        ArchKind::Encoder(e) => Some((p, e)),
        ArchKind::Decoder(_) => None,
    })
}

/// Sequences of every data-parallel replica in one step.
pub fn global_batch(plan: &Plan) -> u64 {
    plan.batch.micro_batch_size * plan.batch.microbatches * plan.cluster.dp
}

/// The most encoder tokens a sequence carries.
pub fn max_image_tokens(plan: &Plan) -> u64 {
    plan.batch.image_tokens.iter().copied().max().unwrap_or(0)
}
