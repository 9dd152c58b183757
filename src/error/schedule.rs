//! The `schedule`: one skeleton per region, its arguments, and the rules of the algebra between them.

use crate::diagnostics::{Code, Diagnostic};
use crate::span::Span;

use super::{count, d, suggest};

#[derive(Clone, Debug, PartialEq)]
pub enum ScheduleError {
    ScheduleArity {
        span: Span,
        cut: Span,
        regions: usize,
        skeletons: usize,
    },
    UnknownSkeleton {
        span: Span,
        name: String,
        suggestion: Option<String>,
    },
    BadSkeletonArgument {
        span: Span,
        skeleton: String,
        message: String,
        help: String,
    },
    /// `chunks` below 1 or above the replicated region's layers (`layers`, once the cut is known).
    ChunksOutOfRange {
        span: Span,
        layers: Option<u64>,
    },
    LookaheadOutOfRange {
        span: Span,
    },
    LookaheadPrefix {
        span: Span,
        skeleton: Span,
    },
    LookaheadTrainable {
        span: Span,
        part: String,
        part_span: Span,
    },
    TransposeOnlyArgument {
        span: Span,
        name: String,
        skeleton: String,
    },
    MicrobatchesIncompatible {
        span: Span,
        skeleton: Span,
        message: String,
        help: String,
    },
    OwnerWithoutReplicated {
        span: Span,
    },
    BadOwner {
        span: Span,
        message: String,
        label: String,
        help: String,
    },
    AdjacentReplicated {
        first: Span,
        second: Span,
        merged: String,
        /// One edit over the cut and the schedule, where both are in one source.
        fix: Option<(Span, String)>,
    },
    ReplicatedWithoutSharded {
        span: Span,
    },
    TooFewLayers {
        span: Span,
        region: String,
        layers: u64,
        stages: u64,
    },
    BadSplit {
        span: Span,
        message: String,
        help: String,
    },
    UnsupportedArrangement {
        span: Span,
        message: String,
        label: String,
        help: String,
    },
}

impl ScheduleError {
    pub fn to_diagnostic(&self) -> Diagnostic {
        use ScheduleError::*;
        match self {
            ScheduleArity { span, cut, regions, skeletons } => d(Code::E0305, format!("{} for {}", count(*skeletons, "skeleton"), count(*regions, "region")))
                .primary(*span, format!("expected {}, one per region", count(*regions, "skeleton")))
                .secondary(*cut, format!("the cut has {}", count(*regions, "region")))
                .help("give exactly one skeleton per region, in the cut's order"),
            UnknownSkeleton { span, name, suggestion } => suggest(
                d(Code::E0306, format!("unknown skeleton `{name}`")).primary(*span, "not a skeleton"),
                *span,
                suggestion,
                || format!("skeletons: {}", crate::algebra::skeleton::names().collect::<Vec<_>>().join(", ")),
            ),
            BadSkeletonArgument { span, skeleton, message, help } => d(Code::E0307, format!("invalid argument to `{skeleton}`"))
                .primary(*span, message.clone())
                .help(help.clone()),
            ChunksOutOfRange { span, layers } => d(Code::E0319, "`chunks` out of range")
                .primary(*span, match layers {
                    Some(n) => format!("more chunks than the region's {}", count(*n, "layer")),
                    None => "not a whole number of at least 1, nor `auto`".into(),
                })
                .help(match layers {
                    Some(n) => format!("a chunk is at least one layer: write `chunks = {n}` or fewer, or `chunks = auto`"),
                    None => "write `chunks = auto` (the default) or a whole number from 1 to the encoder's layer count".into(),
                }),
            LookaheadOutOfRange { span } => d(Code::E0321, "`lookahead` must be 0 or 1")
                .primary(*span, "not 0 or 1")
                .help("encoder work runs at most one step ahead: write `lookahead = 1`, or leave it out for 0"),
            LookaheadPrefix { span, skeleton } => d(Code::E0323, "`lookahead` with `fill = prefix`")
                .primary(*span, "encodes the next step's microbatches in this step's idle time")
                .secondary(*skeleton, "`prefix` encodes each step's batch as one block before the pipeline")
                .help("the two place encoder work differently: drop `prefix` to look ahead, or drop `lookahead`"),
            LookaheadTrainable { span, part, part_span } => d(Code::E0320, "`lookahead` with a trainable encoder")
                .primary(*span, "encodes the next step's microbatches this step")
                .secondary(*part_span, format!("`{part}` trains: its weights change between steps"))
                .help(format!("features encoded ahead would come from stale weights: drop `lookahead`, or freeze `{part}` (`frozen = true;`)")),
            TransposeOnlyArgument { span, name, skeleton } => d(Code::E0322, format!("`{name}` on `{skeleton}`"))
                .primary(*span, format!("only `transpose` takes `{name}`"))
                .help(format!("`{name}` shapes a replicated encoder's work: remove it here, or give the encoder's region `transpose({name} = …)`")),
            MicrobatchesIncompatible { span, skeleton, message, help } => d(Code::E0309, message.clone())
                .primary(*span, "microbatch count set here")
                .secondary(*skeleton, "required by this skeleton")
                .help(help.clone()),
            OwnerWithoutReplicated { span } => d(Code::E0310, "`owner` without a replicated region")
                .primary(*span, "no region of this plan is replicated")
                .help("remove `owner`, or give a region the `transpose` skeleton"),
            BadOwner { span, message, label, help } => d(Code::E0311, message.clone()).primary(*span, label.clone()).help(help.clone()),
            AdjacentReplicated { first, second, merged, fix } => {
                let diag = d(Code::E0312, "two adjacent replicated regions")
                    .primary(*second, "replicated, right after a replicated region")
                    .secondary(*first, "replicated too")
                    .note("adjacent replicated regions are one region written twice (normal form)")
                    .help(format!("merge them, `{merged}`, and give the merged region one `transpose`"));
                match fix {
                    Some((span, text)) => diag.fix(*span, text.clone()),
                    None => diag,
                }
            }
            ReplicatedWithoutSharded { span } => d(Code::E0313, "no sharded region to hand the replicated region's output to")
                .primary(*span, "every region of this schedule is replicated")
                .help("a plan that only replicates is data parallelism; give the backbone a sharded skeleton such as `1f1b`"),
            TooFewLayers { span, region, layers, stages } => d(Code::E0314, format!("region `{region}` has {} for {stages} stages", count(*layers, "layer")))
                .primary(*span, format!("needs at least {stages} layers, one per stage"))
                .help("use fewer pipeline ranks or chunks, or give the region more layers"),
            BadSplit { span, message, help } => d(Code::E0315, message.clone()).primary(*span, "this split").help(help.clone()),
            UnsupportedArrangement { span, message, label, help } => {
                d(Code::E0317, message.clone()).primary(*span, label.clone()).help(help.clone())
            }
        }
    }
}
