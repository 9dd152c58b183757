//! A cut: the model's layers split into contiguous depth regions, in order.

use std::ops::Range;

/// One region of a cut, over the model's global layer numbering (parts in depth order).
#[derive(Clone, Debug, PartialEq)]
pub struct Region {
    /// As written: `enc`, `llm[0..18]`, `vit + merger`.
    pub name: String,
    pub layers: Range<u64>,
    /// Each piece of a part the region covers: (part index, layers within the part).
    pub segments: Vec<(usize, Range<u64>)>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Cut {
    pub regions: Vec<Region>,
}
