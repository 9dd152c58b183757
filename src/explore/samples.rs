//! Variable load: the one static schedule, derived once, simulated across sampled batches
//! whose microbatches draw their image tokens from the plan's distribution (`image_histogram`,
//! else the `image_tokens` list taken as an empirical distribution) — next to the per-batch
//! optimum, a schedule derived afresh for each batch.

use serde::Serialize;

use crate::adaptive;
use crate::cost::model::CostModel;
use crate::derive::Derived;
use crate::plan::Plan;

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Stats {
    pub samples: usize,
    pub mean_s: f64,
    pub p50_s: f64,
    pub p95_s: f64,
    pub max_s: f64,
}

/// The statistics of one schedule's step times over the sampled batches.
pub fn stats(mut times: Vec<f64>) -> Stats {
    times.sort_by(f64::total_cmp);
    let n = times.len();
    let at = |q: f64| times[((q * (n - 1) as f64).round() as usize).min(n - 1)];
    Stats {
        samples: n,
        mean_s: times.iter().sum::<f64>() / n as f64,
        p50_s: at(0.5),
        p95_s: at(0.95),
        max_s: times[n - 1],
    }
}

/// `n` batches of per-microbatch image tokens, drawn with a seeded generator.
pub fn draw(plan: &Plan, n: usize, seed: u64) -> Vec<Vec<u64>> {
    let b = &plan.batch;
    let dist: Vec<(u64, f64)> =
        if !b.histogram.is_empty() { b.histogram.clone() } else { b.image_tokens.iter().map(|t| (*t, 1.0)).collect() };
    let total: f64 = dist.iter().map(|(_, w)| w).sum();
    let mut rng = crate::random::Lcg::new(seed ^ 0x9E37_79B9_7F4A_7C15);
    let mut uniform = || rng.uniform();
    (0..n)
        .map(|_| {
            (0..b.microbatches)
                .map(|_| {
                    if dist.is_empty() {
                        return 0;
                    }
                    let mut x = uniform() * total;
                    for (t, w) in &dist {
                        if x < *w {
                            return *t;
                        }
                        x -= w;
                    }
                    // Rounding can leave `x` past the last weight: the last bin anything falls in.
                    dist.iter().rev().find(|(_, w)| *w > 0.0).map_or(0, |(t, _)| *t)
                })
                .collect()
        })
        .collect()
}

/// The static schedule `derived` run on each batch.
pub fn static_schedule(plan: &Plan, derived: &Derived, batches: &[Vec<u64>]) -> Stats {
    let times = batches
        .iter()
        .map(|tokens| adaptive::makespan(derived, &CostModel::new(&adaptive::batch_of(plan, tokens))))
        .collect();
    stats(times)
}

/// One `sim --compare` baseline run on the sampled batches.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Baseline {
    pub name: &'static str,
    #[serde(flatten)]
    pub stats: Stats,
}

/// Every baseline of `sim --compare`, each derived once for the plan's own `image_tokens` and
/// then run unchanged on every batch, as those systems run: one static schedule each.
pub fn baselines(plan: &Plan, batches: &[Vec<u64>]) -> Vec<Baseline> {
    crate::explore::compare::baselines(plan)
        .into_iter()
        .filter_map(|b| {
            let built = crate::driver::build(&b.plan).ok()?;
            Some(Baseline { name: b.name, stats: static_schedule(&b.plan, &built.derived, batches) })
        })
        .collect()
}

/// A schedule derived for each batch on its own: what no static schedule can beat.
pub fn per_batch(plan: &Plan, batches: &[Vec<u64>]) -> Stats {
    let times = batches
        .iter()
        .map(|tokens| {
            let p = adaptive::batch_of(plan, tokens);
            crate::driver::build(&p).map_or(f64::INFINITY, |built| built.evaluate().report.step_time_s)
        })
        .collect();
    stats(times)
}
