//! The cost model and simulator: exact makespans on hand-computed cases, the textbook bubble
//! fractions, lower bounds, memory from the actual order, and the pictures.

use mpipe::ir::Op;
use mpipe::resolve::loader::MemoryLoader;
use mpipe::sim::report::Simulation;
use proptest::prelude::*;

/// A plan with pinned per-layer times (1 s forward, 2 s backward for the decoder; `enc` s per
/// encoder layer) and a link so fast that transfers are free: the unit-cost world of the
/// pipeline-parallelism papers.
fn unit_plan(ranks: u32, microbatches: u32, schedule: &str, layers_per_stage: u32, encoder: Option<f64>) -> String {
    let chunks = if schedule.contains("interleaved(2)") || schedule.contains("zbv") { 2 } else { 1 };
    let layers = ranks * chunks * layers_per_stage;
    // Each rank's work per microbatch is f = 1, b = 2 whatever the number of chunks.
    let per_layer = 1.0 / (layers_per_stage * chunks) as f64;
    let mut t = format!(
        "hardware ideal {{\n    peak_bf16 = 1000PFLOP/s;\n    hbm = 1000TB;\n    hbm_bandwidth = 1000000TB/s;\n    devices_per_node = 1024;\n    intra_node {{ alpha = 1ns; beta = 1000000000TB/s; }}\n    inter_node {{ alpha = 1ns; beta = 1000000000TB/s; }}\n}}\n\
         encoder vit {{ layers = 1; hidden = 64; ffn = 256; heads = 4; patch = 14; }}\n\
         decoder lm {{ layers = {layers}; hidden = 64; ffn = 256; heads = 4; vocab = 100; }}\n"
    );
    let llm = format!("llm = lm {{ forward_time = {per_layer}s; backward_time = {}s; }}", 2.0 * per_layer);
    match encoder {
        Some(e) => {
            t.push_str(&format!("model m {{\n    enc = vit {{ frozen = true; forward_time = {e}s; }}\n    {llm}\n}}\n"))
        }
        None => t.push_str(&format!("model m {{\n    {llm}\n}}\n")),
    }
    let tokens = if encoder.is_some() { " image_tokens = 64;" } else { "" };
    t.push_str(&format!("cluster {{ hardware = ideal; devices = {ranks}; pp = {ranks}; }}\nbatch {{ microbatches = {microbatches}; seq_len = 16;{tokens} }}\n"));
    t.push_str(if encoder.is_some() { "cut enc | llm;\n" } else { "cut llm;\n" });
    t.push_str(&format!("schedule {schedule};\n"));
    t
}

fn simulate(text: &str) -> (mpipe::derive::Derived, Simulation) {
    let checked = mpipe::check("plan.mpipe", "plan.mpipe", text.as_bytes().to_vec(), &MemoryLoader::new());
    let plan = checked
        .plan
        .unwrap_or_else(|| panic!("{text}\n{:?}", checked.diagnostics.iter().map(|d| &d.message).collect::<Vec<_>>()));
    let derived = mpipe::build::derive_checked(&plan).unwrap();
    let sim = mpipe::build::simulate(&plan, &derived);
    (derived, sim)
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-6 * b.max(1.0)
}

#[test]
fn gpipe_and_1f1b_hand_computed() {
    // f = 1, b = 2 per stage: (M + P − 1)(f + b).
    for (p, m) in [(2, 2), (3, 4), (4, 8)] {
        for schedule in ["gpipe", "1f1b"] {
            let (_, sim) = simulate(&unit_plan(p, m, schedule, 1, None));
            let expected = f64::from(m + p - 1) * 3.0;
            assert!(
                close(sim.report.step_time_s, expected),
                "{schedule} P={p} M={m}: {} != {expected}",
                sim.report.step_time_s
            );
            // Every rank busy M(f + b): the bubble is (P − 1)/(M + P − 1).
            let bubble = f64::from(p - 1) / f64::from(m + p - 1);
            assert!(
                close(sim.report.bubble_fraction, bubble),
                "{schedule}: bubble {} != {bubble}",
                sim.report.bubble_fraction
            );
        }
    }
}

#[test]
fn interleaving_divides_the_bubble_by_v() {
    for (p, m) in [(2, 4), (4, 8), (4, 12)] {
        let (_, plain) = simulate(&unit_plan(p, m, "1f1b", 2, None));
        let (_, inter) = simulate(&unit_plan(p, m, "interleaved(2)", 1, None));
        let work = f64::from(m) * 3.0;
        let bubble_plain = plain.report.step_time_s - work;
        let bubble_inter = inter.report.step_time_s - work;
        assert!(close(bubble_plain, f64::from(p - 1) * 3.0), "P={p} M={m}");
        assert!(
            close(bubble_inter, bubble_plain / 2.0),
            "P={p} M={m}: interleaved bubble {bubble_inter} vs {bubble_plain}"
        );
    }
}

#[test]
fn transpose_without_and_with_spill_hand_computed() {
    // P = 2, M = 2, 1F1B body of 9 s. The first microbatch's encode can never hide: the first
    // forward waits for it (e = 1 → 10 s). With e = 3 the encodes spill on both ranks (12 s).
    let (_, sim) = simulate(&unit_plan(2, 2, "transpose, 1f1b", 1, Some(1.0)));
    assert!(close(sim.report.step_time_s, 10.0), "{}", sim.report.step_time_s);
    let (_, sim) = simulate(&unit_plan(2, 2, "transpose, 1f1b", 1, Some(3.0)));
    assert!(close(sim.report.step_time_s, 12.0), "{}", sim.report.step_time_s);
    // P = 4, M = 8, e = 1: every encode but the first fits in slack (ranks wait 1, 2, 3 s for
    // their first activation and longer for their first gradient): one second exposed.
    let (_, sim) = simulate(&unit_plan(4, 8, "transpose, 1f1b", 1, Some(1.0)));
    assert!(close(sim.report.step_time_s, 11.0 * 3.0 + 1.0), "{}", sim.report.step_time_s);
}

#[test]
fn one_f_one_b_keeps_p_minus_r_microbatches() {
    let (_, sim) = simulate(&unit_plan(4, 8, "1f1b", 1, None));
    let live: Vec<u32> = sim.report.ranks.iter().map(|r| r.peak_live_microbatches).collect();
    assert_eq!(live, [4, 3, 2, 1]);
    let (_, sim) = simulate(&unit_plan(4, 8, "gpipe", 1, None));
    assert!(sim.report.ranks.iter().all(|r| r.peak_live_microbatches == 8), "GPipe keeps all M");
}

#[test]
fn real_costs_on_the_paper_plan() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/paper_small.mpipe")).unwrap();
    let (_, sim) = simulate(&text);
    let r = &sim.report;
    assert!(r.step_time_s >= r.lower_bound_s && r.lower_bound_s > 0.0);
    assert!(r.mfu > 0.05 && r.mfu < 1.0, "MFU {}", r.mfu);
    assert!(r.ranks.iter().all(|x| x.peak_memory_bytes > x.static_memory_bytes));
    assert!(r.owner_spill_s.unwrap() + 1e-9 >= r.owner_spill_bound_s.unwrap());
    for x in &r.ranks {
        assert!(close(x.spill_s, (x.encoder_s - x.warmup_slack_s).max(0.0)));
    }
}

#[test]
fn pictures() {
    let (derived, sim) = simulate(&unit_plan(2, 2, "transpose, 1f1b", 1, Some(1.0)));
    let svg = mpipe::sim::timeline::svg(&derived.ir, &sim.timeline, "transpose, 1f1b on 2 ranks");
    let doc = roxmltree::Document::parse(&svg).expect("timeline.svg is well-formed XML");
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let rects = doc.descendants().filter(|n| n.has_tag_name("rect")).count();
    let computes: usize =
        derived.ir.ranks.iter().map(|r| r.instructions.iter().filter(|i| i.op.is_compute()).count()).sum();
    assert!(rects >= computes, "one box per compute instruction");
    insta::assert_snapshot!("timeline_svg", svg);
    let trace: serde_json::Value =
        serde_json::from_str(&mpipe::sim::timeline::trace(&derived.ir, &sim.timeline, &sim.memory)).unwrap();
    let events = trace["traceEvents"].as_array().unwrap();
    let complete: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| {
            e["ph"] == "X" && e["name"].as_str().is_some_and(|n| n.starts_with("forward") || n.starts_with("backward"))
        })
        .collect();
    assert_eq!(complete.len(), computes);
    for e in &complete {
        assert!(
            e["ts"].is_number()
                && e["dur"].is_number()
                && e["pid"].is_number()
                && e["tid"].is_number()
                && e["name"].is_string()
        );
    }
    assert!(events.iter().any(|e| e["ph"] == "M" && e["name"] == "thread_name"));
    assert!(events.iter().any(|e| e["ph"] == "C"), "memory counters");
    let ascii = mpipe::sim::timeline::ascii(&derived.ir, &sim.timeline, 20);
    insta::assert_snapshot!("timeline_ascii", ascii);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn makespan_is_never_below_the_lower_bound(
        p in 2u32..5,
        m in 2u32..10,
        schedule in prop_oneof![Just("gpipe"), Just("1f1b"), Just("interleaved(2)"), Just("transpose, 1f1b"), Just("transpose(prefix), 1f1b")],
        e in 0.1f64..4.0,
    ) {
        prop_assume!(!schedule.starts_with("interleaved") || m % (m / p).max(1) == 0);
        let encoder = schedule.starts_with("transpose").then_some(e);
        let (derived, sim) = simulate(&unit_plan(p, m, schedule, 1, encoder));
        let r = &sim.report;
        prop_assert!(r.step_time_s + 1e-9 >= r.lower_bound_s, "{} < {}", r.step_time_s, r.lower_bound_s);
        prop_assert!(r.lower_bound_s + 1e-9 >= r.lower_bound_critical_path_s);
        let busy: f64 = derived.ir.ranks.iter().flat_map(|x| &x.instructions).filter(|i| i.op == Op::Forward).count() as f64;
        prop_assert!(busy > 0.0);
    }
}

#[test]
fn the_readme_picture_is_what_build_draws() {
    let root = env!("CARGO_MANIFEST_DIR");
    let key = "examples/paper_small.mpipe";
    let checked = mpipe::check(key, key, std::fs::read(format!("{root}/{key}")).unwrap(), &MemoryLoader::new());
    let plan = checked.plan.unwrap();
    let derived = mpipe::build::derive_checked(&plan).unwrap();
    let sim = mpipe::build::simulate(&plan, &derived);
    let svg = mpipe::sim::timeline::svg(&derived.ir, &sim.timeline, &derived.ir.source);
    let committed = std::fs::read_to_string(format!("{root}/docs/paper_small_timeline.svg")).unwrap();
    assert!(
        svg == committed,
        "docs/paper_small_timeline.svg is stale: run `mpipec build examples/paper_small.mpipe -o out && cp out/timeline.svg docs/paper_small_timeline.svg`"
    );
}

/// A profile in which every forward took 1 s and every backward 2 s (the first step twice as
/// long, as a warm-up is), receives 0.25 s at best: the measured per-layer costs give back
/// (M + P − 1)(f + b) plus the flights, and the warm-up step is left out of both numbers.
#[test]
fn measured_profiles_become_per_layer_costs() {
    use mpipe::sim::measured::{Profile, RankProfile, StepProfile, compare};
    let (derived, _) = simulate(&unit_plan(3, 4, "gpipe", 2, None));
    let ir = &derived.ir;
    let step = |rank: usize, scale: f64| StepProfile {
        seconds: scale * 20.0 + rank as f64,
        instructions: ir.ranks[rank]
            .instructions
            .iter()
            .map(|i| {
                scale
                    * match i.op {
                        Op::Forward => 1.0,
                        Op::Backward => 2.0,
                        Op::Recv => 0.25 + rank as f64,
                        _ => 0.0,
                    }
            })
            .collect(),
    };
    let profile = Profile {
        ranks: (0..3)
            .map(|r| RankProfile { rank: r as u32, steps: vec![step(r, 2.0), step(r, 1.0), step(r, 1.0)] })
            .collect(),
    };
    let c = compare(ir, &profile).unwrap();
    assert_eq!(c.steps, 2);
    assert!(close(c.measured, 22.0), "{c:?}");
    // GPipe: every forward of mb 0 waits for one flight per boundary, then the pipeline.
    let expected = 6.0 * 3.0 + 4.0 * 0.25;
    assert!(close(c.predicted, expected), "{} != {expected}", c.predicted);
    let bad = Profile { ranks: vec![] };
    assert!(compare(ir, &bad).is_err());
}

/// Above DETAILED_BOXES compute instructions the picture is bands: P=32, M=256 interleaved(2)
/// (about 97,000 instructions) stays a valid SVG under 2 MB with every rank drawn busy, its
/// chunks and idle in the legend, and a note of what was merged.
#[test]
fn large_pictures_are_bands() {
    let plan = mpipe::bench::plan(32, 256);
    let derived = mpipe::build::derive_checked(&plan).unwrap();
    let sim = mpipe::build::simulate(&plan, &derived);
    let svg = mpipe::sim::timeline::svg(&derived.ir, &sim.timeline, "bench");
    assert!(svg.len() < 2_000_000, "{} bytes", svg.len());
    let doc = roxmltree::Document::parse(&svg).expect("timeline.svg is well-formed XML");
    let texts: Vec<&str> = doc.descendants().filter_map(|n| n.text()).collect();
    assert!(texts.iter().any(|t| t.contains("merged into bands")), "the note says what was merged");
    for wanted in ["chunk 1", "idle"] {
        assert!(texts.contains(&wanted), "legend lacks `{wanted}`");
    }
    let bands: Vec<roxmltree::Node> =
        doc.descendants().filter(|n| n.has_tag_name("rect") && n.has_attribute("fill-opacity")).collect();
    assert!(bands.len() <= mpipe::sim::timeline::DETAILED_BOXES + 32, "{} bands", bands.len());
    let lanes: std::collections::BTreeSet<&str> = bands.iter().filter_map(|b| b.attribute("y")).collect();
    assert_eq!(lanes.len(), 32, "every rank has bands");
    let merged: usize = bands
        .iter()
        .filter_map(|b| b.children().find(|c| c.has_tag_name("title")).and_then(|t| t.text()))
        .flat_map(|t| {
            t.split(':')
                .next()
                .unwrap_or("")
                .split(", ")
                .map(|part| part.split(' ').next().unwrap_or("").parse::<usize>().unwrap_or(0))
        })
        .sum();
    let computes: usize =
        derived.ir.ranks.iter().map(|r| r.instructions.iter().filter(|i| i.op.is_compute()).count()).sum();
    assert_eq!(merged, computes, "the bands' tooltips account for every compute instruction");
}

#[test]
fn chunks_and_halves_are_told_apart() {
    let (derived, sim) = simulate(&unit_plan(2, 4, "zbv", 1, None));
    let svg = mpipe::sim::timeline::svg(&derived.ir, &sim.timeline, "zbv");
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let fill_of = |prefix: &str| -> std::collections::BTreeSet<String> {
        doc.descendants()
            .filter(|n| n.has_tag_name("rect"))
            .filter(|n| {
                n.children().any(|c| c.has_tag_name("title") && c.text().is_some_and(|t| t.starts_with(prefix)))
            })
            .filter_map(|n| n.attribute("fill").map(str::to_string))
            .collect()
    };
    let (input, weight) = (fill_of("backward_input"), fill_of("backward_weight"));
    assert!(!input.is_empty() && !weight.is_empty());
    assert!(input.is_disjoint(&weight), "backward_input {input:?} and backward_weight {weight:?} share a fill");
    assert!(fill_of("forward").iter().any(|f| f.starts_with("url(#")), "the V's second chunk is hatched");
    assert!(doc.descendants().any(|n| n.has_tag_name("pattern")), "hatches are defined");
    let ascii = mpipe::sim::timeline::ascii(&derived.ir, &sim.timeline, 40);
    assert!(ascii.contains('f') && ascii.contains('F'), "{ascii}");
}
