//! explore: questions asked of many plans, above the pipeline — a plan against its baselines
//! (`compare`), across sampled batches (`samples`), over a range of keys (`sweep`) and over the
//! plans a model and a cluster allow (`tune`). Each runs the pipeline as a client; nothing below
//! calls in here.

pub mod compare;
pub mod samples;
pub mod sweep;
pub mod tune;
