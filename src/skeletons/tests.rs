//! Golden orders from the reference implementations, stored as expected strings (no
//! third-party code): torch's regression artifacts under test/distributed/pipelining/artifacts,
//! the canonical orders of ../shared/refs/schedule-ir-anchors.md, and Megatron's
//! `get_schedule_table` order re-derived independently below for a sweep of shapes.

use super::*;
use crate::algebra::Skeleton;

fn orders(skeleton: Skeleton, ranks: u32, chunks: u32, microbatches: u32) -> Vec<String> {
    render(&order(skeleton, Shape { ranks, chunks, microbatches }, true))
}

/// torch's CSV rows with idle cells dropped (the IR has no idle slots; time comes from the
/// simulator), and the old spelling `B` of backward-input mapped to today's `I` where asked.
fn csv_rows(csv: &str, old_b_is_i: bool) -> Vec<String> {
    csv.lines()
        .map(|l| {
            l.split(',')
                .filter(|c| !c.is_empty())
                .map(|c| if old_b_is_i { c.replace('B', "I") } else { c.to_string() })
                .collect::<Vec<_>>()
                .join(",")
        })
        .collect()
}

#[test]
fn one_f_one_b_4x8_matches_megatron_torch_and_deepspeed() {
    assert_eq!(
        orders(Skeleton::OneFOneB, 4, 1, 8),
        [
            "0F0,0F1,0F2,0F3,0B0,0F4,0B1,0F5,0B2,0F6,0B3,0F7,0B4,0B5,0B6,0B7",
            "1F0,1F1,1F2,1B0,1F3,1B1,1F4,1B2,1F5,1B3,1F6,1B4,1F7,1B5,1B6,1B7",
            "2F0,2F1,2B0,2F2,2B1,2F3,2B2,2F4,2B3,2F5,2B4,2F6,2B5,2F7,2B6,2B7",
            "3F0,3B0,3F1,3B1,3F2,3B2,3F3,3B3,3F4,3B4,3F5,3B5,3F6,3B6,3F7,3B7",
        ]
    );
}

#[test]
fn one_f_one_b_caps_warmup_at_m() {
    assert_eq!(orders(Skeleton::OneFOneB, 4, 1, 2)[0], "0F0,0F1,0B0,0B1");
}

#[test]
fn gpipe_and_looped_bfs() {
    assert_eq!(orders(Skeleton::Gpipe, 2, 1, 3), ["0F0,0F1,0F2,0B0,0B1,0B2", "1F0,1F1,1F2,1B0,1B1,1B2"]);
    assert_eq!(
        orders(Skeleton::Gpipe, 2, 2, 4),
        [
            "0F0,0F1,0F2,0F3,2F0,2F1,2F2,2F3,2B3,2B2,2B1,2B0,0B3,0B2,0B1,0B0",
            "1F0,1F1,1F2,1F3,3F0,3F1,3F2,3F3,3B3,3B2,3B1,3B0,1B3,1B2,1B1,1B0"
        ]
    );
}

#[test]
fn interleaved_2x2x4_matches_torch() {
    assert_eq!(
        orders(Skeleton::Interleaved { v: 2 }, 2, 2, 4),
        [
            "0F0,0F1,2F0,2F1,0F2,2B0,0F3,2B1,2F2,0B0,2F3,0B1,2B2,2B3,0B2,0B3",
            "1F0,1F1,3F0,3B0,3F1,3B1,1F2,1B0,1F3,1B1,3F2,3B2,3F3,3B3,1B2,1B3"
        ]
    );
}

#[test]
fn zero_bubble_2x2x4_matches_torch() {
    assert_eq!(
        orders(Skeleton::Zb1p { v: 2 }, 2, 2, 4)[0],
        "0F0,0F1,2F0,2F1,2I0,2W0,0F2,2I1,2W1,0F3,0I0,0W0,2F2,0I1,0W1,2F3,2I2,2W2,2I3,2W3,0I2,0W2,0I3,0W3"
    );
}

#[test]
fn zero_bubble_matches_torch_artifact() {
    // pytorch test/distributed/pipelining/artifacts/zb1p_2rank_2stagep_compute.csv @ 15380b18,
    // written when backward-input was spelled `B`.
    let artifact = "0F0,0F1,2F0,,2F1,2B0,2W0,0F2,2B1,2W1,0F3,0B0,0W0,2F2,0B1,0W1,2F3,2B2,2W2,0F4,2B3,2W3,0F5,0B2,0W2,2F4,0B3,0W3,2F5,2B4,2W4,0F6,2B5,2W5,0F7,0B4,0W4,2F6,0B5,0W5,2F7,2B6,2W6,2B7,2W7,0B6,0W6,0B7,0W7\n\
,1F0,1F1,3F0,3B0,3F1,3B1,3W0,1F2,1B0,3W1,1F3,1B1,1W0,3F2,3B2,1W1,3F3,3B3,3W2,1F4,1B2,3W3,1F5,1B3,1W2,3F4,3B4,1W3,3F5,3B5,3W4,1F6,1B4,3W5,1F7,1B5,1W4,3F6,3B6,1W5,3F7,3B7,3W6,1B6,3W7,1B7,1W6,1W7\n";
    assert_eq!(orders(Skeleton::Zb1p { v: 2 }, 2, 2, 8), csv_rows(artifact, true));
}

#[test]
fn zbv_pp2_n4_and_masked_padding() {
    assert_eq!(
        orders(Skeleton::Zbv, 2, 2, 4),
        [
            "0F0,0F1,0F2,3F0,3I0,3W0,3F1,3I1,3W1,0F3,0I0,0W0,3F2,3I2,3W2,0I1,0W1,3F3,3I3,3W3,0I2,0W2,0I3,0W3",
            "1F0,2F0,1F1,2F1,2I0,2W0,1F2,1I0,1W0,2F2,2I1,2W1,1F3,1I1,1W1,2F3,2I2,2W2,1I2,2I3,1I3,1W2,2W3,1W3",
        ]
    );
    assert_eq!(orders(Skeleton::Zbv, 2, 2, 2)[0], "0F0,0F1,3F0,3I0,3W0,3F1,3I1,3W1,0I0,0W0,0I1,0W1");
}

#[test]
fn dualpipev_matches_torch_artifact() {
    // pytorch test/distributed/pipelining/artifacts/dualpipev_4rank_10mb.csv @ a2af973f.
    let artifact = "0F0,0F1,0F2,0F3,0F4,0F5,0F6,7F0,7I0,7W0,7F1,7I1,7W1,7F2,7I2,7W2,7F3,(0F7;7B3)OVERLAP_F_B,(7F4;0B0)OVERLAP_F_B,(0F8;7B4)OVERLAP_F_B,(7F5;0B1)OVERLAP_F_B,(0F9;7B5)OVERLAP_F_B,(7F6;0B2)OVERLAP_F_B,7B6,(7F7;0B3)OVERLAP_F_B,7B7,(7F8;0B4)OVERLAP_F_B,7B8,(7F9;0B5)OVERLAP_F_B,7B9,0I6,0W6,0I7,0W7,0I8,0W8,0I9,0W9\n\
1F0,1F1,1F2,1F3,1F4,6F0,1F5,6F1,6I0,6W0,6F2,6I1,6W1,6F3,(1F6;6B2)OVERLAP_F_B,(6F4;1B0)OVERLAP_F_B,(1F7;6B3)OVERLAP_F_B,(6F5;1B1)OVERLAP_F_B,(1F8;6B4)OVERLAP_F_B,(6F6;1B2)OVERLAP_F_B,(1F9;6B5)OVERLAP_F_B,(6F7;1B3)OVERLAP_F_B,6B6,(6F8;1B4)OVERLAP_F_B,6B7,(6F9;1B5)OVERLAP_F_B,6B8,1B6,6I9,1I7,6W9,1I8,1W7,1I9,1W8,1W9\n\
2F0,2F1,2F2,5F0,2F3,5F1,2F4,5F2,5I0,5W0,5F3,(2F5;5B1)OVERLAP_F_B,(5F4;2B0)OVERLAP_F_B,(2F6;5B2)OVERLAP_F_B,(5F5;2B1)OVERLAP_F_B,(2F7;5B3)OVERLAP_F_B,(5F6;2B2)OVERLAP_F_B,(2F8;5B4)OVERLAP_F_B,(5F7;2B3)OVERLAP_F_B,(2F9;5B5)OVERLAP_F_B,(5F8;2B4)OVERLAP_F_B,5B6,(5F9;2B5)OVERLAP_F_B,5B7,2B6,5B8,2I7,5I9,2I8,2W7,2I9,5W9,2W8,2W9\n\
3F0,4F0,3F1,4F1,3F2,4F2,3F3,4F3,3F4,4B0,(4F4;3B0)OVERLAP_F_B,(3F5;4B1)OVERLAP_F_B,(4F5;3B1)OVERLAP_F_B,(3F6;4B2)OVERLAP_F_B,(4F6;3B2)OVERLAP_F_B,(3F7;4B3)OVERLAP_F_B,(4F7;3B3)OVERLAP_F_B,(3F8;4B4)OVERLAP_F_B,(4F8;3B4)OVERLAP_F_B,(3F9;4B5)OVERLAP_F_B,(4F9;3B5)OVERLAP_F_B,4B6,3B6,4B7,3B7,4I8,3I8,4I9,3I9,4W8,3W8,4W9,3W9\n";
    assert_eq!(orders(Skeleton::DualPipeV, 4, 2, 10), csv_rows(artifact, false));
}

#[test]
fn v_mapping_matches_torch() {
    let ranks: Vec<u32> = (0..12).map(|s| rank_of(Mapping::V, 4, s)).collect();
    assert_eq!(ranks, [0, 1, 2, 3, 3, 2, 1, 0, 0, 1, 2, 3]);
    assert_eq!((0..4).map(|s| rank_of(Mapping::V, 2, s)).collect::<Vec<_>>(), [0, 1, 1, 0]);
}

/// Megatron's interleaved order, written from its own algorithm (`get_schedule_table`,
/// `get_pp_rank_microbatches`), independently of the torch-derived generator.
fn megatron_interleaved(pp: u32, vp: u32, m: u32, group: u32, rank: u32) -> String {
    let mut table: Vec<(u32, u32)> = Vec::new();
    let mut start = 0;
    while start < m {
        let end = if start + group >= m { m } else { start + group };
        for chunk in 0..vp {
            for mb in start..end {
                table.push((mb, chunk));
            }
        }
        start += group;
    }
    let total = m * vp;
    let warmup = ((pp - rank - 1) * 2 + (vp - 1) * group).min(total);
    let forward = |k: u32| {
        let (mb, chunk) = table[k as usize];
        format!("{}F{}", chunk * pp + rank, mb)
    };
    let backward = |k: u32| {
        let (mb, chunk) = table[k as usize];
        format!("{}B{}", (vp - 1 - chunk) * pp + rank, mb)
    };
    let mut ops: Vec<String> = (0..warmup).map(forward).collect();
    for k in 0..total - warmup {
        ops.push(forward(k + warmup));
        ops.push(backward(k));
    }
    ops.extend((total - warmup..total).map(backward));
    ops.join(",")
}

#[test]
fn interleaved_equals_megatron_over_a_sweep() {
    let mut compared = 0;
    for pp in 2..=6 {
        for vp in 2..=4 {
            for m in 1..=4 * pp {
                if (crate::algebra::Skeleton::Interleaved { v: vp })
                    .check_microbatches(u64::from(pp), u64::from(m))
                    .is_err()
                {
                    continue;
                }
                let group = m / (m / pp).max(1);
                // Megatron's own constraints on the group size (schedules.py).
                if group < pp || group > m || (m % group != 0 && m % group < pp) {
                    continue;
                }
                let ours = orders(Skeleton::Interleaved { v: vp }, pp, vp, m);
                for rank in 0..pp {
                    assert_eq!(
                        ours[rank as usize],
                        megatron_interleaved(pp, vp, m, group, rank),
                        "pp={pp} vp={vp} m={m} rank={rank}"
                    );
                }
                compared += 1;
            }
        }
    }
    assert!(compared > 100, "only {compared} shapes compared");
}
