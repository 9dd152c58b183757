//! Expected step lists of HyperParallel's MPipe schedule, derived by hand from the rules in
//! order.rs (body slots: skeletons/hyperparallel.rs), one string per rank. A token is
//! the step's short name, then `stage.microbatch`; prefix steps (stage -1) have no stage:
//! `L` DATA_LOAD, `T` MPIPE_TRANSPOSE_FWD, `DS`/`DR` DATA_SEND/RECV, `XS`/`XR`
//! MPIPE_FWD_SEND/RECV, `F`/`B` FWD/BWD, `FS`/`FR` FWD_SEND/RECV, `BS`/`BR` BWD_SEND/RECV, `PB`
//! MPIPE_PARAM_BROADCAST, `GS` MPIPE_GRAD_SEND, `GR` MPIPE_GRAD_RECV_WITH_BACKWARD, `RED0`
//! MPIPE_GRAD_REDUCE (no microbatch).

use super::order::{Form, Step, steps};

fn short(kind: &str) -> &'static str {
    match kind {
        "DATA_LOAD" => "L",
        "MPIPE_TRANSPOSE_FWD" => "T",
        "DATA_SEND" => "DS",
        "DATA_RECV" => "DR",
        "MPIPE_FWD_SEND" => "XS",
        "MPIPE_FWD_RECV" => "XR",
        "FWD" => "F",
        "BWD" => "B",
        "FWD_SEND" => "FS",
        "FWD_RECV" => "FR",
        "BWD_SEND" => "BS",
        "BWD_RECV" => "BR",
        "MPIPE_PARAM_BROADCAST" => "PB",
        "MPIPE_GRAD_SEND" => "GS",
        "MPIPE_GRAD_RECV_WITH_BACKWARD" => "GR",
        "MPIPE_GRAD_REDUCE" => "RED",
        other => panic!("unexpected step {other}"),
    }
}

fn token(s: &Step) -> String {
    let stage = if s.stage_index == -1 { String::new() } else { s.stage_index.to_string() };
    match s.micro_index {
        Some(mb) => format!("{}{stage}.{mb}", short(s.kind)),
        None => format!("{}{stage}", short(s.kind)),
    }
}

fn check(form: Form, expected: &[&str]) {
    let got: Vec<String> =
        steps(&form).iter().map(|rank| rank.iter().map(token).collect::<Vec<_>>().join(" ")).collect();
    let expected: Vec<String> = expected.iter().map(|r| r.split_whitespace().collect::<Vec<_>>().join(" ")).collect();
    assert_eq!(got, expected, "{form:?}");
}

fn form(ranks: u32, microbatches: u32, less_memory: bool, trainable: bool) -> Form {
    Form { ranks, chunks: 1, microbatches, less_memory, trainable }
}

#[test]
fn p2_m2_frozen() {
    check(
        form(2, 2, false, false),
        &[
            "L.0 T.0 DR.1 XR.1
             F0.0 DS0.0 FS0.0 F0.1 DS0.1 FS0.1 BR0.0 B0.0 BR0.1 B0.1",
            "L.1 T.1 DS.1 XS.1
             DR1.0 FR1.0 F1.0 DR1.1 FR1.1 B1.0 BS1.0 F1.1 B1.1 BS1.1",
        ],
    );
}

#[test]
fn p2_m2_trainable() {
    check(
        form(2, 2, false, true),
        &[
            "PB.0 L.0 T.0 DR.1 XR.1
             F0.0 DS0.0 FS0.0 F0.1 DS0.1 FS0.1 BR0.0 B0.0 BR0.1 B0.1
             GS0.1 RED0",
            "PB.1 L.1 T.1 DS.1 XS.1
             DR1.0 FR1.0 F1.0 DR1.1 FR1.1 B1.0 BS1.0 F1.1 B1.1 BS1.1
             GR0.1 RED0",
        ],
    );
}

// M = 3 over two owners: rank 0 encodes microbatches 0 and 2, both before any transfer.
const P2_M3_BODY: [&str; 2] = [
    "F0.0 DS0.0 FS0.0 F0.1 DS0.1 FS0.1 BR0.0 F0.2 DS0.2 FS0.2 B0.0 BR0.1 B0.1 BR0.2 B0.2",
    "DR1.0 FR1.0 F1.0 DR1.1 FR1.1 B1.0 BS1.0 F1.1 DR1.2 FR1.2 B1.1 BS1.1 F1.2 B1.2 BS1.2",
];

#[test]
fn p2_m3_frozen() {
    check(
        form(2, 3, false, false),
        &[&format!("L.0 T.0 L.2 T.2 DR.1 XR.1 {}", P2_M3_BODY[0]), &format!("L.1 T.1 DS.1 XS.1 {}", P2_M3_BODY[1])],
    );
}

#[test]
fn p2_m3_trainable() {
    check(
        form(2, 3, false, true),
        &[
            &format!("PB.0 L.0 T.0 L.2 T.2 DR.1 XR.1 {} GS0.1 RED0", P2_M3_BODY[0]),
            &format!("PB.1 L.1 T.1 DS.1 XS.1 {} GR0.1 RED0", P2_M3_BODY[1]),
        ],
    );
}

// An odd rank posts the receive from its upstream neighbour before its own send in the same
// column: rank 1 receives microbatch 1 before it sends microbatch 0 on.
const P3_M3_BODY: [&str; 3] = [
    "F0.0 DS0.0 FS0.0 F0.1 DS0.1 FS0.1 F0.2 DS0.2 FS0.2 BR0.0 B0.0 BR0.1 B0.1 BR0.2 B0.2",
    "DR1.0 FR1.0 F1.0 DR1.1 FR1.1 DS1.0 FS1.0 F1.1 DR1.2 FR1.2 DS1.1 FS1.1 BR1.0 F1.2 DS1.2 FS1.2
     B1.0 BR1.1 BS1.0 B1.1 BR1.2 BS1.1 B1.2 BS1.2",
    "DR2.0 FR2.0 F2.0 DR2.1 FR2.1 B2.0 BS2.0 F2.1 DR2.2 FR2.2 B2.1 BS2.1 F2.2 B2.2 BS2.2",
];

#[test]
fn p3_m3_frozen() {
    check(
        form(3, 3, false, false),
        &[
            &format!("L.0 T.0 DR.1 DR.2 XR.1 XR.2 {}", P3_M3_BODY[0]),
            &format!("L.1 T.1 DS.1 XS.1 {}", P3_M3_BODY[1]),
            &format!("L.2 T.2 DS.2 XS.2 {}", P3_M3_BODY[2]),
        ],
    );
}

#[test]
fn p3_m3_trainable() {
    check(
        form(3, 3, false, true),
        &[
            &format!("PB.0 L.0 T.0 DR.1 DR.2 XR.1 XR.2 {} GS0.1 GS0.2 RED0", P3_M3_BODY[0]),
            &format!("PB.1 L.1 T.1 DS.1 XS.1 {} GR0.1 RED0", P3_M3_BODY[1]),
            &format!("PB.2 L.2 T.2 DS.2 XS.2 {} GR0.2 RED0", P3_M3_BODY[2]),
        ],
    );
}

// Classic warmup 2(P-1-i): rank 0 runs all four forwards before its first backward.
const P3_M4_BODY: [&str; 3] = [
    "F0.0 DS0.0 FS0.0 F0.1 DS0.1 FS0.1 F0.2 DS0.2 FS0.2 F0.3 DS0.3 FS0.3
     BR0.0 B0.0 BR0.1 B0.1 BR0.2 B0.2 BR0.3 B0.3",
    "DR1.0 FR1.0 F1.0 DR1.1 FR1.1 DS1.0 FS1.0 F1.1 DR1.2 FR1.2 DS1.1 FS1.1 DR1.3 FR1.3 BR1.0
     F1.2 DS1.2 FS1.2 B1.0 BR1.1 BS1.0 F1.3 DS1.3 FS1.3 B1.1 BR1.2 BS1.1 B1.2 BR1.3 BS1.2 B1.3 BS1.3",
    "DR2.0 FR2.0 F2.0 DR2.1 FR2.1 B2.0 BS2.0 F2.1 DR2.2 FR2.2 B2.1 BS2.1 F2.2 DR2.3 FR2.3 B2.2 BS2.2
     F2.3 B2.3 BS2.3",
];

// Owners for M = 4 over three ranks: 0 -> {0, 3}, 1 -> {1}, 2 -> {2}.
const P3_M4_PREFIX: [&str; 3] = ["L.0 T.0 L.3 T.3 DR.1 DR.2 XR.1 XR.2", "L.1 T.1 DS.1 XS.1", "L.2 T.2 DS.2 XS.2"];

#[test]
fn p3_m4_frozen() {
    check(
        form(3, 4, false, false),
        &[
            &format!("{} {}", P3_M4_PREFIX[0], P3_M4_BODY[0]),
            &format!("{} {}", P3_M4_PREFIX[1], P3_M4_BODY[1]),
            &format!("{} {}", P3_M4_PREFIX[2], P3_M4_BODY[2]),
        ],
    );
}

#[test]
fn p3_m4_trainable() {
    check(
        form(3, 4, false, true),
        &[
            &format!("PB.0 {} {} GS0.1 GS0.2 RED0", P3_M4_PREFIX[0], P3_M4_BODY[0]),
            &format!("PB.1 {} {} GR0.1 RED0", P3_M4_PREFIX[1], P3_M4_BODY[1]),
            &format!("PB.2 {} {} GR0.2 RED0", P3_M4_PREFIX[2], P3_M4_BODY[2]),
        ],
    );
}

// `pp_less_memory`: warmup P-1-i, Megatron's 1F1B order, and different transfer columns.
const P3_M4_LESS_MEMORY_BODY: [&str; 3] = [
    "F0.0 DS0.0 FS0.0 F0.1 DS0.1 FS0.1 F0.2 DS0.2 FS0.2 BR0.0 B0.0 F0.3 DS0.3 FS0.3 BR0.1 B0.1
     BR0.2 B0.2 BR0.3 B0.3",
    "DR1.0 FR1.0 F1.0 DR1.1 FR1.1 DS1.0 FS1.0 F1.1 BR1.0 DS1.1 FS1.1 B1.0 DR1.2 FR1.2 BS1.0
     F1.2 BR1.1 DS1.2 FS1.2 B1.1 DR1.3 FR1.3 BS1.1 F1.3 BR1.2 DS1.3 FS1.3 B1.2 BS1.2 BR1.3 B1.3 BS1.3",
    "DR2.0 FR2.0 F2.0 B2.0 BS2.0 DR2.1 FR2.1 F2.1 B2.1 BS2.1 DR2.2 FR2.2 F2.2 B2.2 BS2.2 DR2.3 FR2.3
     F2.3 B2.3 BS2.3",
];

#[test]
fn p3_m4_less_memory_frozen() {
    check(
        form(3, 4, true, false),
        &[
            &format!("{} {}", P3_M4_PREFIX[0], P3_M4_LESS_MEMORY_BODY[0]),
            &format!("{} {}", P3_M4_PREFIX[1], P3_M4_LESS_MEMORY_BODY[1]),
            &format!("{} {}", P3_M4_PREFIX[2], P3_M4_LESS_MEMORY_BODY[2]),
        ],
    );
}

#[test]
fn p3_m4_less_memory_trainable() {
    check(
        form(3, 4, true, true),
        &[
            &format!("PB.0 {} {} GS0.1 GS0.2 RED0", P3_M4_PREFIX[0], P3_M4_LESS_MEMORY_BODY[0]),
            &format!("PB.1 {} {} GR0.1 RED0", P3_M4_PREFIX[1], P3_M4_LESS_MEMORY_BODY[1]),
            &format!("PB.2 {} {} GR0.2 RED0", P3_M4_PREFIX[2], P3_M4_LESS_MEMORY_BODY[2]),
        ],
    );
}

// M < P: two owners, and rank 2 owns no microbatch (a trainable tower still has it join the
// broadcast and the reduce).
const P3_M2_BODY: [&str; 3] = [
    "F0.0 DS0.0 FS0.0 F0.1 DS0.1 FS0.1 BR0.0 B0.0 BR0.1 B0.1",
    "DR1.0 FR1.0 F1.0 DR1.1 FR1.1 DS1.0 FS1.0 F1.1 DS1.1 FS1.1 BR1.0 B1.0 BR1.1 BS1.0 B1.1 BS1.1",
    "DR2.0 FR2.0 F2.0 DR2.1 FR2.1 B2.0 BS2.0 F2.1 B2.1 BS2.1",
];

#[test]
fn p3_m2_frozen() {
    check(
        form(3, 2, false, false),
        &[
            &format!("L.0 T.0 DR.1 XR.1 {}", P3_M2_BODY[0]),
            &format!("L.1 T.1 DS.1 XS.1 {}", P3_M2_BODY[1]),
            P3_M2_BODY[2],
        ],
    );
}

#[test]
fn p3_m2_trainable() {
    check(
        form(3, 2, false, true),
        &[
            &format!("PB.0 L.0 T.0 DR.1 XR.1 {} GS0.1 RED0", P3_M2_BODY[0]),
            &format!("PB.1 L.1 T.1 DS.1 XS.1 {} GR0.1 RED0", P3_M2_BODY[1]),
            &format!("PB.2 {} RED0", P3_M2_BODY[2]),
        ],
    );
}

/// A step as (type, stage, microbatch).
type Key = (&'static str, i64, Option<u32>);

/// Where a transfer goes and the step that must meet it there.
fn counterpart(s: &Step, ranks: u32, owners: u32) -> Option<(u32, Key)> {
    let mb = s.micro_index;
    let owner = mb.map_or(0, |m| m % owners);
    let stage = s.stage_index;
    let down = |t| Some((((stage + 1) as u32) % ranks, (t, stage + 1, mb)));
    let up = |t| Some((((stage - 1) as u32) % ranks, (t, stage - 1, mb)));
    match (s.kind, stage) {
        ("DATA_SEND", -1) => Some((0, ("DATA_RECV", -1, mb))),
        ("MPIPE_FWD_SEND", -1) => Some((0, ("MPIPE_FWD_RECV", -1, mb))),
        ("DATA_RECV", -1) => Some((owner, ("DATA_SEND", -1, mb))),
        ("MPIPE_FWD_RECV", -1) => Some((owner, ("MPIPE_FWD_SEND", -1, mb))),
        ("MPIPE_GRAD_SEND", _) => Some((owner, ("MPIPE_GRAD_RECV_WITH_BACKWARD", 0, mb))),
        ("MPIPE_GRAD_RECV_WITH_BACKWARD", _) => Some((0, ("MPIPE_GRAD_SEND", 0, mb))),
        ("DATA_SEND", _) => down("DATA_RECV"),
        ("FWD_SEND", _) => down("FWD_RECV"),
        ("BWD_RECV", _) => down("BWD_SEND"),
        ("DATA_RECV", _) => up("DATA_SEND"),
        ("FWD_RECV", _) => up("FWD_SEND"),
        ("BWD_SEND", _) => up("BWD_RECV"),
        _ => None,
    }
}

// HyperParallel's own invariant for its point-to-point queues: between any two ranks, the
// n-th transfer one posts meets the n-th the other posts. Over the 40 shapes, with
// one and two chunks.
#[test]
fn every_shape_pairs_its_transfers_in_order() {
    for (p, chunks) in [2u32, 3, 4, 8].into_iter().flat_map(|p| [(p, 1), (p, 2)]) {
        for m in [p, 2 * p, 2 * p + 1, 16, 17] {
            for (less_memory, trainable) in [(false, false), (false, true), (true, false), (true, true)] {
                let all = steps(&Form { chunks, ..form(p, m, less_memory, trainable) });
                let mut queues = std::collections::BTreeMap::<(u32, u32), Vec<_>>::new();
                for (rank, rank_steps) in all.iter().enumerate() {
                    for s in rank_steps {
                        if let Some((peer, want)) = counterpart(s, p, p.min(m)) {
                            queues
                                .entry((rank as u32, peer))
                                .or_default()
                                .push(((s.kind, s.stage_index, s.micro_index), want));
                        }
                    }
                }
                for (&(a, b), mine) in &queues {
                    let theirs = &queues[&(b, a)];
                    let met: Vec<_> = theirs.iter().map(|(step, _)| *step).collect();
                    let wanted: Vec<_> = mine.iter().map(|(_, want)| *want).collect();
                    assert_eq!(
                        wanted, met,
                        "p={p} v={chunks} m={m} less_memory={less_memory} trainable={trainable} {a}->{b}"
                    );
                }
            }
        }
    }
}
