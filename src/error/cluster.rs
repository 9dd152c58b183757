//! The plan as a whole against its cluster and targets: the device count, its size, the backends it names.

use crate::diagnostics::{Code, Diagnostic};
use crate::span::Span;

use super::{d, suggest};

#[derive(Clone, Debug, PartialEq)]
pub enum ClusterError {
    DeviceProduct { span: Span, devices: u64, pp: u64, dp: u64, tp: u64 },
    TooLarge { span: Span, events: u64, limit: u64 },
    UnknownTarget { span: Span, name: String, suggestion: Option<String>, targets: &'static [&'static str] },
}

impl ClusterError {
    pub fn to_diagnostic(&self) -> Diagnostic {
        use ClusterError::*;
        match self {
            DeviceProduct { span, devices, pp, dp, tp } => {
                let (devices, pp, dp, tp) = (u128::from(*devices), u128::from(*pp), u128::from(*dp), u128::from(*tp));
                let product = pp * dp * tp;
                d(Code::E0308, format!("pp·dp·tp = {product} but the cluster has {devices} devices"))
                    .primary(*span, format!("{pp}·{dp}·{tp} = {product}"))
                    .help(if devices % (pp * tp) == 0 {
                        format!("with pp = {pp} and tp = {tp}, set dp = {}", devices / (pp * tp))
                    } else {
                        "choose pp, dp and tp whose product is the device count".into()
                    })
            }
            TooLarge { span, events, limit } => {
                d(Code::E0318, format!("the plan is too large to derive: {events} events per step"))
                    .primary(*span, "this many microbatches on this many stages")
                    .note(format!(
                        "mpipec derives plans of at most {limit} events (forwards, backwards and their halves) per step"
                    ))
                    .help("use fewer microbatches or pipeline stages; real plans need far fewer")
            }
            UnknownTarget { span, name, suggestion, targets } => suggest(
                d(Code::E0316, format!("unknown target `{name}`")).primary(*span, "not a backend"),
                *span,
                suggestion,
                || format!("targets: {}", targets.join(", ")),
            ),
        }
    }
}
