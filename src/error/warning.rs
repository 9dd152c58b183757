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
    /// The profile describes another device, model or shape than the plan's: each difference.
    ProfileMismatch {
        span: Span,
        file: String,
        differences: Vec<String>,
    },
    /// Layer kinds the plan uses that the profile has not measured: they keep analytic costs.
    ProfileMissing {
        span: Span,
        file: String,
        kinds: Vec<String>,
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
            ProfileMismatch { span, file, differences } => {
                let diag = d(
                    Code::W0005,
                    format!("the profile `{file}` was measured on another device, model or shape than the plan's"),
                )
                .primary(*span, "its measured costs are used as they are");
                differences.iter().fold(diag, |diag, what| diag.note(what.clone())).help(
                    "take a profile of this plan where it will run: `mpipec profile PLAN -o FILE` (docs/costs.md)",
                )
            }
            ProfileMissing { span, file, kinds } => {
                let names: Vec<String> = kinds.iter().map(|k| format!("`{k}`")).collect();
                d(Code::W0006, format!("the profile `{file}` lacks {} the plan uses", count(kinds.len(), "layer kind")))
                    .primary(*span, format!("lacks {}", names.join(", ")))
                    .note("those layers keep the analytic model's costs; the others use the measured ones")
                    .help("profile a plan whose model has these layers, or this plan itself: `mpipec profile PLAN -o FILE`")
            }
        }
    }
}
