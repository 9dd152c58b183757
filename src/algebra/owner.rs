//! Owner maps of Replicated regions: which pipeline rank encodes which microbatch.

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OwnerSpec {
    /// Min-max balance of encoder work against each rank's warmup slack.
    ByMicrobatch,
    /// Microbatch m on rank m mod P.
    RoundRobin,
    /// One rank per microbatch, as written.
    Explicit(Vec<u64>),
    /// `ByMicrobatch` for the static plan, placed again for each batch from that batch's image
    /// tokens (`crate::adaptive`).
    Adaptive,
}

pub const STRATEGIES: &[&str] = &["by_microbatch", "round_robin", "adaptive"];
