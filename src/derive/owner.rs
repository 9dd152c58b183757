//! Owner maps of a replicated region, and where each encode goes in its owner's list.
//!
//! Each rank's warmup slack is a list of idle gaps in the body-only schedule (the wait for its
//! first activation, then for its first gradient). Encodes are taken in deadline order — the
//! time the first body stage needs them — and each goes into the first gap on its owner that
//! ends in time and has room; one that fits nowhere runs at the front of the owner's list,
//! where it delays that rank's pipeline (its spill). `by_microbatch` picks, for each
//! microbatch, the rank where it ends up least exposed: free in a gap if possible, else the
//! least added spill or lateness; ties to the rank with the most room left, then the lower
//! rank. `round_robin` (m mod P) and explicit lists fix the owner and use the same placement.

use crate::algebra::OwnerSpec;

/// An idle stretch of a rank in the body-only schedule.
#[derive(Clone, Debug, PartialEq)]
pub struct Gap {
    /// The chain position of the event the gap precedes.
    pub before: usize,
    pub room: f64,
    pub end: f64,
}

pub struct Load<'a> {
    pub gaps: &'a [Vec<Gap>],
    pub work: &'a [f64],
    pub deadline: &'a [f64],
}

/// Owner of each microbatch and the chain position its encode goes before.
pub struct Assignment {
    pub owners: Vec<u32>,
    pub positions: Vec<usize>,
}

const EPS: f64 = 1e-12;

pub fn assign(spec: &OwnerSpec, ranks: u32, load: &Load) -> Assignment {
    let m = load.work.len();
    let fixed: Option<Vec<u32>> = match spec {
        OwnerSpec::RoundRobin => Some((0..m as u32).map(|mb| mb % ranks).collect()),
        OwnerSpec::Explicit(list) => Some(list.iter().map(|r| *r as u32).collect()),
        OwnerSpec::ByMicrobatch => None,
    };
    let mut gaps: Vec<Vec<Gap>> = load.gaps.to_vec();
    // Work run at the front of each rank beyond its first gap, and all front work.
    let mut front = vec![0.0f64; ranks as usize];
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&a, &b| load.deadline[a].total_cmp(&load.deadline[b]).then(a.cmp(&b)));
    let (mut owners, mut positions) = (vec![0u32; m], vec![0usize; m]);
    for mb in order {
        let e = load.work[mb];
        let d = load.deadline[mb];
        let candidates: Vec<u32> = match &fixed {
            Some(f) => vec![f[mb]],
            None => (0..ranks).collect(),
        };
        // (exposed, -room left, rank, gap index or None for the front)
        let mut best: Option<(f64, f64, u32, Option<usize>)> = None;
        for r in candidates {
            let rg = &gaps[r as usize];
            let room: f64 = rg.iter().map(|g| g.room).sum();
            let choice = match rg.iter().position(|g| g.before > 0 && g.room + EPS >= e && g.end <= d + EPS) {
                Some(k) => (0.0, Some(k)),
                None => {
                    // At the front: the first gap absorbs what it can, the rest is spill.
                    let head = rg.first().filter(|g| g.before == 0).map_or(0.0, |g| g.room);
                    let done = front[r as usize] + e;
                    let spill = (done - head.max(front[r as usize].min(head))).max(0.0).min(done);
                    let late = (done - d).max(0.0);
                    (spill.max(late), None)
                }
            };
            let key = (choice.0, -room, r, choice.1);
            let better = match &best {
                None => true,
                Some(b) => key.0 < b.0 - EPS || ((key.0 - b.0).abs() <= EPS && key.1 < b.1 - EPS),
            };
            if better {
                best = Some(key);
            }
        }
        let (_, _, r, gap) = best.expect("at least one candidate rank");
        owners[mb] = r;
        match gap {
            Some(k) => {
                gaps[r as usize][k].room -= e;
                positions[mb] = gaps[r as usize][k].before;
            }
            None => {
                if let Some(g) = gaps[r as usize].first_mut().filter(|g| g.before == 0) {
                    g.room = (g.room - e).max(0.0);
                }
                front[r as usize] += e;
                positions[mb] = 0;
            }
        }
    }
    Assignment { owners, positions }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gap(before: usize, room: f64, end: f64) -> Gap {
        Gap { before, room, end }
    }

    #[test]
    fn fills_gaps_before_spilling() {
        // Rank 1 waits one unit at the front; rank 0 idles two units before its first
        // backward, at position 3, ending at time 5.
        let gaps = vec![vec![gap(3, 2.0, 5.0)], vec![gap(0, 1.0, 1.0)]];
        let work = [1.0, 1.0, 1.0];
        let deadline = [0.5, 5.0, 6.0];
        let a = assign(&OwnerSpec::ByMicrobatch, 2, &Load { gaps: &gaps, work: &work, deadline: &deadline });
        assert_eq!(a.owners[0], 1, "the first encode goes to the rank with front slack");
        assert_eq!((a.owners[1], a.positions[1]), (0, 3), "a later deadline fits the backward wait of rank 0");
        assert_eq!((a.owners[2], a.positions[2]), (0, 3));
    }

    #[test]
    fn round_robin_and_explicit_fix_the_owner() {
        let gaps = vec![vec![], vec![]];
        let (w, d) = ([1.0; 5], [0.0; 5]);
        let load = Load { gaps: &gaps, work: &w, deadline: &d };
        assert_eq!(assign(&OwnerSpec::RoundRobin, 2, &load).owners, [0, 1, 0, 1, 0]);
        assert_eq!(assign(&OwnerSpec::Explicit(vec![1, 1, 0, 0, 1]), 2, &load).owners, [1, 1, 0, 0, 1]);
    }

    #[test]
    fn equal_work_spreads_evenly_when_it_spills() {
        let gaps: Vec<Vec<Gap>> =
            (0..4).map(|r| if r == 0 { vec![] } else { vec![gap(0, r as f64, r as f64)] }).collect();
        let work = [4.0; 8];
        let deadline: Vec<f64> = (0..8).map(|m| m as f64).collect();
        let a = assign(&OwnerSpec::ByMicrobatch, 4, &Load { gaps: &gaps, work: &work, deadline: &deadline });
        let mut per_rank = [0; 4];
        for r in &a.owners {
            per_rank[*r as usize] += 1;
        }
        assert_eq!(per_rank, [2, 2, 2, 2], "{:?}", a.owners);
    }
}
