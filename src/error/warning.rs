//! Warnings: the plan builds, but something in it is likely not what was meant.

use crate::diagnostics::{Code, Diagnostic};
use crate::span::Span;

use super::{count, d};

#[derive(Clone, Debug, PartialEq)]
pub enum Warning {
    /// Every pipeline rank over its device's memory, with its peak: one cause, one warning.
    OverMemory {
        ranks: Vec<(u32, f64)>,
        hbm: f64,
        hardware: String,
    },
    UnusedImport {
        span: Span,
        name: String,
    },
    FewMicrobatches {
        span: Span,
        microbatches: u64,
        ranks: u64,
    },
}

impl Warning {
    pub fn to_diagnostic(&self) -> Diagnostic {
        use Warning::*;
        match self {
            OverMemory { ranks, hbm, hardware } => {
                let gib = |b: f64| format!("{:.1} GiB", b / 1073741824.0);
                let peak = ranks.iter().map(|r| r.1).fold(0.0, f64::max);
                let who = match ranks.as_slice() {
                    [(rank, _)] => format!("pipeline rank {rank} needs"),
                    _ => format!("{} need up to", count(ranks.len(), "pipeline rank")),
                };
                let each: Vec<String> =
                    ranks.iter().map(|&(rank, peak)| format!("rank {rank} {}", gib(peak))).collect();
                let diag = d(Code::W0003, format!("{who} {} of device memory, `{hardware}` has {}", gib(peak), gib(*hbm)))
                    .note("weights, gradients and optimizer state, plus the activations the schedule keeps alive at its peak")
                    .help("use more pipeline or tensor-parallel ranks, fewer microbatches in flight, recompute, or `distributed_optimizer = true`");
                if ranks.len() > 1 { diag.note(format!("per rank: {}", each.join(", "))) } else { diag }
            }
            UnusedImport { span, name } => d(Code::W0001, format!("unused import `{name}`"))
                .primary(*span, "imported but never used")
                .help("remove it"),
            FewMicrobatches { span, microbatches, ranks } => {
                d(Code::W0002, format!("{} for {ranks} pipeline ranks", count(*microbatches, "microbatch")))
                    .primary(*span, "fewer microbatches than pipeline ranks")
                    .note(format!(
                        "with M < P the pipeline never fills; the bubble is at least {:.0}% of the step",
                        100.0 * (*ranks as f64 - 1.0) / (*microbatches as f64 + *ranks as f64 - 1.0)
                    ))
                    .help(format!("use at least {ranks} microbatches, ideally several times that"))
            }
        }
    }
}
