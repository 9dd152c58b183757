//! The Mpipe schedule algebra (docs/algebra.md): layouts, skeletons, cuts and owner maps as types.
//! `check` builds these from the source; `derive` (later) turns them into a plan.

pub mod cut;
pub mod owner;
pub mod skeleton;

pub use cut::{Cut, Region};
pub use owner::OwnerSpec;
pub use skeleton::{Chunks, Fill, Layout, Skeleton};
