//! `mpipec tune`: a search over the plans one model and one cluster allow — pp·dp·tp, the
//! body's skeleton and chunks, where the encoder is cut (transposed whole, half transposed,
//! or folded into the pipeline), owner maps, microbatch sizes at a fixed global batch — each
//! candidate written as `--set` overrides, checked like a file, derived and simulated.
//! Exhaustive when the space is small; otherwise a seeded sample, refined coordinate by
//! coordinate, with the optimality gap it cannot close reported.

use crate::algebra::Layout;
use crate::plan::{Plan, gcd};
use crate::sim::report::Report;

pub type Overrides = Vec<(String, String)>;

/// Candidates evaluated one by one past which the search samples instead.
pub const EXHAUSTIVE: usize = 600;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Objective {
    StepTime,
    Mfu,
}

#[derive(Clone, Debug)]
pub struct Scored {
    pub overrides: Overrides,
    pub report: Report,
}

impl Scored {
    fn key(&self, objective: Objective) -> f64 {
        match objective {
            Objective::StepTime => self.report.step_time_s,
            Objective::Mfu => -self.report.mfu,
        }
    }
}

pub struct Outcome {
    /// Best first.
    pub ranked: Vec<Scored>,
    pub evaluated: usize,
    pub space: usize,
    pub exhaustive: bool,
    /// With sampling: how far the best found may be from the best of the whole space, as
    /// (best step / smallest lower bound seen) − 1.
    pub gap: Option<f64>,
}

fn divisors(n: u64) -> Vec<u64> {
    (1..=n).filter(|d| n.is_multiple_of(*d)).collect()
}

/// Every candidate, as overrides of the input plan, the input first when it runs on `devices`
/// (on another count it is no candidate: one ranking, one device count).
pub fn space(plan: &Plan, devices: u64) -> Vec<Overrides> {
    let c = &plan.cluster;
    let global_batch = plan.batch.microbatches * plan.batch.micro_batch_size * c.dp;
    let layers = plan.model.layers();
    let has_encoder = plan.schedule.first().is_some_and(|s| s.skeleton.layout() == Layout::Replicated)
        || plan.model.parts.first().is_some_and(|p| p.arch.is_encoder());
    let encoder = plan.model.parts.first().filter(|p| p.arch.is_encoder());
    let rest: Vec<&str> =
        plan.model.parts.iter().skip(usize::from(encoder.is_some())).map(|p| p.name.as_str()).collect();
    let mut cuts: Vec<(String, Option<String>)> = Vec::new();
    match encoder {
        Some(enc) => {
            let l = enc.arch.layers();
            let body = rest.join(" + ");
            cuts.push((format!("{} | {body}", enc.name), Some("transpose".into())));
            if l >= 2 {
                cuts.push((
                    format!("{0}[0..{1}] | {0}[{1}..{2}] + {body}", enc.name, l / 2, l),
                    Some("transpose".into()),
                ));
            }
            cuts.push((format!("{} + {body}", enc.name), None));
        }
        None => cuts.push((plan.model.parts.iter().map(|p| p.name.as_str()).collect::<Vec<_>>().join(" + "), None)),
    }
    let skeletons = ["1f1b", "interleaved(2)", "interleaved(4)", "zb1p(2)", "zbv", "dualpipev"];
    let owners: &[&str] = if has_encoder { &["by_microbatch", "round_robin"] } else { &[""] };
    // The input plan itself: the best found is never worse than it.
    let mut out = if devices == c.devices { vec![Vec::new()] } else { Vec::new() };
    for tp in divisors(devices).into_iter().filter(|t| *t <= c.hardware.devices_per_node.min(8) && c.tp.max(1) > 0) {
        for pp in divisors(devices / tp) {
            let dp = devices / (tp * pp);
            if pp < 2 || pp > layers {
                continue;
            }
            for mbs in [1u64, 2, 4] {
                if !global_batch.is_multiple_of(dp * mbs) {
                    continue;
                }
                let m = global_batch / (dp * mbs);
                for (cut, head) in &cuts {
                    for skeleton in skeletons {
                        for owner in owners.iter().filter(|o| head.is_some() || o.is_empty() || **o == "by_microbatch")
                        {
                            let schedule = match head {
                                Some(h) => format!("{h}, {skeleton}"),
                                None => skeleton.to_string(),
                            };
                            let mut o: Overrides = vec![
                                ("cluster.devices".into(), devices.to_string()),
                                ("cluster.pp".into(), pp.to_string()),
                                ("cluster.dp".into(), dp.to_string()),
                                ("cluster.tp".into(), tp.to_string()),
                                ("cluster.ep".into(), gcd(c.ep, dp).to_string()),
                                ("batch.micro_batch_size".into(), mbs.to_string()),
                                ("batch.microbatches".into(), m.to_string()),
                                ("cut".into(), cut.clone()),
                                ("schedule".into(), schedule),
                            ];
                            if head.is_some() && !owner.is_empty() {
                                o.push(("owner".into(), owner.to_string()));
                            }
                            out.push(o);
                        }
                    }
                }
            }
        }
    }
    out
}

/// Searches `candidates` with `evaluate` (None: invalid or over the memory limit).
/// `progress(phase, done, total)` follows each phase: `searching` every candidate, or
/// `sampling` and then one `refining` round at a time. A phase's total is known when it starts
/// and its last call has `done == total`.
pub fn search(
    candidates: Vec<Overrides>,
    objective: Objective,
    seed: u64,
    mut evaluate: impl FnMut(&Overrides) -> Option<Report>,
    mut progress: impl FnMut(&'static str, usize, usize),
) -> Outcome {
    let space = candidates.len();
    let exhaustive = space <= EXHAUSTIVE;
    let mut scored: Vec<Scored> = Vec::new();
    let mut evaluated = 0;
    let mut run = |o: &Overrides, scored: &mut Vec<Scored>, evaluated: &mut usize| {
        if scored.iter().any(|s| s.overrides == *o) {
            return;
        }
        *evaluated += 1;
        if let Some(report) = evaluate(o) {
            scored.push(Scored { overrides: o.clone(), report });
        }
    };
    if exhaustive {
        for (i, o) in candidates.iter().enumerate() {
            run(o, &mut scored, &mut evaluated);
            progress("searching", i + 1, space);
        }
    } else {
        // A seeded sample, then coordinate descent: change one override at a time to any
        // value the space has for it, keep what improves.
        let mut rng = crate::random::Lcg::new(seed.wrapping_mul(6364136223846793005).wrapping_add(1));
        for i in 0..EXHAUSTIVE / 2 {
            let o = candidates[rng.below(space)].clone();
            run(&o, &mut scored, &mut evaluated);
            progress("sampling", i + 1, EXHAUSTIVE / 2);
        }
        let mut improved = true;
        while improved && evaluated < 4 * EXHAUSTIVE {
            improved = false;
            scored.sort_by(|a, b| a.key(objective).total_cmp(&b.key(objective)));
            let Some(best) = scored.first().cloned() else { break };
            let neighbours: Vec<&Overrides> = candidates
                .iter()
                .filter(|c| c.iter().zip(&best.overrides).filter(|(a, b)| a != b).count() == 1)
                .collect();
            let round = neighbours.len();
            for (i, n) in neighbours.into_iter().enumerate() {
                let before = scored.len();
                run(n, &mut scored, &mut evaluated);
                if scored.len() > before && scored.last().unwrap().key(objective) < best.key(objective) - 1e-12 {
                    improved = true;
                }
                progress("refining", i + 1, round);
            }
        }
    }
    scored.sort_by(|a, b| a.key(objective).total_cmp(&b.key(objective)).then_with(|| a.overrides.cmp(&b.overrides)));
    let gap = (!exhaustive).then(|| {
        let bound = scored.iter().map(|s| s.report.lower_bound_s).fold(f64::INFINITY, f64::min);
        scored.first().map_or(0.0, |b| b.report.step_time_s / bound - 1.0)
    });
    Outcome { ranked: scored, evaluated, space, exhaustive, gap }
}

/// The input plan's report when it runs on the candidates' `devices`: speedups and reasons are
/// only stated against a plan on the same number of devices.
pub fn reference<'a>(plan: &Plan, input: &'a Report, devices: u64) -> Option<&'a Report> {
    (plan.cluster.devices == devices).then_some(input)
}

/// Why a candidate wins against the input plan, in a few words.
pub fn reasons(candidate: &Report, input: &Report) -> String {
    let mut why = Vec::new();
    let db = input.bubble_fraction - candidate.bubble_fraction;
    if db > 0.01 {
        why.push(format!("bubble {:.0}% → {:.0}%", 100.0 * input.bubble_fraction, 100.0 * candidate.bubble_fraction));
    }
    let spill = |r: &Report| r.ranks.iter().map(|x| x.spill_s).fold(0.0, f64::max);
    if spill(input) - spill(candidate) > 1e-3 {
        why.push(format!("encoder spill {:.2} s → {:.2} s", spill(input), spill(candidate)));
    }
    let work = |r: &Report| r.lower_bound_work_s;
    if work(input) - work(candidate) > 1e-3 * work(input) {
        why.push(format!("less work per rank ({:.2} s → {:.2} s)", work(input), work(candidate)));
    }
    if why.is_empty() {
        why.push(format!("MFU {:.1}% → {:.1}%", 100.0 * input.mfu, 100.0 * candidate.mfu));
    }
    why.join(", ")
}
