//! Samples into microbatches, microbatches into the `tokens,weight` histogram that a plan's
//! `image_histogram` names, and its picture.
//!
//! Packing follows the trainer (`mpipec.data.Batches`): a microbatch holds `micro_batch_size`
//! samples, taken in an order shuffled once an epoch; nothing is concatenated, each sample is
//! one sequence padded to the longest. The histogram counts one epoch: each microbatch's
//! encoder tokens per sequence (its images' tokens over `micro_batch_size`, rounded up, since a
//! plan's `image_tokens` counts per sequence), rounded up to a multiple of `bin`. The samples
//! left over at the end of an epoch, fewer than a microbatch, start the next one and are not
//! counted. With one sample a microbatch the order does not matter and every sample counts.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::plot::{COLOURS, Frame, tick_step};

/// Each microbatch's encoder tokens per sequence, for samples of `per_sample` encoder tokens.
pub fn microbatches(per_sample: &[u64], micro_batch_size: usize, bin: u64, seed: u64) -> Vec<u64> {
    let size = micro_batch_size.max(1);
    let mut order: Vec<u64> = per_sample.to_vec();
    if size > 1 {
        let mut rng = crate::random::Lcg::new(seed);
        for i in (1..order.len()).rev() {
            order.swap(i, rng.below(i + 1));
        }
    }
    let bin = bin.max(1);
    order.chunks_exact(size).map(|mb| mb.iter().sum::<u64>().div_ceil(size as u64).div_ceil(bin) * bin).collect()
}

/// How many microbatches have each token count, by tokens.
pub fn histogram(microbatches: &[u64]) -> Vec<(u64, u64)> {
    let mut counts = BTreeMap::new();
    for t in microbatches {
        *counts.entry(*t).or_insert(0u64) += 1;
    }
    counts.into_iter().collect()
}

/// The histogram as `image_histogram` reads it: a header, then `tokens,weight` lines with the
/// microbatch counts as weights.
pub fn csv(histogram: &[(u64, u64)]) -> String {
    let mut out = String::from("tokens,weight\n");
    for (t, w) in histogram {
        let _ = writeln!(out, "{t},{w}");
    }
    out
}

/// Smallest, mean, median, 95th percentile and largest of a list of token counts.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Spread {
    pub min: u64,
    pub mean: f64,
    pub p50: u64,
    pub p95: u64,
    pub max: u64,
}

/// `None` for an empty list.
pub fn spread(values: &[u64]) -> Option<Spread> {
    let mut v = values.to_vec();
    v.sort_unstable();
    let n = v.len();
    let at = |q: f64| v[((q * (n - 1) as f64).round() as usize).min(n - 1)];
    Some(Spread {
        min: *v.first()?,
        mean: v.iter().sum::<u64>() as f64 / n as f64,
        p50: at(0.5),
        p95: at(0.95),
        max: v[n - 1],
    })
}

/// A bar per token count, as high as its microbatches, on an axis of round token counts.
pub fn svg(histogram: &[(u64, u64)], title: &str) -> String {
    let largest = histogram.iter().map(|(t, _)| *t).max().unwrap_or(0) as f64;
    let step = tick_step(largest);
    let ticks: Vec<f64> = (0..=(largest / step).ceil().max(1.0) as usize).map(|k| k as f64 * step).collect();
    let highest = histogram.iter().map(|(_, w)| *w).max().unwrap_or(0) as f64;
    let frame = Frame::new(&ticks, highest);
    let mut out = String::new();
    frame.axes(&mut out, title, &ticks, "image tokens per sequence (encoder)", "microbatches");
    // Bars as wide as the closest two allow, between a hairline and a tenth of the axis.
    let gap =
        histogram.windows(2).map(|w| frame.px(w[1].0 as f64) - frame.px(w[0].0 as f64)).fold(f64::INFINITY, f64::min);
    let width = (0.8 * gap).clamp(1.0, frame.w / 10.0);
    for (t, w) in histogram {
        frame.bar(&mut out, COLOURS[0], *t as f64, *w as f64, width);
    }
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_sample_a_microbatch_counts_every_sample() {
        let mbs = microbatches(&[729, 0, 1458, 729], 1, 1, 0);
        assert_eq!(mbs, [729, 0, 1458, 729]);
        assert_eq!(histogram(&mbs), [(0, 1), (729, 2), (1458, 1)]);
        assert_eq!(csv(&histogram(&mbs)), "tokens,weight\n0,1\n729,2\n1458,1\n");
        assert_eq!(microbatches(&[1000, 1025], 1, 1024, 0), [1024, 2048]);
    }

    #[test]
    fn larger_microbatches_count_tokens_per_sequence_and_drop_the_remainder() {
        let per_sample = [100, 200, 300, 400, 500];
        let mbs = microbatches(&per_sample, 2, 1, 7);
        assert_eq!(mbs.len(), 2);
        assert_eq!(mbs, microbatches(&per_sample, 2, 1, 7), "seeded");
        // Every pair's mean, rounded up: between the two smallest and the two largest.
        assert!(mbs.iter().all(|t| (150..=450).contains(t)), "{mbs:?}");
        assert_eq!(microbatches(&[1, 2], 2, 1, 0), [2]);
    }

    #[test]
    fn spread_of_token_counts() {
        assert_eq!(spread(&[]), None);
        let s = spread(&[4, 1, 3, 2, 100]).unwrap();
        assert_eq!((s.min, s.p50, s.p95, s.max), (1, 3, 100, 100));
        assert_eq!(s.mean, 22.0);
    }

    #[test]
    fn the_picture_has_a_bar_per_token_count() {
        let svg = svg(&[(0, 3), (729, 10), (1458, 4)], "data.jsonl");
        assert_eq!(svg.matches("<rect x=").count(), 3);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        assert!(svg.contains(">microbatches</text>"));
    }
}
