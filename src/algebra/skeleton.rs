//! Skeletons: one per region of the cut. Each has a layout (Sharded: the region's layers split
//! into stages over the pipeline ranks; Replicated: every rank holds the whole region) and the
//! rules its published implementation imposes on ranks and microbatches.

use std::fmt;

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Layout {
    Sharded,
    Replicated,
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Layout::Sharded => "sharded",
            Layout::Replicated => "replicated",
        })
    }
}

/// Where `transpose` runs encoder work.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Fill {
    /// Slot by slot inside each rank's own warmup slack (Mpipe).
    Slack,
    /// As one block before each rank's pipeline (HyperParallel's public ScheduleMPipeTranspose).
    Prefix,
}

/// How many pieces `transpose` cuts one microbatch's encoder work into: runs of consecutive
/// encoder layers, each an instruction of its own, so encoder work fits idle gaps of any size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Chunks {
    /// Chosen per plan by derive: the count whose schedule simulates fastest.
    Auto,
    Fixed(u32),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Skeleton {
    Gpipe,
    OneFOneB,
    Interleaved {
        v: u32,
    },
    Zb1p {
        v: u32,
    },
    Zbv,
    DualPipeV,
    /// `lookahead`: a frozen encoder encodes the next step's microbatches in this step's idle
    /// time, and its features wait on their owner until the next step.
    Transpose {
        fill: Fill,
        chunks: Chunks,
        lookahead: bool,
    },
}

/// A skeleton's parameter, as the language accepts it.
#[derive(Debug)]
pub struct Param {
    pub name: &'static str,
    pub kind: ParamKind,
    pub doc: &'static str,
}

#[derive(Debug, PartialEq)]
pub enum ParamKind {
    /// A whole number of at least `min`; `default` when omitted, required if `None`.
    Count {
        min: u64,
        default: Option<u64>,
    },
    Choice {
        choices: &'static [&'static str],
        default: &'static str,
    },
    /// Layers per stage, in stage order.
    Split,
    /// A whole number of at least 1, or `auto` (the default).
    CountOrAuto,
    /// 0 or 1 steps ahead (default 0).
    Lookahead,
}

#[derive(Debug)]
pub struct SkeletonDef {
    pub kind: Kind,
    pub name: &'static str,
    pub layout: Layout,
    pub params: &'static [Param],
    pub doc: &'static str,
}

const SPLIT: Param = Param {
    name: "split",
    kind: ParamKind::Split,
    doc: "layers per stage, in stage order (default: balanced by cost)",
};

/// The closed set of skeletons, each named once: [`Kind`], its name and its row of
/// [`SKELETONS`] come from one table (as `diagnostics::codes` does for codes).
macro_rules! skeletons {
    ($($kind:ident => SkeletonDef { name: $name:literal, $($field:ident: $value:expr),* $(,)? },)*) => {
        /// Which skeleton, without its arguments.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Kind { $($kind,)* }

        impl Kind {
            /// The name the `schedule` statement uses.
            pub fn name(self) -> &'static str {
                match self { $(Kind::$kind => $name,)* }
            }
        }

        /// Every skeleton the language has, with its layout, parameters and documentation.
        pub static SKELETONS: &[SkeletonDef] = &[$(SkeletonDef { kind: Kind::$kind, name: $name, $($field: $value),* },)*];
    };
}

skeletons! {
    Gpipe => SkeletonDef {
        name: "gpipe",
        layout: Layout::Sharded,
        params: &[SPLIT],
        doc: "all forwards, then all backwards (GPipe)",
    },
    OneFOneB => SkeletonDef {
        name: "1f1b",
        layout: Layout::Sharded,
        params: &[SPLIT],
        doc: "one forward, one backward: P-r-1 warmup forwards on rank r (Megatron, torch Schedule1F1B)",
    },
    Interleaved => SkeletonDef {
        name: "interleaved",
        layout: Layout::Sharded,
        params: &[
            Param {
                name: "v",
                kind: ParamKind::Count { min: 2, default: None },
                doc: "model chunks (virtual stages) per rank",
            },
            SPLIT,
        ],
        doc: "interleaved 1F1B with v chunks per rank, stage s on rank s mod P (Megatron VPP, torch ScheduleInterleaved1F1B)",
    },
    Zb1p => SkeletonDef {
        name: "zb1p",
        layout: Layout::Sharded,
        params: &[
            Param { name: "v", kind: ParamKind::Count { min: 2, default: Some(2) }, doc: "model chunks per rank" },
            SPLIT,
        ],
        doc: "zero-bubble interleaved schedule with split backward I/W (torch ScheduleInterleavedZeroBubble)",
    },
    Zbv => SkeletonDef {
        name: "zbv",
        layout: Layout::Sharded,
        params: &[SPLIT],
        doc: "zero-bubble V schedule: two chunks per rank in a V, split backward (torch ScheduleZBVZeroBubble)",
    },
    DualPipeV => SkeletonDef {
        name: "dualpipev",
        layout: Layout::Sharded,
        params: &[SPLIT],
        doc: "DualPipeV: V mapping, overlapped forward/backward pairs (torch ScheduleDualPipeV)",
    },
    Transpose => SkeletonDef {
        name: "transpose",
        layout: Layout::Replicated,
        params: &[
            Param {
                name: "fill",
                kind: ParamKind::Choice { choices: &["slack", "prefix"], default: "slack" },
                doc: "slack: encoder work inside each rank's idle time (Mpipe); prefix: one block before the pipeline (HyperParallel)",
            },
            Param {
                name: "chunks",
                kind: ParamKind::CountOrAuto,
                doc: "pieces of consecutive encoder layers one microbatch's encode is cut into, from 1 to the encoder's layer count, or `auto` (the default: the fastest)",
            },
            Param {
                name: "lookahead",
                kind: ParamKind::Lookahead,
                doc: "1: a frozen encoder encodes the next step's microbatches in this step's idle time; 0 (the default): each step encodes its own",
            },
        ],
        doc: "the region on every pipeline rank; each microbatch encoded on its owner inside the LLM's warmup bubbles (Mpipe)",
    },
}

/// Every skeleton's name, in the table's order.
pub fn names() -> impl Iterator<Item = &'static str> {
    SKELETONS.iter().map(|s| s.name)
}

pub fn lookup(name: &str) -> Option<&'static SkeletonDef> {
    SKELETONS.iter().find(|s| s.name == name)
}

impl Skeleton {
    pub fn kind(self) -> Kind {
        match self {
            Skeleton::Gpipe => Kind::Gpipe,
            Skeleton::OneFOneB => Kind::OneFOneB,
            Skeleton::Interleaved { .. } => Kind::Interleaved,
            Skeleton::Zb1p { .. } => Kind::Zb1p,
            Skeleton::Zbv => Kind::Zbv,
            Skeleton::DualPipeV => Kind::DualPipeV,
            Skeleton::Transpose { .. } => Kind::Transpose,
        }
    }

    pub fn name(self) -> &'static str {
        self.kind().name()
    }

    pub fn layout(self) -> Layout {
        match self {
            Skeleton::Transpose { .. } => Layout::Replicated,
            _ => Layout::Sharded,
        }
    }

    /// Stages each pipeline rank holds of a Sharded region.
    pub fn chunks(self) -> u32 {
        match self {
            Skeleton::Interleaved { v } | Skeleton::Zb1p { v } => v,
            Skeleton::Zbv | Skeleton::DualPipeV => 2,
            Skeleton::Gpipe | Skeleton::OneFOneB | Skeleton::Transpose { .. } => 1,
        }
    }

    /// Whether backward is split into input and weight gradients.
    pub fn splits_backward(self) -> bool {
        matches!(self, Skeleton::Zb1p { .. } | Skeleton::Zbv | Skeleton::DualPipeV)
    }
}

impl Skeleton {
    /// `transpose` with whole encodes, each step encoding its own batch: the form public code
    /// ships, and what a target without chunks or lookahead can run.
    pub fn whole_transpose(fill: Fill) -> Skeleton {
        Skeleton::Transpose { fill, chunks: Chunks::Fixed(1), lookahead: false }
    }
}

impl fmt::Display for Skeleton {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Skeleton::Interleaved { v } => write!(f, "interleaved({v})"),
            Skeleton::Zb1p { v } => write!(f, "zb1p({v})"),
            &Skeleton::Transpose { fill, chunks, lookahead } => {
                let mut args = Vec::new();
                if fill == Fill::Prefix {
                    args.push("prefix".to_string());
                }
                // A prefix block encodes whole microbatches unless told otherwise.
                match chunks {
                    Chunks::Fixed(1) if fill == Fill::Prefix => {}
                    Chunks::Fixed(n) => args.push(format!("chunks = {n}")),
                    Chunks::Auto => {}
                }
                if lookahead {
                    args.push("lookahead = 1".to_string());
                }
                if args.is_empty() { f.write_str("transpose") } else { write!(f, "transpose({})", args.join(", ")) }
            }
            other => f.write_str(other.name()),
        }
    }
}

/// Why a microbatch count does not suit a skeleton: the message and a help line.
pub struct MicrobatchMismatch {
    pub message: String,
    pub help: String,
}

impl Skeleton {
    /// The microbatch counts the published implementation accepts for `ranks` pipeline ranks.
    pub fn check_microbatches(self, ranks: u64, microbatches: u64) -> Result<(), MicrobatchMismatch> {
        match self {
            Skeleton::Interleaved { .. } | Skeleton::Zb1p { .. } => {
                // torch ScheduleInterleaved1F1B / ScheduleInterleavedZeroBubble: microbatches run
                // in rounds of equal size, rounds = max(1, M // P).
                let rounds = (microbatches / ranks).max(1);
                if !microbatches.is_multiple_of(rounds) {
                    let lower = microbatches - microbatches % ranks;
                    return Err(MicrobatchMismatch {
                        message: format!(
                            "{} needs microbatches in equal rounds: {microbatches} microbatches do not split into {rounds} rounds",
                            self.name()
                        ),
                        help: format!("use a multiple of the pipeline size, e.g. {lower} or {}", lower + ranks),
                    });
                }
                Ok(())
            }
            Skeleton::DualPipeV | Skeleton::Zbv if microbatches < 2 * ranks => Err(MicrobatchMismatch {
                message: format!("{} needs at least {} microbatches (two per stage of the V)", self.name(), 2 * ranks),
                help: format!("set `microbatches = {};` or more", 2 * ranks),
            }),
            _ => Ok(()),
        }
    }
}

/// The one skeleton the body runs when several adjacent sharded regions share the pipeline
/// ranks: their stages concatenate, so k regions of `1f1b` loop over the ranks k times and run
/// as Megatron's interleaved schedule with k chunks. `None` when the regions' skeletons
/// differ, or a fixed-shape V schedule is combined with another region.
pub fn body_skeleton(sharded: &[Skeleton]) -> Option<(Skeleton, u32)> {
    let first = *sharded.first()?;
    if sharded.iter().any(|s| s.name() != first.name() || s.chunks() != first.chunks()) {
        return None;
    }
    let chunks: u32 = sharded.iter().map(|s| s.chunks()).sum();
    let skeleton = match first {
        _ if sharded.len() == 1 => first,
        Skeleton::Zbv | Skeleton::DualPipeV => return None,
        Skeleton::OneFOneB | Skeleton::Interleaved { .. } => Skeleton::Interleaved { v: chunks },
        Skeleton::Zb1p { .. } => Skeleton::Zb1p { v: chunks },
        other => other,
    };
    Some((skeleton, chunks))
}
