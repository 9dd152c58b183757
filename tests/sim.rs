//! The cost model and simulator: exact makespans on hand-computed cases, the textbook bubble
//! fractions, lower bounds, memory from the actual order, and the pictures.

use mpipe::cost::model::CostModel;
use mpipe::ir::Op;
use mpipe::plan::Plan;
use mpipe::resolve::loader::MemoryLoader;
use mpipe::sim::report::Simulation;
use proptest::prelude::*;

/// A plan with pinned per-layer times (1 s forward, 2 s backward for the decoder; `enc` s per
/// encoder layer) and a link so fast that transfers are free: the unit-cost world of the
/// pipeline-parallelism papers.
fn unit_plan(ranks: u32, microbatches: u32, schedule: &str, layers_per_stage: u32, encoder: Option<f64>) -> String {
    let chunks = if ["interleaved(2", "zb1p(2", "zbv"].iter().any(|s| schedule.contains(s)) { 2 } else { 1 };
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
    let checked = mpipe::driver::compile("plan.mpipe", "plan.mpipe", text.as_bytes().to_vec(), &MemoryLoader::new());
    let plan = checked
        .plan
        .unwrap_or_else(|| panic!("{text}\n{:?}", checked.diagnostics.iter().map(|d| &d.message).collect::<Vec<_>>()));
    let (derived, sim) = mpipe::driver::build(&plan).unwrap().into_simulated();
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

/// The unit plan of `unit_plan(2, 2, "1f1b", 1, Some(1.0))` with the encoder folded into
/// stage 0 (`cut enc + llm`), frozen or trainable.
fn folded_unit_plan(frozen: bool) -> String {
    unit_plan(2, 2, "1f1b(split = [2, 1])", 1, Some(1.0))
        .replace("cut enc | llm;", "cut enc + llm;")
        .replace("frozen = true;", &format!("frozen = {frozen};"))
}

#[test]
fn a_frozen_prefix_has_no_backward_and_keeps_no_activations() {
    // Stage 0 holds the encoder (f = 1) and one LLM layer (f = 1, b = 2); stage 1 one LLM layer.
    // Frozen, with nothing trainable before it, the encoder has no backward: rank 0 runs F0 [0, 2],
    // F1 [2, 4], B0 [5, 7] after rank 1's F0 [2, 3] and B0 [3, 5], rank 1 F1 [5, 6], B1 [6, 8],
    // rank 0 B1 [8, 10]. Charged a backward of 1 s for the encoder, it would end at 11 s.
    let (_, frozen) = simulate(&folded_unit_plan(true));
    assert!(close(frozen.report.step_time_s, 10.0), "{}", frozen.report.step_time_s);
    // Trainable, the encoder's backward is its forward (1 s) plus its weight gradient (1 s):
    // rank 0's backwards take 4 s, B0 [5, 9], B1 [9, 13].
    let (_, trainable) = simulate(&folded_unit_plan(false));
    assert!(close(trainable.report.step_time_s, 13.0), "{}", trainable.report.step_time_s);
    // Rank 0 keeps the LLM layer's activations of two microbatches, as the same pipeline without
    // an encoder does; the trainable encoder's come on top.
    let (_, llm) = simulate(&unit_plan(2, 2, "1f1b", 1, None));
    let kept = |s: &Simulation| s.report.ranks[0].peak_memory_bytes - s.report.ranks[0].static_memory_bytes;
    assert!(close(kept(&frozen), kept(&llm)), "{} != {}", kept(&frozen), kept(&llm));
    assert!(kept(&trainable) > kept(&llm));
    assert!(frozen.report.model_flops < trainable.report.model_flops);
}

/// Megatron-Core's default layout of the paper's model as a plan: the encoder with the first
/// LLM layers on stage 0, the 36 LLM layers split 5, 5, 5, 5, 4, 4, 4, 4. Rank 0 runs the 16
/// encodes forward only, so its busy time is 16 × (encode + five LLM layers' forward and
/// backward), and it keeps the activations of those five layers only.
#[test]
fn megatron_default_layout_is_charged_no_encoder_backward() {
    use mpipe::cost::Costs;
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/paper_small.mpipe"))
        .unwrap()
        .replace("cut enc | llm;", "cut enc + llm;")
        .replace("schedule transpose, 1f1b;", "schedule 1f1b(split = [32, 5, 5, 5, 4, 4, 4, 4]);")
        .replace("owner by_microbatch;", "");
    let checked = mpipe::driver::compile("plan.mpipe", "plan.mpipe", text.into_bytes(), &MemoryLoader::new());
    let plan = checked.plan.unwrap();
    let (_, sim) = mpipe::driver::build(&plan).unwrap().into_simulated();
    let model = mpipe::cost::model::CostModel::new(&plan);
    assert_eq!(model.backward_input(0..27, 0), 0.0);
    assert_eq!(model.activation_bytes(0..27, 0), 0.0);
    let busy: f64 = (0..16)
        .map(|mb| model.forward(0..32, mb) + model.backward_input(27..32, mb) + model.backward_weight(27..32, mb))
        .sum();
    let r = &sim.report;
    assert!(close(r.ranks[0].busy_s, busy), "{} != {busy}", r.ranks[0].busy_s);
    // Rank 0 is the bottleneck; the step adds only the last microbatch's trip through the
    // other ranks, less the backwards rank 0 overlaps with it (about 0.33 s here).
    assert!(r.step_time_s > busy && r.step_time_s < busy + 0.5, "{} vs busy {busy}", r.step_time_s);
    // 1F1B keeps 8 microbatches of the five LLM layers on rank 0, nothing of the encoder.
    let kept = 8.0 * model.activation_bytes(27..32, 0);
    let peak = r.ranks[0].peak_memory_bytes;
    assert!(close(peak, r.ranks[0].static_memory_bytes + kept), "{peak}");
    assert!(peak < 80.0 * (1u64 << 30) as f64, "{peak}");
}

#[test]
fn real_costs_on_the_paper_plan() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/paper_small.mpipe")).unwrap();
    let (_, sim) = simulate(&text);
    let r = &sim.report;
    assert!(r.step_time_s >= r.lower_bound_s && r.lower_bound_s > 0.0);
    assert!(r.mfu > 0.05 && r.mfu < 1.0, "MFU {}", r.mfu);
    assert!(r.ranks.iter().all(|x| x.peak_memory_bytes > x.static_memory_bytes));
    let (floor, relaxation) = (r.transpose_floor_s.unwrap(), r.transpose_relaxation_s.unwrap());
    assert!(relaxation <= floor + 1e-9, "the relaxation {relaxation} is the weaker bound, floor {floor}");
    assert!(r.step_time_s + 1e-9 >= floor, "no one-step schedule beats the floor {floor}: {}", r.step_time_s);
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

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// The encoder folded into stage 0 under any skeleton: frozen, it adds its forward to the
    /// step's work and nothing else; trainable, also its backward (input and weight halves).
    #[test]
    fn a_folded_encoder_costs_its_forward_only_when_frozen(
        p in 2u32..5,
        m in 2u32..13,
        skeleton in prop_oneof![Just("gpipe"), Just("1f1b"), Just("interleaved(2)"), Just("zb1p(2)"), Just("zbv")],
        e in 0.1f64..3.0,
        frozen in any::<bool>(),
    ) {
        let chunks = if skeleton == "1f1b" || skeleton == "gpipe" { 1 } else { 2 };
        prop_assume!(chunks == 1 || m % p == 0);
        prop_assume!(skeleton != "zbv" || m >= 2 * p);
        let mut split = vec!["1"; (p * chunks) as usize];
        split[0] = "2";
        let split = format!("split = [{}]", split.join(", "));
        let schedule = match skeleton.strip_suffix(')') {
            Some(open) => format!("{open}, {split})"),
            None => format!("{skeleton}({split})"),
        };
        let text = unit_plan(p, m, &schedule, 1, Some(e))
            .replace("cut enc | llm;", "cut enc + llm;")
            .replace("frozen = true;", &format!("frozen = {frozen};"));
        let (_, sim) = simulate(&text);
        let busy: f64 = sim.report.ranks.iter().map(|r| r.busy_s).sum();
        let encoder = if frozen { e } else { 3.0 * e };
        let expected = f64::from(m) * (f64::from(p) * 3.0 + encoder);
        prop_assert!(close(busy, expected), "{skeleton}: {busy} != {expected}");
    }
}

#[test]
fn the_readme_picture_is_what_build_draws() {
    let root = env!("CARGO_MANIFEST_DIR");
    let key = "examples/paper_small.mpipe";
    let checked =
        mpipe::driver::compile(key, key, std::fs::read(format!("{root}/{key}")).unwrap(), &MemoryLoader::new());
    let plan = checked.plan.unwrap();
    let (derived, sim) = mpipe::driver::build(&plan).unwrap().into_simulated();
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
    let times = |rank: usize, scale: f64| -> Vec<f64> {
        ir.ranks[rank]
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
            .collect()
    };
    // The thread's CPU seconds: half the wall clock's.
    let step = |rank: usize, scale: f64| StepProfile {
        seconds: scale * 20.0 + rank as f64,
        instructions: times(rank, scale),
        cpu: times(rank, scale / 2.0),
        host_speed: Some(scale * (3.0 + rank as f64)),
    };
    let profile = Profile {
        ranks: (0..3)
            .map(|r| RankProfile { rank: r as u32, steps: vec![step(r, 2.0), step(r, 1.0), step(r, 1.0)] })
            .collect(),
        host_speed_kernel: Some("k".into()),
    };
    let c = compare(ir, &profile).unwrap();
    assert_eq!(c.steps, 2);
    assert!(close(c.measured, 22.0), "{c:?}");
    // GPipe: every forward of mb 0 waits for one flight per boundary, then the pipeline.
    let expected = 6.0 * 3.0 + 4.0 * 0.25;
    assert!(close(c.predicted, expected), "{} != {expected}", c.predicted);
    // A step's compute instructions over the ranks: 3 ranks, 4 microbatches, 1 + 2 s each.
    assert!(close(c.compute, 36.0) && c.compute_cpu.is_some_and(|t| close(t, 18.0)), "{c:?}");
    // The host's speed kernel: the median over every rank's steps after the warm-up (3, 4, 5 s).
    let speed = |kernel: &str, seconds| mpipe::profile::HostSpeed { kernel: kernel.into(), seconds };
    assert_eq!(c.host_speed, Some(speed("k", 4.0)));
    // Against a profile's: the host ran twice as slow; a different kernel says nothing.
    assert_eq!(speed("k", 2.0).ratio(&speed("k", 4.0)), Some(2.0));
    assert_eq!(speed("k2", 2.0).ratio(&speed("k", 4.0)), None);
    // A runtime that gave no CPU seconds: the wall clock's alone; one rank without the host's
    // speed: none.
    let mut older = profile;
    older.ranks[1].steps.iter_mut().for_each(|s| (s.cpu.clear(), s.host_speed = None).1);
    let c = compare(ir, &older).unwrap();
    assert!(close(c.compute, 36.0) && c.compute_cpu.is_none() && c.host_speed.is_none(), "{c:?}");
    // Each instruction at its median over the steps: a forward of rank 0 that ran 2 s long, a
    // different one in each of three steps, leaves it at 36 s (every step's sum was 38 s).
    let mut slow = older;
    slow.ranks[0].steps.push(step(0, 1.0));
    slow.ranks.iter_mut().skip(1).for_each(|r| r.steps.push(step(r.rank as usize, 1.0)));
    let forwards: Vec<usize> =
        (0..ir.ranks[0].instructions.len()).filter(|&k| ir.ranks[0].instructions[k].op == Op::Forward).collect();
    for (n, s) in slow.ranks[0].steps[1..].iter_mut().enumerate() {
        s.instructions[forwards[n]] += 2.0;
    }
    let c = compare(ir, &slow).unwrap();
    assert!(close(c.compute, 36.0), "{c:?}");
    let bad = Profile { ranks: vec![], host_speed_kernel: None };
    assert!(compare(ir, &bad).is_err());
}

/// A profile of the unit plan's decoder `lm` (two layers: `lm:first`, `lm:last`) with hand
/// numbers: `layers` its `layers` object, `extra` further top-level fields.
fn unit_profile(layers: &str, extra: &str) -> String {
    host_profile(layers, "", extra)
}

/// `unit_profile` with `host` added to its `device` (`, "cores": 2, "threads": 1`).
fn host_profile(layers: &str, host: &str, extra: &str) -> String {
    format!(
        r#"{{"format": 1, "date": "2026-12-04T00:00:00Z",
 "device": {{"type": "cpu", "name": "ideal test machine", "count": 2, "backend": "gloo"{host}}},
 "versions": {{"torch": "test"}},
 "model": {{"source": "test", "parts": [{{"name": "llm", "arch": "lm", "layers": 2}}]}},
 "shapes": {{"micro_batch_size": 1, "seq_len": 16}},
 "layers": {layers}{extra}}}"#
    )
}

fn profiled(profile: &str, sets: &[(String, String)]) -> mpipe::driver::Compiled {
    let plan = unit_plan(2, 1, "1f1b", 1, None).replace("pp = 2;", "pp = 2; profile = \"p.json\";");
    profiled_plan(&plan, profile, sets)
}

fn profiled_plan(plan: &str, profile: &str, sets: &[(String, String)]) -> mpipe::driver::Compiled {
    let loader = MemoryLoader::new().with("plan.mpipe", plan).with("p.json", profile);
    mpipe::driver::load("plan.mpipe", "plan.mpipe", plan.as_bytes().to_vec(), &loader).check(&loader, sets)
}

/// The step of 1F1B on 3 ranks, 3 microbatches, f = 1 and b = 2 a stage, free transfers and
/// no runtime costs, its profile taken on a CPU of `host` (`, "cores": C, "threads": T`), `dp`
/// replicas.
fn shared_1f1b(host: &str, dp: u32) -> f64 {
    profiled_1f1b(host, dp, 0.0, 0.0, 0.0)
}

/// [`shared_1f1b`] with `grad_bytes` of gradients a layer (one layer a stage), the dp ring's
/// α `alpha`, its bandwidth unbounded, and `message_cpu` seconds of the other threads' CPU a
/// message received.
fn profiled_1f1b(host: &str, dp: u32, grad_bytes: f64, alpha: f64, message_cpu: f64) -> f64 {
    delivered_1f1b(host, dp, grad_bytes, alpha, message_cpu, 0.0)
}

/// [`profiled_1f1b`] with each message delivered `delivery` seconds after its send (the
/// profile's point-to-point α).
fn delivered_1f1b(host: &str, dp: u32, grad_bytes: f64, alpha: f64, message_cpu: f64, delivery: f64) -> f64 {
    let plan = profiled_1f1b_plan(host, dp, grad_bytes, alpha, message_cpu, delivery);
    let (_, sim) = mpipe::driver::build(&plan).unwrap().into_simulated();
    sim.report.step_time_s
}

/// The plan [`delivered_1f1b`] simulates.
fn profiled_1f1b_plan(host: &str, dp: u32, grad_bytes: f64, alpha: f64, message_cpu: f64, delivery: f64) -> Plan {
    let layer = format!(
        r#"{{"forward_s": 1, "backward_input_s": 9, "backward_weight_s": 9, "backward_s": 2, "optimizer_s": 0, "output_bytes": 0, "grad_bytes": {grad_bytes}}}"#
    );
    let layers = format!(r#"{{"lm:first": {layer}, "lm": {layer}, "lm:last": {layer}}}"#);
    let extra = format!(
        r#", "runtime": {{"instruction_s": 0, "compute_s": 0, "send_s": 0, "recv_s": 0, "message_cpu_s": {message_cpu}}},
 "p2p": {{"alpha_s": {delivery}, "beta_bytes_per_s": 1e30}}, "all_reduce": {{"dp": {{"alpha_s": {alpha}, "beta_bytes_per_s": 1e30}}}}"#
    );
    let profile = host_profile(&layers, host, &extra).replace(r#""layers": 2"#, r#""layers": 3"#);
    let plan = unit_plan(3, 3, "1f1b", 1, None)
        .replace("devices = 3; pp = 3;", &format!("devices = {}; pp = 3; dp = {dp}; profile = \"p.json\";", 3 * dp));
    let checked = profiled_plan(&plan, &profile, &[]);
    checked.plan.unwrap_or_else(|| panic!("{:?}", checked.diagnostics))
}

/// A step's compute as a profile gives it: 3 ranks, 3 microbatches, f = 1 and b = 2 a stage,
/// 3 · 3 · 3 = 27 s; with the profile's kernels twice as long (a host running at half the
/// speed), 54 s, and the step of a device each (M + P − 1)(f + b) = 15 s becomes 30 s, on the
/// same lists.
#[test]
fn a_profile_kernels_scaled_scale_the_compute() {
    let plan = profiled_1f1b_plan("", 1, 0.0, 0.0, 0.0, 0.0);
    let built = mpipe::driver::build(&plan).unwrap();
    let compute = |plan: &Plan| mpipe::sim::costs::compute_seconds(&CostModel::new(plan), &built.derived.ir);
    assert!(close(compute(&plan), 27.0), "{}", compute(&plan));
    let mut slower = plan.clone();
    let profile = plan.cluster.profile.as_ref().unwrap().kernels_scaled(2.0);
    slower.cluster.profile = Some(std::sync::Arc::new(profile));
    assert!(close(compute(&slower), 54.0), "{}", compute(&slower));
    let step = mpipe::sim::report::simulate(&built.derived, &CostModel::new(&slower)).report.step_time_s;
    assert!(close(built.evaluate().report.step_time_s, 15.0) && close(step, 30.0), "{step}");
}

/// The host's speed over the profile's run (`speed_trace`): each rank's compute goes through a
/// stretch of the trace drawn for it, and the step is the median of the draws. A trace one
/// second round, half at the typical speed and half at a third of it, doubles every
/// instruction of a whole number of seconds (f = 1, b = 2) wherever a draw enters it: the step
/// of a device each, 15 s, becomes 30 s, the step of kernels twice as long. A trace all at the
/// typical speed leaves it at 15 s.
#[test]
fn a_profile_speed_trace_runs_the_step_through_the_hosts_slow_stretches() {
    let plan = profiled_1f1b_plan("", 1, 0.0, 0.0, 0.0, 0.0);
    let built = mpipe::driver::build(&plan).unwrap();
    let step = |trace: Vec<(f64, f64)>| {
        let mut traced = plan.clone();
        let profile = plan.cluster.profile.as_ref().unwrap();
        let with = mpipe::profile::Profile { speed_trace: vec![trace; 3], ..(**profile).clone() };
        traced.cluster.profile = Some(std::sync::Arc::new(with));
        mpipe::sim::report::simulate(&built.derived, &CostModel::new(&traced)).report.step_time_s
    };
    assert!(close(step(vec![(0.5, 1.0), (0.5, 3.0)]), 30.0), "{}", step(vec![(0.5, 1.0), (0.5, 3.0)]));
    assert!(close(step(vec![(0.3, 1.0), (2.0, 1.0)]), 15.0));
    // Stretches longer than an instruction: each draw's step between the fast and the slow
    // host's, the same on every run.
    let mixed = step(vec![(4.0, 1.0), (4.0, 3.0)]);
    assert!((15.0..=45.0).contains(&mixed) && mixed == step(vec![(4.0, 1.0), (4.0, 3.0)]), "{mixed}");
}

/// The runtime flattens an all-reduce instruction's gradients into buckets of at most 25 MiB,
/// one call each: a ring of 2 replicas pays 2(k − 1)·α = 2α a call. A stage of 10 MiB of
/// gradients is one call, one of 30 MiB two (α = 1 s, bandwidth unbounded).
#[test]
fn a_reduction_costs_one_call_per_bucket() {
    let mib = 1024.0 * 1024.0;
    let free = profiled_1f1b("", 2, 0.0, 0.0, 0.0);
    for (grads, calls) in [(10.0, 1.0), (30.0, 2.0)] {
        let step = profiled_1f1b("", 2, grads * mib, 1.0, 0.0);
        assert!(close(step - free, 2.0 * calls), "{grads} MiB: {step} against {free}");
    }
}

/// Ranks that are processes on a CPU host share its cores, each working rank at
/// min(1, cores / working) of its speed. On 2 cores, by hand (F and B a rank's forward and
/// backward, the rate of each working rank in brackets):
/// 0–1 r0 F0 (1); 1–2 r0 F1, r1 F0 (1); 2–3.5 r0 F2, r1 F1, r2 F0 (2/3); 3.5–5.5 r2 B0 (1);
/// 5.5–6.5 r1 B0, r2 F1 (1); 6.5–7.5 r1 B0 ends, r2 B1 (1); 7.5–9 r0 B0, r1 F2, r2 B1 (2/3:
/// r1 and r2 end, r0 has 1 left); 9–10.5 r0 B0, r1 B1, r2 F2 (2/3: r0 and r2 end, r1 has 1
/// left); 10.5–11.5 r1 B1, r2 B2 (1); 11.5–12.5 r0 B1, r2 B2 (1); 12.5–13.5 r0 B1, r1 B2 (1);
/// 13.5–14.5 r1 B2; 14.5–16.5 r0 B2. A device each (3 cores, or a profile without its host)
/// keeps (M + P − 1)(f + b) = 15; on 1 core every second is one rank's work, 3 · 3 · 3 = 27;
/// 2 replicas on 4 cores are 2 cores a replica.
#[test]
fn ranks_on_one_cpu_host_share_its_cores() {
    let cases = [
        (r#", "cores": 2, "threads": 1"#, 1, 16.5),
        (r#", "cores": 3, "threads": 1"#, 1, 15.0),
        ("", 1, 15.0),
        (r#", "cores": 1, "threads": 1"#, 1, 27.0),
        (r#", "cores": 4, "threads": 2"#, 1, 16.5),
        (r#", "cores": 4, "threads": 1"#, 2, 16.5),
    ];
    for (host, dp, expected) in cases {
        let step = shared_1f1b(host, dp);
        assert!(close(step, expected), "{host} dp {dp}: {step} != {expected}");
    }
}

/// A host whose scheduler balances its cores only every `balance_s`: a rank that wakes while
/// its waker works alone on a core is put on that core, and the other core takes one of the
/// two only at the next balancing. Every 1000 s, never within the step: rank 1 wakes at 1 s
/// onto rank 0's core, rank 2 onto theirs, and the second core stays idle, one core's worth
/// of work, 3 · 3 · 3 = 27 s (16.5 s where the idle core takes a process at once).
#[test]
fn an_idle_core_takes_a_waiting_rank_only_when_the_scheduler_balances() {
    let never = shared_1f1b(r#", "cores": 2, "threads": 1, "balance_s": 1000"#, 1);
    assert!(close(never, 27.0), "{never}");
    let at_once = shared_1f1b(r#", "cores": 2, "threads": 1, "balance_s": 0"#, 1);
    assert!(close(at_once, 16.5), "{at_once}");
    let often = shared_1f1b(r#", "cores": 2, "threads": 1, "balance_s": 1"#, 1);
    assert!(often > 16.5 && often < 27.0, "{often}");
}

/// Where the profile measured the host's time slice the ranks take turns on the cores instead
/// of sharing them evenly, and no core idles while a rank waits for one: on one core the step
/// is still its 27 s of work whatever the slice, and with a core each the ranks never wait,
/// (M + P − 1)(f + b) = 15.
#[test]
fn ranks_taking_turns_keep_the_cores_busy() {
    for slice in ["0.5", "1.5", "1000"] {
        let one_core = shared_1f1b(&format!(r#", "cores": 1, "threads": 1, "slice_s": {slice}"#), 1);
        assert!(close(one_core, 27.0), "slice {slice}: {one_core}");
        let core_each = shared_1f1b(&format!(r#", "cores": 3, "threads": 1, "slice_s": {slice}"#), 1);
        assert!(close(core_each, 15.0), "slice {slice}: {core_each}");
    }
}

/// On a host whose cores the ranks share, the CPU a process's other threads spend on each
/// message it receives needs a core too: on 1 core every second is one rank's work, the 27 s
/// of [`ranks_on_one_cpu_host_share_its_cores`] and 0.5 s for each of the 12 messages (3 to
/// rank 0, 6 to rank 1, 3 to rank 2). With a core each (3 cores) those threads have cores of
/// their own and the step stays (M + P − 1)(f + b) = 15.
#[test]
fn on_shared_cores_a_message_received_costs_its_threads_cpu() {
    let one_core = profiled_1f1b(r#", "cores": 1, "threads": 1"#, 1, 0.0, 0.0, 0.5);
    assert!(close(one_core, 27.0 + 12.0 * 0.5), "{one_core}");
    let core_each = profiled_1f1b(r#", "cores": 3, "threads": 1"#, 1, 0.0, 0.0, 0.5);
    assert!(close(core_each, 15.0), "{core_each}");
}

/// A message's delivery to a rank waiting for it is counted once. With a core each the rank
/// waits for it: by hand the step's critical path is F0 on ranks 0, 1 and 2, B0 on ranks 2
/// and 1, F2 on rank 1, F2 and B2 on rank 2, B2 on ranks 1 and 0 (3 · 1 + 2 · 2 + 1 + 1 +
/// 3 · 2 = 15 s) with six deliveries of 0.25 s between them. Where the ranks share
/// one core the receive is charged the receiving threads' 0.5 s, which the delivery's 0.25 s
/// is part of: the step stays 27 + 12 · 0.5 s.
#[test]
fn a_message_is_delivered_once() {
    let core_each = delivered_1f1b(r#", "cores": 3, "threads": 1"#, 1, 0.0, 0.0, 0.5, 0.25);
    assert!(close(core_each, 15.0 + 6.0 * 0.25), "{core_each}");
    let one_core = delivered_1f1b(r#", "cores": 1, "threads": 1"#, 1, 0.0, 0.0, 0.5, 0.25);
    assert!(close(one_core, 27.0 + 12.0 * 0.5), "{one_core}");
}

/// A profile names its host's cores and threads together, whole numbers above 0, and the
/// interval between its scheduler's balancings and its time slice as 0 or more seconds.
#[test]
fn a_profile_host_needs_cores_and_threads() {
    let layers = r#"{"lm:first": {"forward_s": 1, "backward_input_s": 1, "backward_weight_s": 1, "output_bytes": 0, "grad_bytes": 0}}"#;
    for (host, field) in [
        (r#", "cores": 2"#, "device.threads"),
        (r#", "cores": 0, "threads": 1"#, "device.cores"),
        (r#", "cores": 2, "threads": 1, "balance_s": -1"#, "device.balance_s"),
        (r#", "cores": 2, "threads": 1, "slice_s": "1 ms""#, "device.slice_s"),
    ] {
        let checked = profiled(&host_profile(layers, host, ""), &[]);
        let e = checked.diagnostics.iter().find(|d| d.code.as_str() == "E0211").expect("E0211");
        assert!(format!("{e:?}").contains(field), "{e:?}");
    }
}

/// Measured layers, transfers and the runtime's per-instruction costs in place of the pinned
/// times, by hand: rank 0 forwards (1 + compute 0.2 + instruction 0.1) and posts its send
/// (0.3 + 0.1), which lands 0.5 later; rank 1 receives (0.4 + 0.1), forwards (3 + 0.3),
/// backwards in one pass (4 + 0.3), sends (0.4) and steps (0.01 + 0.1); rank 0's receive ends
/// at the gradient's flight (0.5) and costs 0.5, then its backward (2 + 0.3) and step (0.11).
/// Each compute instruction also pays its op's call once (`call_s`: 0.01 a forward, 0.02 a
/// fused backward).
#[test]
fn a_profile_gives_each_layer_kind_and_instruction_its_measured_cost() {
    let layer = |f: f64, b: f64| {
        format!(
            r#"{{"forward_s": {f}, "backward_input_s": 9, "backward_weight_s": 9, "backward_s": {b}, "optimizer_s": 0.01, "output_bytes": 0, "grad_bytes": 0}}"#
        )
    };
    let layers = format!(r#"{{"lm:first": {}, "lm:last": {}}}"#, layer(1.0, 2.0), layer(3.0, 4.0));
    let extra = r#", "runtime": {"instruction_s": 0.1, "compute_s": 0.2, "send_s": 0.3, "recv_s": 0.4,
 "call_s": {"forward_s": 0.01, "backward_s": 0.02, "backward_input_s": 0.03, "backward_weight_s": 0.04}},
 "p2p": {"alpha_s": 0.5, "beta_bytes_per_s": 1e9}"#;
    let checked = profiled(&unit_profile(&layers, extra), &[]);
    // W0002 only: one microbatch for two ranks.
    let codes: Vec<_> = checked.diagnostics.iter().map(|d| d.code.as_str()).collect();
    assert_eq!(codes, ["W0002"]);
    let plan = checked.plan.as_ref().unwrap();
    let (_, sim) = mpipe::driver::build(plan).unwrap().into_simulated();
    let rank1_grad_sent = 1.3 + 0.4 + 0.5 + 0.5 + 3.3 + 4.3 + 0.4;
    let calls = 2.0 * 0.01 + 2.0 * 0.02;
    let expected = rank1_grad_sent + 0.5 + 0.5 + 2.3 + 0.11 + calls;
    assert!(close(sim.report.step_time_s, expected), "{} != {expected}", sim.report.step_time_s);
    // A host at another speed runs the calls at it too, as it does the layers.
    let slower = plan.cluster.profile.as_ref().unwrap().kernels_scaled(2.0);
    assert!(close(slower.runtime.unwrap().call.backward_input_s, 0.06), "{slower:?}");
}

/// A layer kind the profile lacks keeps the pinned (or analytic) time, and says so (W0006); a
/// truncated file or a field of the wrong kind is E0211 naming the file and the field.
#[test]
fn a_partial_or_broken_profile_is_reported_by_file_and_field() {
    let one = r#"{"lm:first": {"forward_s": 1, "backward_input_s": 1, "backward_weight_s": 1, "output_bytes": 0, "grad_bytes": 0}}"#;
    let checked = profiled(&unit_profile(one, ""), &[]);
    let w = checked.diagnostics.iter().find(|d| d.code.as_str() == "W0006").expect("W0006");
    assert!(format!("{w:?}").contains("`lm:last`"), "{w:?}");
    assert!(checked.plan.is_some());
    let full = unit_profile(one, "");
    for (text, field) in [
        (full[..full.len() / 2].to_string(), "ends early"),
        (full.replace(r#""forward_s": 1"#, r#""forward_s": "fast""#), "layers.lm:first.forward_s"),
        (full.replace(r#""format": 1"#, r#""format": 7"#), "field `format`"),
        (full.replace(r#""date""#, r#""speed_trace": [[[0.001, 1.2], [0.002, 0]]], "date""#), "speed_trace[0][1]"),
        (full.replace(r#""date""#, r#""host_speed": 0.002, "date""#), "host_speed"),
        (
            full.replace(
                r#""date""#,
                r#""runtime": {"instruction_s": 0, "compute_s": 0, "send_s": 0, "recv_s": 0, "call_s": {"forward_s": -1}}, "date""#,
            ),
            "runtime.call_s.forward_s",
        ),
        (
            full.replace(
                r#""date""#,
                r#""runtime": {"instruction_s": 0, "compute_s": 0, "send_s": 0, "recv_s": 0, "send_wait_s": -0.001}, "date""#,
            ),
            "runtime.send_wait_s",
        ),
        (full.replace(r#""date""#, r#""host_speed": {"kernel": "k", "seconds": 0}, "date""#), "host_speed.seconds"),
        (full.replace(r#""date""#, r#""host_speed": {"seconds": 0.002}, "date""#), "host_speed.kernel"),
    ] {
        let checked = profiled(&text, &[]);
        let e = checked.diagnostics.iter().find(|d| d.code.as_str() == "E0211").expect("E0211");
        let shown = format!("{e:?}");
        assert!(shown.contains("p.json") && shown.contains(field), "{shown}");
        assert!(checked.plan.is_none());
    }
}

// ---- transpose against its peers --------------------------------------------------------

fn example_plan(name: &str, sets: &[(String, String)]) -> mpipe::plan::Plan {
    let root = env!("CARGO_MANIFEST_DIR");
    let key = format!("examples/{name}");
    let bytes = std::fs::read(format!("{root}/{key}")).unwrap();
    let mut loader = MemoryLoader::new();
    for lib in std::fs::read_dir(format!("{root}/examples/lib")).unwrap() {
        let path = lib.unwrap().path();
        let name = format!("examples/lib/{}", path.file_name().unwrap().to_string_lossy());
        loader.insert(&name, &std::fs::read_to_string(&path).unwrap());
    }
    let checked = mpipe::driver::load(&key, &key, bytes, &loader).check(&loader, sets);
    let messages: Vec<&String> = checked.diagnostics.iter().map(|d| &d.message).collect();
    checked.plan.unwrap_or_else(|| panic!("{key} {sets:?}: {messages:?}"))
}

/// Compute times from the cost model, transfers free.
struct ComputeOnly<'a>(&'a mpipe::cost::model::CostModel<'a>, &'a mpipe::ir::PlanIr);

impl mpipe::ir::interpret::Durations for ComputeOnly<'_> {
    fn instruction(&self, _: u32, i: &mpipe::ir::Instr) -> f64 {
        match (i.stage, i.mb) {
            (Some(s), Some(mb)) if i.op.is_compute() => {
                let l = self.1.stages[s as usize].layers;
                mpipe::cost::compute_time(self.0, i.op, l[0]..l[1], mb) * i.share(self.1.pipeline.images)
            }
            _ => 0.0,
        }
    }
    fn transfer(&self, _: u32, _: u32, _: &mpipe::ir::Instr) -> f64 {
        0.0
    }
}

/// Each example with an encoder, and the paper plan over the image lengths the README sweeps,
/// as written, with lookahead and with its images split across ranks: never slower than its round-robin map or the prefix form on
/// the same body, and its lists, re-timed with compute only, never end after the step reported.
#[test]
fn transpose_is_never_slower_than_round_robin_or_the_prefix_form() {
    let set = |k: &str, v: &str| vec![(k.to_string(), v.to_string())];
    let mut cases = vec![
        ("vlm_zero_bubble.mpipe", vec![]),
        ("paper_small.mpipe", set("schedule", "transpose(lookahead = 1), 1f1b")),
        ("paper_small.mpipe", set("batch.images", "4")),
        ("vlm_zero_bubble.mpipe", set("batch.images", "3")),
    ];
    for tokens in [1024, 4096, 16384, 32768, 65536] {
        cases.push(("paper_small.mpipe", set("batch.image_tokens", &tokens.to_string())));
    }
    // Trainable, recomputed: its backwards run away from their forwards.
    cases.push(("paper_512.mpipe", vec![]));
    for (name, sets) in cases {
        let plan = example_plan(name, &sets);
        let (derived, sim) = mpipe::driver::build(&plan).unwrap().into_simulated();
        let step = sim.report.step_time_s;
        for peer in mpipe::explore::compare::compare(&plan, step) {
            if ["transpose-round-robin", "prefix"].contains(&peer.name.as_str()) {
                assert!(
                    step <= peer.step_time_s * (1.0 + 1e-9),
                    "{name} {sets:?}: {step} s, {} {} s",
                    peer.name,
                    peer.step_time_s
                );
            }
        }
        let model = mpipe::cost::model::CostModel::new(&plan);
        let retimed = mpipe::ir::interpret::run(&derived.ir, &ComputeOnly(&model, &derived.ir)).unwrap().makespan();
        assert!(retimed <= step * (1.0 + 1e-9), "{name} {sets:?}: re-timed {retimed} s after the reported {step} s");
    }
}

/// Wherever the LLM alone idles at least as long as the encoder works (the relaxation bound is
/// the LLM alone), a lookahead plan's step is within 5% of the LLM alone's compute-only step,
/// over image lengths, microbatch counts and pipeline depths.
#[test]
fn lookahead_hides_the_encoder_where_the_idle_time_holds_it() {
    let mut fitting = 0;
    for (tokens, microbatches, pp) in [(8192, 8, 8), (16384, 16, 8), (32768, 16, 8), (16384, 32, 8), (16384, 16, 4)] {
        let sets: Vec<(String, String)> = [
            ("schedule", "transpose(lookahead = 1), 1f1b".to_string()),
            ("batch.image_tokens", tokens.to_string()),
            ("batch.microbatches", microbatches.to_string()),
            ("cluster.pp", pp.to_string()),
            ("cluster.devices", pp.to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let plan = example_plan("paper_small.mpipe", &sets);
        let (_, sim) = mpipe::driver::build(&plan).unwrap().into_simulated();
        let r = &sim.report;
        let (alone, relaxation) = (r.transpose_floor_s.unwrap(), r.transpose_relaxation_s.unwrap());
        if relaxation <= alone * (1.0 + 1e-9) {
            fitting += 1;
            assert!(r.step_time_s <= 1.05 * alone, "{sets:?}: {} s against the LLM alone's {alone} s", r.step_time_s);
        }
    }
    assert!(fitting >= 4, "the idle time holds the encoder in {fitting} of 5 plans only");
}

/// Above DETAILED_BOXES compute instructions the picture is bands: P=32, M=256 interleaved(2)
/// (about 97,000 instructions) stays a valid SVG under 2 MB with every rank drawn busy, its
/// chunks and idle in the legend, and a note of what was merged.
#[test]
fn large_pictures_are_bands() {
    let plan = mpipe::bench::plan(32, 256);
    let (derived, sim) = mpipe::driver::build(&plan).unwrap().into_simulated();
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

// ---- how a training stack runs a layer: per-op recompute, eager kernels, sharded weights ----

/// Llama 3 8B on eight H100s, one microbatch of two 8192-token sequences, as torchtitan runs it
/// on one node; `extra` goes into the part and `cluster` into the cluster.
fn llama_8b(extra: &str, cluster: &str) -> mpipe::plan::Plan {
    let text = format!(
        "use std::models::llama3_8b;\nuse std::hardware::h100_sxm;\nmodel m {{ llm = llama3_8b {{ {extra} }} }}\n\
         cluster {{ hardware = h100_sxm; devices = 8; pp = 1; dp = 8; {cluster} }}\n\
         batch {{ microbatches = 1; micro_batch_size = 2; seq_len = 8192; }}\ncut llm;\nschedule 1f1b;\n"
    );
    let checked = mpipe::driver::compile("plan.mpipe", "plan.mpipe", text.into_bytes(), &MemoryLoader::new());
    checked.plan.unwrap_or_else(|| panic!("{:?}", checked.diagnostics.iter().map(|d| &d.message).collect::<Vec<_>>()))
}

#[test]
fn per_op_recompute_runs_every_second_product_again_and_keeps_the_others() {
    let plan = llama_8b("recompute = ops;", "");
    let model = mpipe::cost::model::CostModel::new(&plan);
    let c = model.layer(1, 0);
    // torchtitan's order: wq, wk, wv, wo, w1, w3, w2; the second, fourth and sixth run again.
    let again: Vec<f64> = c.recomputed.iter().map(|g| g.n).collect();
    assert_eq!(again, [1024.0, 4096.0, 14336.0]);
    // Kept: the input, the outputs of wq, wv, w1, w2 and of the attention core, in bf16.
    let tokens = 2.0 * 8192.0;
    let kept = 2.0 * tokens * (4096.0 + 4096.0 + 1024.0 + 14336.0 + 4096.0 + 4096.0);
    assert!(close(c.activations, kept), "{} != {kept}", c.activations);
    // Every second product is about a third of the layer's product FLOPs: less than full
    // recompute, more than Megatron's selective (the attention core alone).
    let time = |r: &str| {
        let plan = llama_8b(&format!("recompute = {r};"), "");
        mpipe::cost::Costs::backward(&mpipe::cost::model::CostModel::new(&plan), 1..2, 0)
    };
    assert!(
        time("none") < time("ops") && time("ops") < time("full"),
        "{} {} {}",
        time("none"),
        time("ops"),
        time("full")
    );
}

#[test]
fn eager_kernels_move_what_each_operation_reads_and_writes() {
    let elementwise = |fused: bool| {
        let plan = llama_8b("", &format!("fused_kernels = {fused};"));
        mpipe::cost::model::CostModel::new(&plan).layer(1, 0).elementwise / (2.0 * 8192.0)
    };
    let (h, q, kv, ffn) = (4096.0, 4096.0, 1024.0, 14336.0);
    // Fused: norms and adds read and write the hidden state (10 tensors), SwiGLU reads 2, writes 1.
    assert!(close(elementwise(true), 2.0 * (10.0 * h + 3.0 * ffn)));
    // Eager: two fp32 RMSNorms (36 bytes an element), the adds (12), rotary on queries and keys
    // (20), keys and values copied to every head, the attention output made contiguous, SiLU
    // and the product apart (10).
    let eager = 2.0 * 36.0 * h + 12.0 * h + 20.0 * (q + kv) + 4.0 * (kv + q) + 4.0 * q + 10.0 * ffn;
    assert!(close(elementwise(false), eager), "{} != {eager}", elementwise(false));
}

#[test]
fn sharded_weights_wait_only_for_what_the_layers_do_not_hide() {
    // Pinned compute: so long that every collective but the first gather and the last
    // reduce-scatter hides behind it, and so short that none does.
    let exposed = |seconds: f64| {
        let plan = llama_8b(
            &format!("forward_time = {seconds}s; backward_time = {}s;", 2.0 * seconds),
            "shard_weights = true;",
        );
        let model = mpipe::cost::model::CostModel::new(&plan);
        let layers: Vec<u64> = (0..32).collect();
        let link = model.dp_link(0);
        let gather = |l: u64| model.gather(2.0 * model.device_params(l..l + 1), 8, link);
        let reduce = |l: u64| model.gather(4.0 * model.device_params(l..l + 1), 8, link);
        let all = layers.iter().map(|&l| gather(l) + reduce(l)).sum::<f64>() + (0..31).map(gather).sum::<f64>();
        (model.sharded_collectives(&layers, link), gather(0) + reduce(0), all)
    };
    let (long, ends, _) = exposed(1000.0);
    assert!(close(long, ends), "{long} != {ends}");
    let (short, _, all) = exposed(1e-9);
    assert!(close(short, all), "{short} != {all}");
    // Weights, gradients and Adam state all divided over dp; the optimizer steps its share.
    let model_of = |cluster: &str| llama_8b("", cluster);
    let (sharded, zero1, whole) =
        (model_of("shard_weights = true;"), model_of("distributed_optimizer = true;"), model_of(""));
    let (s, z, w) = (
        mpipe::cost::model::CostModel::new(&sharded),
        mpipe::cost::model::CostModel::new(&zero1),
        mpipe::cost::model::CostModel::new(&whole),
    );
    let params = w.device_params(0..32);
    assert!(close(s.static_bytes(0..32), 18.0 * params / 8.0));
    assert!(close(z.static_bytes(0..32), (6.0 + 12.0 / 8.0) * params));
    assert!(close(s.optimizer_time(0..32), w.optimizer_time(0..32) / 8.0));
    assert!(close(z.optimizer_time(0..32), s.optimizer_time(0..32)));
}

/// A message waits for its sending thread while the sender goes on computing, at most the
/// profile's `send_wait_s`: on 1F1B on 3 ranks with a core each (f = 1, b = 2, 15 s a step
/// without), the critical path crosses four messages whose senders compute next (two forwards
/// filling the pipeline, two backwards draining it), so a wait of w adds 4w. A wait longer
/// than the senders' work ends where their threads wait for a message: 10 s adds 8, not 40.
#[test]
fn a_profile_send_wait_delays_messages_whose_sender_computes_on() {
    let plan = profiled_1f1b_plan(r#", "cores": 3, "threads": 1"#, 1, 0.0, 0.0, 0.0, 0.0);
    let built = mpipe::driver::build(&plan).unwrap();
    let step = |wait: f64| {
        let mut waiting = plan.clone();
        let profile = plan.cluster.profile.as_ref().unwrap();
        let runtime = profile.runtime.map(|r| mpipe::profile::Runtime { send_wait_s: wait, ..r });
        waiting.cluster.profile = Some(std::sync::Arc::new(mpipe::profile::Profile { runtime, ..(**profile).clone() }));
        mpipe::sim::report::simulate(&built.derived, &CostModel::new(&waiting)).report.step_time_s
    };
    for (wait, expected) in [(0.0, 15.0), (0.25, 16.0), (0.5, 17.0), (10.0, 23.0)] {
        assert!(close(step(wait), expected), "a wait of {wait} s: {}", step(wait));
    }
}
