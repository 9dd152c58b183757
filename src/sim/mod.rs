//! sim: the cost model's verdict on a lowered plan. The IR interpreter runs the per-rank lists
//! against the cost model's durations; the report, the timelines and the measured comparison
//! read its timeline.

pub mod costs;
pub mod measured;
pub mod report;
pub mod speed;
pub mod timeline;
