//! derive and the IR: snapshots of plan.txt for every example and for small plans of every
//! skeleton, properties over random plans, the validator against broken plans, the
//! backward-footprint lemma, and determinism.

mod common;

use mpipe::algebra::{Fill, Skeleton};
use mpipe::ir::validate::Problem;
use mpipe::ir::{Dir, Op, PlanIr};
use mpipe::resolve::loader::MemoryLoader;
use proptest::prelude::*;

/// A small plan: an optional 4-layer encoder, a decoder with enough layers for every stage.
fn plan_text(ranks: u32, microbatches: u32, schedule: &str, encoder: Option<bool>, owner: Option<&str>) -> String {
    let layers = ranks * 4;
    let mut t = String::from("use std::hardware::h100_sxm;\n\n");
    t.push_str(
        "encoder vit {\n    layers = 4;\n    hidden = 64;\n    ffn = 256;\n    heads = 4;\n    patch = 14;\n}\n\n",
    );
    t.push_str(&format!("decoder lm {{\n    layers = {layers};\n    hidden = 64;\n    ffn = 256;\n    heads = 4;\n    vocab = 1000;\n}}\n\n"));
    match encoder {
        Some(frozen) => {
            t.push_str(&format!("model m {{\n    enc = vit {{ frozen = {frozen}; }}\n    llm = lm;\n}}\n\n"))
        }
        None => t.push_str("model m {\n    llm = lm;\n}\n\n"),
    }
    t.push_str(&format!("cluster {{\n    hardware = h100_sxm;\n    devices = {ranks};\n    pp = {ranks};\n}}\n\n"));
    let tokens = if encoder.is_some() { "    image_tokens = 256;\n" } else { "" };
    t.push_str(&format!("batch {{\n    microbatches = {microbatches};\n    seq_len = 128;\n{tokens}}}\n\n"));
    t.push_str(if encoder.is_some() { "cut enc | llm;\n" } else { "cut llm;\n" });
    t.push_str(&format!("schedule {schedule};\n"));
    if let Some(o) = owner {
        t.push_str(&format!("owner {o};\n"));
    }
    t
}

fn derive_text(text: &str) -> PlanIr {
    let checked = mpipe::driver::compile("plan.mpipe", "plan.mpipe", text.as_bytes().to_vec(), &MemoryLoader::new());
    let plan = checked
        .plan
        .unwrap_or_else(|| panic!("{text}\n{:?}", checked.diagnostics.iter().map(|d| &d.message).collect::<Vec<_>>()));
    mpipe::driver::build(&plan).unwrap_or_else(|e| panic!("{:?}\n{}", e.problems, e.dump)).derived.ir
}

/// The lists of a small plan and its plan.txt as a build writes it, with the choices derive
/// made in its header.
fn lowered(text: &str) -> (PlanIr, String) {
    let plan = checked_plan(text);
    let built = mpipe::driver::build(&plan).unwrap_or_else(|e| panic!("{:?}\n{}", e.problems, e.dump));
    let mut listing = Vec::new();
    mpipe::ir::text::write_with_choices(&built.derived.ir, &built.resolved.describe(), &mut listing).unwrap();
    (built.derived.ir, String::from_utf8(listing).unwrap())
}

fn derive_file(path: &std::path::Path) -> PlanIr {
    let root = common::root();
    let loader = {
        let mut l = MemoryLoader::new();
        let examples = root.join("examples");
        for f in common::files_under(&examples, "mpipe").into_iter().chain(common::files_under(&examples, "csv")) {
            let key = f.strip_prefix(&root).unwrap().to_string_lossy().into_owned();
            l.insert(&key, &std::fs::read_to_string(&f).unwrap());
        }
        l
    };
    let key = path.strip_prefix(&root).unwrap().to_string_lossy().into_owned();
    let checked = mpipe::driver::compile(&key, &key, std::fs::read(path).unwrap(), &loader);
    let plan = checked
        .plan
        .as_ref()
        .unwrap_or_else(|| panic!("{key}: {:?}", checked.diagnostics.iter().map(|d| &d.message).collect::<Vec<_>>()));
    mpipe::driver::build(plan).unwrap().derived.ir
}

#[test]
fn examples_lower_to_valid_ir() {
    insta::glob!("..", "examples/*.mpipe", |path| {
        let ir = derive_file(path);
        insta::assert_snapshot!(reviewable(&mpipe::ir::text::render(&ir)));
    });
}

/// Longer than anyone reviews line by line: paper_512's lists are 37,000 lines.
const REVIEWABLE_LINES: usize = 3_000;

/// plan.txt as it is, or for a longer one a digest a reviewer can read: the header (regions,
/// stages, owners) in full, then each rank's count of each op and a hash of its list, so any
/// changed instruction still changes the snapshot and the digest says which rank and op.
fn reviewable(text: &str) -> String {
    if text.lines().count() <= REVIEWABLE_LINES {
        return text.to_string();
    }
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next_if(|l| !l.starts_with("rank ")) {
        out.push_str(line);
        out.push('\n');
    }
    while let Some(head) = lines.next() {
        let mut ops = std::collections::BTreeMap::<&str, usize>::new();
        let mut hash = 0xcbf2_9ce4_8422_2325u64; // FNV-1a
        while let Some(line) = lines.next_if(|l| !l.starts_with("rank ")) {
            if let Some(op) = line.split_whitespace().nth(1) {
                *ops.entry(op).or_default() += 1;
            }
            for b in line.bytes().chain([b'\n']) {
                hash = (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
            }
        }
        let ops: Vec<String> = ops.iter().map(|(op, n)| format!("{op} {n}")).collect();
        out.push_str(&format!("{head}: {}; list hash {hash:016x}\n", ops.join(", ")));
    }
    out
}

#[test]
fn every_skeleton_in_small() {
    // (name, ranks, microbatches, schedule, encoder frozen?, owner)
    type Case<'a> = (&'a str, u32, u32, &'a str, Option<bool>, Option<&'a str>);
    let cases: &[Case] = &[
        ("gpipe", 3, 4, "gpipe", None, None),
        ("1f1b", 3, 5, "1f1b", None, None),
        ("1f1b_fewer_microbatches_than_ranks", 4, 2, "1f1b", None, None),
        ("interleaved", 2, 4, "interleaved(2)", None, None),
        ("interleaved_m_not_multiple_of_p", 4, 6, "interleaved(2)", None, None),
        ("zb1p", 2, 4, "zb1p", None, None),
        ("zbv", 2, 4, "zbv", None, None),
        ("dualpipev", 2, 4, "dualpipev", None, None),
        ("transpose_frozen", 3, 4, "transpose, 1f1b", Some(true), None),
        ("transpose_trainable", 3, 4, "transpose, 1f1b", Some(false), None),
        ("transpose_round_robin", 3, 4, "transpose, 1f1b", Some(false), Some("round_robin")),
        ("transpose_explicit", 2, 3, "transpose, 1f1b", Some(false), Some("[1, 1, 0]")),
        ("transpose_prefix_hyperparallel", 3, 4, "transpose(prefix), 1f1b", Some(false), Some("round_robin")),
        ("transpose_interleaved", 2, 4, "transpose, interleaved(2)", Some(false), None),
        ("transpose_zbv", 2, 4, "transpose, zbv", Some(false), None),
        ("transpose_chunked", 3, 4, "transpose(chunks = 2), 1f1b", Some(true), None),
        ("transpose_chunked_trainable", 3, 4, "transpose(chunks = 2), 1f1b", Some(false), None),
        ("transpose_lookahead", 3, 4, "transpose(chunks = 2, lookahead = 1), 1f1b", Some(true), None),
    ];
    for (name, p, m, schedule, encoder, owner) in cases {
        let (_, listing) = lowered(&plan_text(*p, *m, schedule, *encoder, *owner));
        insta::assert_snapshot!(*name, listing);
    }
}

/// A trainable encoder that recomputes fully: some backward chunks run on another rank than
/// their forward, each after receiving its input (the previous chunk's output) from there.
#[test]
fn a_recomputed_encoders_backward_may_leave_its_forwards_rank() {
    let text = plan_text(3, 4, "transpose(chunks = 2), 1f1b", Some(false), None)
        .replace("frozen = false;", "frozen = false; recompute = full;");
    let (ir, listing) = lowered(&text);
    let moved = common::moved_backwards(&ir);
    assert!(!moved.is_empty(), "no backward left its forward's rank");
    for (r, k) in moved {
        let (list, i) = (&ir.ranks[r].instructions, &ir.ranks[r].instructions[k]);
        // The receives right before it bring its input (and, for the last chunk, the
        // feature gradient).
        let received = list[..k].iter().rev().take_while(|p| p.op == Op::Recv);
        let input = (Some(Dir::Act), i.stage.unwrap().checked_sub(1), i.mb);
        assert!(
            i.stage == Some(0) || received.clone().any(|p| (p.dir, p.stage, p.mb) == input),
            "rank {r} instruction {k}: no input received before it"
        );
    }
    insta::assert_snapshot!("transpose_recomputed_backward_moves", listing);
}

#[test]
fn two_sharded_regions_run_as_one_interleaved_pipeline() {
    let text = plan_text(2, 4, "1f1b, 1f1b", None, None).replace("cut llm;", "cut llm[0..4] | llm[4..8];");
    let ir = derive_text(&text);
    let compute: Vec<Vec<String>> = ir
        .ranks
        .iter()
        .map(|r| r.instructions.iter().filter(|i| i.op.is_compute()).map(mpipe::ir::text::instr).collect())
        .collect();
    let interleaved = derive_text(&plan_text(2, 4, "interleaved(2)", None, None));
    let expected: Vec<Vec<String>> = interleaved
        .ranks
        .iter()
        .map(|r| r.instructions.iter().filter(|i| i.op.is_compute()).map(mpipe::ir::text::instr).collect())
        .collect();
    assert_eq!(compute, expected);
    assert_eq!(ir.regions.len(), 2);
}

/// The forward part of a rank's list: forwards and the activation transfers.
fn forward_part(ir: &PlanIr) -> Vec<Vec<String>> {
    ir.ranks
        .iter()
        .map(|r| {
            r.instructions
                .iter()
                .filter(|i| i.op == Op::Forward || (matches!(i.op, Op::Send | Op::Recv) && i.dir == Some(Dir::Act)))
                .map(mpipe::ir::text::instr)
                .collect()
        })
        .collect()
}

/// Which backward events exist depends only on what trains, never on the skeleton; the prefix
/// form's forward part is the same for a frozen and a trained encoder (Mpipe's own placement
/// takes the trained encoder's backward into account when it picks owners and places).
#[test]
fn backward_footprint_lemma() {
    for (p, m, schedule) in [
        (3, 6, "transpose, 1f1b"),
        (2, 4, "transpose, zbv"),
        (4, 8, "transpose, interleaved(2)"),
        (3, 4, "transpose(prefix), 1f1b"),
    ] {
        let frozen = derive_text(&plan_text(p, m, schedule, Some(true), None));
        let trained = derive_text(&plan_text(p, m, schedule, Some(false), None));
        if schedule.contains("prefix") {
            assert_eq!(forward_part(&frozen), forward_part(&trained), "{schedule} P={p} M={m}");
            assert_eq!(frozen.owner, trained.owner);
        }
        let enc_backwards = |ir: &PlanIr| {
            ir.ranks.iter().flat_map(|r| &r.instructions).filter(|i| i.op == Op::Backward && i.stage == Some(0)).count()
        };
        assert_eq!(enc_backwards(&frozen), 0, "a frozen encoder at the source has no backward at all");
        assert_eq!(enc_backwards(&trained), m as usize, "a trained encoder has one backward per forward");
    }
}

#[test]
fn derive_is_deterministic() {
    for path in common::files_under(&common::root().join("examples"), "mpipe")
        .into_iter()
        .filter(|p| !p.to_string_lossy().contains("/lib/"))
    {
        assert_eq!(derive_file(&path).to_json(), derive_file(&path).to_json(), "{}", path.display());
    }
}

#[test]
fn plan_json_round_trips_through_serde() {
    let ir = derive_text(&plan_text(3, 4, "transpose, 1f1b", Some(false), None));
    let json = ir.to_json();
    let back: PlanIr = serde_json::from_str(&json).unwrap();
    assert_eq!(back, ir);
    let value: serde_json::Value = serde_json::from_str(&json).unwrap();
    for field in ["format", "version", "source", "pipeline", "regions", "stages", "owner", "ranks"] {
        assert!(value.get(field).is_some(), "plan.json lacks `{field}`");
    }
    assert_eq!(value["format"], "mpipe-ir");
    assert_eq!(value["stages"][0]["ranks"], "all");
    // A stage is on one rank or on all of them: plan.json with neither or both is no IR.
    for (rank, ranks) in [(None, None), (Some(0), Some("all"))] {
        let mut broken = value.clone();
        broken["stages"][0]["rank"] = serde_json::json!(rank);
        broken["stages"][0]["ranks"] = serde_json::json!(ranks);
        let stage = broken["stages"][0].as_object_mut().unwrap();
        stage.retain(|_, v| !v.is_null());
        assert!(serde_json::from_value::<PlanIr>(broken).is_err(), "rank {rank:?}, ranks {ranks:?}");
    }
    let ops: std::collections::BTreeSet<&str> = value["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r["instructions"].as_array().unwrap())
        .map(|i| i["op"].as_str().unwrap())
        .collect();
    assert_eq!(
        ops.into_iter().collect::<Vec<_>>(),
        ["all_reduce", "backward", "forward", "optimizer_step", "recv", "send"]
    );
}

#[test]
fn schedule_csv_is_the_compute_order() {
    let ir = derive_text(&plan_text(2, 4, "dualpipev", None, None));
    let csv = mpipe::ir::csv::render(&ir).unwrap();
    assert_eq!(
        csv,
        "0F0,0F1,0F2,3F0,3I0,3W0,3F1,(0F3;3B1)OVERLAP_F_B,(3F2;0B0)OVERLAP_F_B,3B2,(3F3;0B1)OVERLAP_F_B,3B3,0I2,0W2,0I3,0W3\n\
         1F0,2F0,1F1,2F1,1F2,2B0,(2F2;1B0)OVERLAP_F_B,(1F3;2B1)OVERLAP_F_B,(2F3;1B1)OVERLAP_F_B,2B2,1B2,2I3,1I3,2W3,1W3\n"
    );
    assert!(mpipe::ir::csv::render(&derive_text(&plan_text(2, 4, "transpose, 1f1b", Some(true), None))).is_none());
}

// ---- the validator against broken plans ------------------------------------------------

fn problems(ir: &PlanIr) -> Vec<Problem> {
    mpipe::ir::validate::validate(ir).err().unwrap_or_default()
}

#[test]
fn validator_catches_a_dropped_receive() {
    let mut ir = derive_text(&plan_text(3, 4, "1f1b", None, None));
    let at = ir.ranks[1].instructions.iter().position(|i| i.op == Op::Recv).unwrap();
    ir.ranks[1].instructions.remove(at);
    let p = problems(&ir);
    let unreceived =
        p.iter().find(|m| matches!(m, Problem::NotReceived { peer: 1, .. })).expect("the send is unmatched");
    assert!(unreceived.to_string().ends_with(": no rank 1 receives it"), "the report says it: {unreceived}");
    assert!(p.iter().any(|m| matches!(m, Problem::BeforeInput { at, .. } if at.rank == 1)), "{p:?}");
}

#[test]
fn validator_catches_a_backward_before_its_forward() {
    let mut ir = derive_text(&plan_text(2, 4, "1f1b", None, None));
    let list = &mut ir.ranks[1].instructions;
    let f = list.iter().position(|i| i.op == Op::Forward && i.mb == Some(0)).unwrap();
    let b = list.iter().position(|i| i.op == Op::Backward && i.mb == Some(0)).unwrap();
    let backward = list.remove(b);
    list.insert(f, backward);
    let p = problems(&ir);
    assert!(p.iter().any(|m| matches!(m, Problem::BeforeForward { stage: 1, mb: 0, .. })), "{p:?}");
}

#[test]
fn validator_catches_a_backward_away_from_its_forward_without_its_input() {
    let text = plan_text(3, 4, "transpose(chunks = 2), 1f1b", Some(false), None)
        .replace("frozen = false;", "frozen = false; recompute = full;");
    let mut ir = derive_text(&text);
    // The receive of a moved chunk's input (the previous chunk's output).
    let (r, at) = ir
        .ranks
        .iter()
        .enumerate()
        .find_map(|(r, rank)| {
            let at = rank
                .instructions
                .iter()
                .position(|i| i.op == Op::Recv && i.dir == Some(Dir::Act) && i.stage == Some(0))?;
            Some((r, at))
        })
        .expect("a chunk's input is received for a backward");
    ir.ranks[r].instructions.remove(at);
    let p = problems(&ir);
    assert!(p.iter().any(|m| matches!(m, Problem::BeforeForward { stage: 1, .. })), "{p:?}");
}

#[test]
fn validator_catches_a_deadlock() {
    let mut ir = derive_text(&plan_text(2, 2, "gpipe", None, None));
    // Rank 0 waits for a gradient before sending the activation it depends on.
    let list = &mut ir.ranks[0].instructions;
    let send = list.iter().position(|i| i.op == Op::Send && i.mb == Some(0)).unwrap();
    let recv = list.iter().position(|i| i.op == Op::Recv && i.mb == Some(0)).unwrap();
    let r = list.remove(recv);
    list.insert(send, r);
    let p = problems(&ir);
    assert!(matches!(p.as_slice(), [Problem::Deadlock { waits }] if !waits.is_empty()), "{p:?}");
}

#[test]
fn validator_catches_a_missing_and_a_duplicate_forward() {
    let mut ir = derive_text(&plan_text(2, 2, "gpipe", None, None));
    let dup = ir.ranks[0].instructions[0].clone();
    ir.ranks[0].instructions.push(dup);
    let p = problems(&ir);
    assert!(p.iter().any(|m| matches!(m, Problem::Forwards { found: 2, .. })), "{p:?}");
    let mut ir = derive_text(&plan_text(3, 3, "transpose, 1f1b", Some(true), None));
    let owner = ir.owner["enc"][2];
    let list = &mut ir.ranks[owner as usize].instructions;
    let at = list.iter().position(|i| i.op == Op::Forward && i.stage == Some(0) && i.mb == Some(2)).unwrap();
    list.remove(at);
    let p = problems(&ir);
    assert!(p.iter().any(|m| matches!(m, Problem::Forwards { stage: 0, mb: 2, found: 0 })), "{p:?}");
}

// ---- properties ------------------------------------------------------------------------

fn skeleton_strategy() -> impl Strategy<Value = (String, u32)> {
    prop_oneof![
        Just(("gpipe".to_string(), 1)),
        Just(("1f1b".to_string(), 1)),
        (2u32..4).prop_map(|v| (format!("interleaved({v})"), v)),
        (2u32..4).prop_map(|v| (format!("zb1p({v})"), v)),
        Just(("zbv".to_string(), 2)),
        Just(("dualpipev".to_string(), 2)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn random_plans_validate_with_the_right_counts(
        p in 2u32..6,
        m in 1u32..14,
        (skeleton, v) in skeleton_strategy(),
        encoder in prop::option::of(any::<bool>()),
        owner in prop_oneof![Just(None), Just(Some("round_robin")), Just(Some("by_microbatch"))],
        prefix in any::<bool>(),
        sink in any::<bool>(),
        chunks in prop::option::of(1u32..5),
        recompute in any::<bool>(),
    ) {
        let rounds = (m / p).max(1);
        prop_assume!(!(skeleton.starts_with("interleaved") || skeleton.starts_with("zb1p")) || m % rounds == 0);
        prop_assume!(!(skeleton == "zbv" || skeleton == "dualpipev") || m >= 2 * p);
        let schedule = match encoder {
            Some(_) => {
                let fill = if prefix { "prefix" } else { "slack" };
                let chunks = chunks.map_or("auto".to_string(), |n| n.to_string());
                format!("transpose(fill = {fill}, chunks = {chunks}), {skeleton}")
            }
            None => skeleton.clone(),
        };
        let owner = encoder.and(owner);
        let sink = sink && encoder.is_some();
        let schedule = if sink { format!("{schedule}, transpose") } else { schedule };
        let mut text = plan_text(p, m, &schedule, encoder, owner).replace(&format!("layers = {};", p * 4), &format!("layers = {};", p * v * 2));
        if sink {
            text = text.replace("    llm = lm;\n}", "    llm = lm;\n    head = vit;\n}").replace("cut enc | llm;", "cut enc | llm | head;");
        }
        if recompute {
            // A trained encoder that recomputes may run its backwards away from its forwards.
            text = text.replace("frozen = false;", "frozen = false; recompute = full;");
        }
        let ir = derive_text(&text);
        // The encoder's chunks split its layers into consecutive runs: together, the whole
        // encoder once, so its work is conserved whatever the count.
        let enc_stages: Vec<&mpipe::ir::StageIr> = ir.stages.iter().filter(|s| s.region == "enc").collect();
        let n = enc_stages.len();
        if encoder.is_some() {
            // With owners by microbatch (the default) derive may run HyperParallel's prefix
            // form in place of the plan's own where it simulates faster (plan.txt's choices
            // say so): one whole-encoder stage then, whatever `chunks` asked.
            let prefix_instead = ir.regions[0].skeleton == Skeleton::whole_transpose(Fill::Prefix).to_string();
            let asked = if prefix_instead { Some(1) } else { chunks };
            prop_assert!(n >= 1 && asked.is_none_or(|c| c as usize == n));
            prop_assert_eq!(enc_stages[0].layers[0], 0);
            prop_assert!(enc_stages.windows(2).all(|w| w[0].layers[1] == w[1].layers[0] && w[0].layers[0] < w[0].layers[1]));
            prop_assert_eq!(enc_stages[n - 1].layers[1], ir.regions[0].layers[1]);
        }
        let stages = (p * v) as usize + n + usize::from(sink);
        prop_assert_eq!(ir.stages.len(), stages);
        let count = |op: Op| ir.ranks.iter().flat_map(|r| &r.instructions).filter(|i| i.op == op).count();
        let body = (p * v * m) as usize;
        let enc = (n + usize::from(sink)) * m as usize;
        prop_assert_eq!(count(Op::Forward), body + enc);
        let trained_enc = (usize::from(encoder == Some(false)) * n + usize::from(sink)) * m as usize;
        prop_assert_eq!(count(Op::Backward) + count(Op::BackwardInput), body + trained_enc);
        prop_assert_eq!(count(Op::BackwardInput), count(Op::BackwardWeight));
        prop_assert_eq!(count(Op::Send), count(Op::Recv));
        prop_assert_eq!(count(Op::OptimizerStep), p as usize);
        let back: PlanIr = serde_json::from_str(&ir.to_json()).unwrap();
        prop_assert!(back == ir, "plan.json round-trips through serde unchanged");
        prop_assert!(mpipe::ir::compact::read(&compact(&ir)).unwrap() == ir, "the compact plan reads back unchanged");
        if skeleton == "1f1b" && encoder.is_none() {
            // Megatron's formula: rank r runs min(P - r - 1, M) forwards before its first backward.
            for r in &ir.ranks {
                let compute: Vec<Op> = r.instructions.iter().filter(|i| i.op.is_compute()).map(|i| i.op).collect();
                let warm = compute.iter().position(|o| *o == Op::Backward).unwrap() as u32;
                let warmup = (p - r.rank - 1).min(m);
                prop_assert_eq!(warm, if warmup == m { m } else { warmup + 1 });
            }
        }
        if skeleton.starts_with("interleaved") && encoder.is_none() {
            // torch/Megatron: warmup = (v - 1)·per_round + 2·(P - r - 1), capped at M·v.
            let per_round = m / rounds;
            for r in &ir.ranks {
                let compute: Vec<Op> = r.instructions.iter().filter(|i| i.op.is_compute()).map(|i| i.op).collect();
                let warm = compute.iter().position(|o| *o == Op::Backward).unwrap() as u32;
                let formula = ((v - 1) * per_round + 2 * (p - r.rank - 1)).min(m * v);
                prop_assert_eq!(warm, if formula == m * v { m * v } else { formula + 1 });
            }
        }
    }
}

#[test]
fn a_sink_side_replicated_region() {
    // Encoder at the source, a trainable head at the sink: both seams (docs/algebra.md, "Regions and layouts") that
    // touch a replicated region (gather into the first stage, scatter from the last).
    let text = plan_text(3, 6, "transpose, 1f1b, transpose", Some(true), None)
        .replace("    llm = lm;\n}", "    llm = lm;\n    head = vit;\n}")
        .replace("cut enc | llm;", "cut enc | llm | head;");
    let (ir, listing) = lowered(&text);
    assert_eq!(ir.owner.len(), 2, "owner maps for both replicated regions");
    let sink = ir.stages.len() as u32 - 1;
    let count = |op: Op, stage: u32| {
        ir.ranks.iter().flat_map(|r| &r.instructions).filter(|i| i.op == op && i.stage == Some(stage)).count()
    };
    assert_eq!((count(Op::Forward, sink), count(Op::Backward, sink)), (6, 6));
    assert_eq!(count(Op::Backward, 0), 0, "the frozen encoder still has no backward");
    insta::assert_snapshot!("transpose_sink", listing);
}

// ---- the compact plan encoding ---------------------------------------------------------

fn compact(ir: &PlanIr) -> String {
    let mut out = Vec::new();
    mpipe::ir::compact::write(ir, &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

#[test]
fn compact_plans_read_back_as_the_ir() {
    let mut plans: Vec<PlanIr> = common::files_under(&common::root().join("examples"), "mpipe")
        .into_iter()
        .filter(|p| !p.to_string_lossy().contains("/lib/"))
        .map(|p| derive_file(&p))
        .collect();
    // Overlapped pairs, split backwards, replicated regions and their all-reduces.
    plans.push(derive_text(&plan_text(2, 4, "dualpipev", None, None)));
    plans.push(derive_text(&plan_text(3, 4, "transpose, 1f1b", Some(false), None)));
    // Chunks, next-step encodes with their prologue, and asynchronous gradient buckets.
    plans.push(derive_text(&plan_text(3, 4, "transpose(chunks = 2, lookahead = 1), 1f1b", Some(true), None)));
    plans.push(derive_text(&plan_text(3, 4, "transpose(chunks = 2), 1f1b", Some(false), None)));
    for ir in plans {
        let text = compact(&ir);
        assert_eq!(mpipe::ir::compact::read(&text).unwrap(), ir, "{}", ir.source);
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(value["format"], "mpipe-ir-compact");
        assert!(value["ranks"][0].get("instructions").is_none(), "the instructions are tokens");
    }
}

#[test]
fn a_damaged_compact_plan_is_an_error() {
    let text = compact(&derive_text(&plan_text(2, 4, "1f1b", None, None)));
    let fewer = text.replacen("\"count\": ", "\"count\": 1", 1);
    assert!(mpipe::ir::compact::read(&fewer).unwrap_err().contains("not its `count`"));
    let newer = text.replacen("\"version\": 1", "\"version\": 2", 1);
    assert!(mpipe::ir::compact::read(&newer).is_err());
    assert!(mpipe::ir::compact::read(&text.replacen("Fs", "Xs", 1)).is_err());
}

/// The bound: at most 20 bytes an instruction for P=32, M=256 interleaved(2).
#[test]
fn the_compact_plan_takes_at_most_20_bytes_an_instruction() {
    let ir = mpipe::driver::build(&mpipe::bench::plan(32, 256)).unwrap().derived.ir;
    let n = mpipe::outputs::instructions(&ir);
    let bytes = compact(&ir).len();
    assert!(bytes <= 20 * n, "{bytes} bytes for {n} instructions");
}

/// `plan_text` with `images` images a sequence, `tokens` encoder tokens in all.
fn with_images(text: String, tokens: u32, images: u32) -> String {
    text.replace("    image_tokens = 256;\n", &format!("    image_tokens = {tokens};\n    images = {images};\n"))
}

fn checked_plan(text: &str) -> mpipe::plan::Plan {
    let checked = mpipe::driver::compile("plan.mpipe", "plan.mpipe", text.as_bytes().to_vec(), &MemoryLoader::new());
    checked
        .plan
        .unwrap_or_else(|| panic!("{text}\n{:?}", checked.diagnostics.iter().map(|d| &d.message).collect::<Vec<_>>()))
}

/// A frozen encoder with 4 images a sequence: its first microbatches' encodes hold the body
/// back, so they are split across ranks and the first stage gathers the parts.
#[test]
fn a_split_encode_is_gathered_on_the_first_stage() {
    let (ir, listing) =
        lowered(&with_images(plan_text(4, 8, "transpose, 1f1b", Some(true), Some("by_microbatch")), 4096, 4));
    let parts = ir.ranks.iter().flat_map(|r| &r.instructions).filter(|i| i.images.is_some()).count();
    assert!(parts > 0, "the cost model finds a split that pays on this plan");
    assert_eq!(ir.pipeline.images, 4);
    insta::assert_snapshot!("transpose_split_images", listing);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Whatever derive splits, each encoder stage's work for each microbatch is done once: its
    /// parts' images tile the sequence's images, their costs sum to the whole encode's, and
    /// the plan validates and reads back from both encodings.
    #[test]
    fn image_parts_conserve_the_encoders_work(
        p in 2u32..5,
        m in 1u32..9,
        images in prop::sample::select(vec![1u32, 2, 4, 8]),
        frozen in any::<bool>(),
        chunks in prop::option::of(1u32..5),
        recompute in any::<bool>(),
    ) {
        let chunks = chunks.map_or("auto".to_string(), |n| n.to_string());
        let schedule = format!("transpose(chunks = {chunks}), 1f1b");
        let mut text = with_images(plan_text(p, m, &schedule, Some(frozen), None), 4096, images);
        if recompute {
            text = text.replace("frozen = false;", "frozen = false; recompute = full;");
        }
        let plan = checked_plan(&text);
        let ir = mpipe::driver::build(&plan).unwrap_or_else(|e| panic!("{:?}", e.problems)).derived.ir;
        let model = mpipe::cost::model::CostModel::new(&plan);
        let mut work: std::collections::BTreeMap<(Op, u32, u32), (u32, f64)> = Default::default();
        for i in ir.ranks.iter().flat_map(|r| &r.instructions).filter(|i| i.op.is_compute()) {
            let (s, mb) = (i.stage.unwrap(), i.mb.unwrap());
            if ir.stages[s as usize].region != "enc" {
                continue;
            }
            let l = ir.stages[s as usize].layers;
            let cost = mpipe::cost::compute_time(&model, i.op, l[0]..l[1], mb);
            let cell = work.entry((i.op, s, mb)).or_default();
            cell.0 += i.images.map_or(images, |[lo, hi]| hi - lo);
            cell.1 += cost * i.share(images);
            prop_assert!(i.images.is_none_or(|[lo, hi]| lo < hi && hi <= images));
        }
        for ((op, s, mb), (covered, cost)) in &work {
            let l = ir.stages[*s as usize].layers;
            let whole = mpipe::cost::compute_time(&model, *op, l[0]..l[1], *mb);
            prop_assert_eq!(*covered, images, "{:?} s{} mb{}", op, s, mb);
            prop_assert!((cost - whole).abs() <= 1e-9 * whole.max(1e-12), "{:?} s{} mb{}: {} against {}", op, s, mb, cost, whole);
        }
        prop_assert!(mpipe::ir::validate::validate(&ir).is_ok());
        let back: PlanIr = serde_json::from_str(&ir.to_json()).unwrap();
        prop_assert!(back == ir, "plan.json round-trips through serde unchanged");
        prop_assert!(mpipe::ir::compact::read(&compact(&ir)).unwrap() == ir, "the compact plan reads back unchanged");
    }
}
