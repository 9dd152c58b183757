//! Owner maps of a replicated region: which rank encodes which microbatch.

use crate::algebra::OwnerSpec;

/// What `by_microbatch` balances: each rank's warmup slack, each microbatch's encoder work and
/// the time the first body stage needs its features.
pub struct Load<'a> {
    pub slack: &'a [f64],
    pub work: &'a [f64],
    pub deadline: &'a [f64],
}

pub fn assign(spec: &OwnerSpec, ranks: u32, load: &Load) -> Vec<u32> {
    let m = load.work.len();
    match spec {
        OwnerSpec::RoundRobin => (0..m as u32).map(|mb| mb % ranks).collect(),
        OwnerSpec::Explicit(list) => list.iter().map(|r| *r as u32).collect(),
        OwnerSpec::ByMicrobatch => by_microbatch(ranks, load),
    }
}

/// Min-max balance of encoder work against slack, in deadline order: each microbatch goes to
/// the rank where it ends up least exposed — the larger of the rank's spill past its slack
/// and the microbatch's lateness against the first stage's need — so heavy encodes land in
/// long bubbles. Ties go to the rank with the most slack left, then the lower rank.
fn by_microbatch(ranks: u32, load: &Load) -> Vec<u32> {
    let m = load.work.len();
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&a, &b| load.deadline[a].total_cmp(&load.deadline[b]).then(a.cmp(&b)));
    let mut busy = vec![0.0f64; ranks as usize];
    let mut owners = vec![0u32; m];
    for mb in order {
        let e = load.work[mb];
        let mut best: Option<(f64, f64, u32)> = None;
        for r in 0..ranks {
            let done = busy[r as usize] + e;
            let spill = (done - load.slack[r as usize]).max(0.0);
            let late = (done - load.deadline[mb]).max(0.0);
            let exposed = spill.max(late);
            let room = load.slack[r as usize] - busy[r as usize];
            let better = match best {
                None => true,
                Some((x, y, _)) => exposed < x - 1e-12 || ((exposed - x).abs() <= 1e-12 && room > y + 1e-12),
            };
            if better {
                best = Some((exposed, room, r));
            }
        }
        let (_, _, r) = best.expect("at least one rank");
        busy[r as usize] += e;
        owners[mb] = r;
    }
    owners
}

/// How far the owners leave encoder work exposed, next to what no map can beat:
/// (max over ranks of max(0, E_r − w_r), max(0, ΣE − Σw) / P).
pub fn exposure(owners: &[u32], ranks: u32, load: &Load) -> (f64, f64) {
    let mut work = vec![0.0; ranks as usize];
    for (mb, r) in owners.iter().enumerate() {
        work[*r as usize] += load.work[mb];
    }
    let spill = work.iter().zip(load.slack).map(|(e, w)| (e - w).max(0.0)).fold(0.0, f64::max);
    let total: f64 = load.work.iter().sum::<f64>() - load.slack.iter().sum::<f64>();
    (spill, total.max(0.0) / ranks as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fits_in_slack_when_it_can() {
        // Slack grows with the rank; four light microbatches fit on ranks 1..3.
        let slack = [0.0, 1.0, 2.0, 3.0];
        let work = [1.0, 1.0, 1.0, 1.0];
        let deadline = [0.0, 1.0, 2.0, 3.0];
        let load = Load { slack: &slack, work: &work, deadline: &deadline };
        let owners = assign(&OwnerSpec::ByMicrobatch, 4, &load);
        let (spill, bound) = exposure(&owners, 4, &load);
        assert_eq!(bound, 0.0);
        assert!(spill <= 1.0, "{owners:?} spills {spill}");
        assert_ne!(owners[0], 0, "the rank without slack is not handed the first encode");
    }

    #[test]
    fn round_robin_and_explicit() {
        let (s, w, d) = ([0.0; 2], [1.0; 5], [0.0; 5]);
        let load = Load { slack: &s, work: &w, deadline: &d };
        assert_eq!(assign(&OwnerSpec::RoundRobin, 2, &load), [0, 1, 0, 1, 0]);
        assert_eq!(assign(&OwnerSpec::Explicit(vec![1, 1, 0, 0, 1]), 2, &load), [1, 1, 0, 0, 1]);
    }

    #[test]
    fn spill_is_balanced_when_work_exceeds_slack() {
        let slack = [0.0, 1.0, 2.0, 3.0];
        let work = [4.0; 8];
        let deadline: Vec<f64> = (0..8).map(|m| m as f64).collect();
        let load = Load { slack: &slack, work: &work, deadline: &deadline };
        let owners = assign(&OwnerSpec::ByMicrobatch, 4, &load);
        let mut per_rank = [0; 4];
        for r in &owners {
            per_rank[*r as usize] += 1;
        }
        assert_eq!(per_rank, [2, 2, 2, 2], "equal work spreads evenly: {owners:?}");
    }
}
