//! Backends: a derived plan as what a training stack runs. `torch` executes any plan with the
//! mpipe runtime; the launch-configuration backends (Megatron-LM, MindFormers, MindSpeed-MM,
//! HyperParallel) are the next step.

pub mod torch;
