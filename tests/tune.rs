//! sweep and tune: ranges, the falsifier's monotonicity, spill exactly where E_r > w_r, the
//! tuner against brute force, never worse than the input, and a tuned plan that checks clean.

use mpipe::explore::sweep;
use mpipe::explore::tune::{self, Objective, Overrides};
use mpipe::resolve::loader::MemoryLoader;
use mpipe::sim::report::Report;

fn evaluate(text: &str, overrides: &Overrides) -> Option<Report> {
    let loader = MemoryLoader::new();
    let checked =
        mpipe::driver::load("plan.mpipe", "plan.mpipe", text.as_bytes().to_vec(), &loader).check(&loader, overrides);
    let plan = checked.plan?;
    let report = mpipe::driver::build(&plan).ok()?.into_simulated().1.report;
    report.over_memory.is_empty().then_some(report)
}

fn example(name: &str) -> String {
    std::fs::read_to_string(format!("{}/examples/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

fn set(pairs: &[(&str, &str)]) -> Overrides {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

#[test]
fn ranges() {
    assert_eq!(sweep::parse_vary("batch.image_tokens=1024..8192*2").unwrap().values, ["1024", "2048", "4096", "8192"]);
    assert_eq!(sweep::parse_vary("cluster.pp=2..8+2").unwrap().values, ["2", "4", "6", "8"]);
    assert_eq!(sweep::parse_vary("owner=by_microbatch, round_robin").unwrap().values, ["by_microbatch", "round_robin"]);
    assert!(sweep::parse_vary("batch.image_tokens=10..1*2").is_err());
    assert!(sweep::parse_vary("batch.image_tokens=1..10*1").is_err());
    assert!(sweep::parse_vary("nokey").is_err());
    let grid = sweep::grid(&[sweep::parse_vary("a=1,2").unwrap(), sweep::parse_vary("b=x,y,z").unwrap()]).unwrap();
    assert_eq!(grid.len(), 6);
    assert_eq!(grid[1], set(&[("a", "1"), ("b", "y")]));
}

#[test]
fn more_image_tokens_the_falsifier() {
    let text = example("paper_small.mpipe");
    let tokens = sweep::parse_vary("batch.image_tokens=1024..65536*2").unwrap();
    let mut last = 0.0;
    let mut spilled_before = false;
    for t in &tokens.values {
        let r = evaluate(&text, &set(&[("batch.image_tokens", t)])).unwrap();
        // More encoder work never makes the step faster.
        assert!(r.step_time_s + 1e-9 >= last, "{t}: {} < {last}", r.step_time_s);
        last = r.step_time_s;
        // Spill appears exactly where a rank's encoder work exceeds its warmup slack, and
        // once it appears it stays.
        for x in &r.ranks {
            assert_eq!(x.spill_s > 0.0, x.encoder_s > x.warmup_slack_s, "{t}: rank {}", x.rank);
        }
        let spills = r.ranks.iter().any(|x| x.spill_s > 0.0);
        assert!(spills || !spilled_before, "{t}: spill vanished");
        spilled_before |= spills;
    }
    assert!(spilled_before, "the sweep reaches the point where the encoder no longer fits");
    // The encoder-free pipeline does not care how many image tokens there are.
    let llm_only = example("llm_1f1b.mpipe");
    let times: Vec<f64> = ["0", "4096", "65536"]
        .iter()
        .map(|t| evaluate(&llm_only, &set(&[("batch.image_tokens", t)])).unwrap().step_time_s)
        .collect();
    assert!(times.windows(2).all(|w| w[0] == w[1]), "{times:?}");
}

#[test]
fn the_tuner_finds_what_brute_force_finds() {
    let text = example("llm_1f1b.mpipe").replace("devices = 8;", "devices = 4;").replace("dp = 2;", "dp = 1;");
    let plan = mpipe::driver::compile("plan.mpipe", "plan.mpipe", text.as_bytes().to_vec(), &MemoryLoader::new())
        .plan
        .unwrap();
    let outcome = tune::search(tune::space(&plan, 4), Objective::StepTime, 0, |o| evaluate(&text, o), |_, _, _| {});
    assert!(outcome.exhaustive);
    // Brute force, written out independently: every pp·dp·tp of 4 devices under every skeleton.
    let mut best = f64::INFINITY;
    for (pp, dp, tp) in [(2, 2, 1), (2, 1, 2), (4, 1, 1)] {
        for skeleton in ["1f1b", "interleaved(2)", "interleaved(4)", "zb1p(2)", "zbv", "dualpipev"] {
            for mbs in ["1", "2", "4"] {
                let global = 8; // microbatches 8 × micro_batch_size 1 × dp 1
                let m = global / (dp * mbs.parse::<u32>().unwrap());
                if m == 0 || global % (dp * mbs.parse::<u32>().unwrap()) != 0 {
                    continue;
                }
                let o = set(&[
                    ("cluster.devices", "4"),
                    ("cluster.pp", &pp.to_string()),
                    ("cluster.dp", &dp.to_string()),
                    ("cluster.tp", &tp.to_string()),
                    ("batch.micro_batch_size", mbs),
                    ("batch.microbatches", &m.to_string()),
                    ("schedule", skeleton),
                ]);
                if let Some(r) = evaluate(&text, &o) {
                    best = best.min(r.step_time_s);
                }
            }
        }
    }
    let found = outcome.ranked[0].report.step_time_s;
    assert!((found - best).abs() < 1e-9 * best, "tuner {found} vs brute force {best}");
}

#[test]
fn the_best_is_never_worse_than_the_input_and_writes_a_clean_plan() {
    for name in ["paper_small.mpipe", "llm_1f1b.mpipe"] {
        let text = example(name);
        let plan = mpipe::driver::compile("plan.mpipe", "plan.mpipe", text.as_bytes().to_vec(), &MemoryLoader::new())
            .plan
            .unwrap();
        let input = evaluate(&text, &Vec::new()).unwrap();
        let outcome = tune::search(
            tune::space(&plan, plan.cluster.devices),
            Objective::StepTime,
            0,
            |o| evaluate(&text, o),
            |_, _, _| {},
        );
        let best = &outcome.ranked[0];
        assert!(best.report.step_time_s <= input.step_time_s + 1e-12, "{name}");
        let tuned = mpipe::edit::apply(&text, &best.overrides).unwrap();
        let checked =
            mpipe::driver::compile("tuned.mpipe", "tuned.mpipe", tuned.as_bytes().to_vec(), &MemoryLoader::new());
        assert!(
            checked.diagnostics.iter().all(|d| !d.is_error()),
            "{name}: {:?}",
            checked.diagnostics.iter().map(|d| &d.message).collect::<Vec<_>>()
        );
        assert_eq!(mpipe::fmt::format(&tuned).unwrap(), tuned, "the tuned plan is canonical");
        assert!(tuned.contains("// the modality encoder") || !name.starts_with("paper"), "comments survive");
        let again = evaluate(&tuned, &Vec::new()).unwrap();
        assert!(
            (again.step_time_s - best.report.step_time_s).abs() < 1e-9,
            "the written plan is the plan that was scored"
        );
    }
}

#[test]
fn sampled_batches_are_seeded_and_drawn_from_the_distribution() {
    let text = example("vlm_zero_bubble.mpipe");
    let loader = MemoryLoader::new().with(
        "lib/siglip_tokens.csv",
        &std::fs::read_to_string(format!("{}/examples/lib/siglip_tokens.csv", env!("CARGO_MANIFEST_DIR"))).unwrap(),
    );
    let plan = mpipe::driver::compile("plan.mpipe", "plan.mpipe", text.into_bytes(), &loader).plan.unwrap();
    assert_eq!(plan.batch.histogram.len(), 4);
    let a = mpipe::explore::samples::draw(&plan, 8, 7);
    assert_eq!(a, mpipe::explore::samples::draw(&plan, 8, 7));
    assert_ne!(a, mpipe::explore::samples::draw(&plan, 8, 8));
    let support: Vec<u64> = plan.batch.histogram.iter().map(|(t, _)| *t).collect();
    assert!(a.iter().flatten().all(|t| support.contains(t)));
    let built = mpipe::driver::build(&plan).unwrap();
    let s = mpipe::explore::samples::static_schedule(&plan, &built.derived, &a);
    assert!(s.p50_s <= s.p95_s && s.p95_s <= s.max_s && s.samples == 8);
}

#[test]
fn no_speedup_spans_two_device_counts() {
    let text = example("llm_1f1b.mpipe");
    let plan = mpipe::driver::compile("plan.mpipe", "plan.mpipe", text.as_bytes().to_vec(), &MemoryLoader::new())
        .plan
        .unwrap();
    let input = evaluate(&text, &Vec::new()).unwrap();
    // On its own device count the input plan is a candidate and the reference of speedups.
    assert!(tune::space(&plan, plan.cluster.devices)[0].is_empty());
    assert!(tune::reference(&plan, &input, plan.cluster.devices).is_some());
    // On another, every candidate runs on that count and nothing is set against the input.
    let other = plan.cluster.devices / 2;
    let space = tune::space(&plan, other);
    assert!(!space.is_empty());
    assert!(space.iter().all(|o| o.contains(&("cluster.devices".to_string(), other.to_string()))));
    assert!(tune::reference(&plan, &input, other).is_none());
}

/// Each phase of a sampled search shows its real total from its first step and ends full:
/// a bar that counted to 600, jumped to 2400 and stopped at 302 is what this replaces.
#[test]
fn progress_shows_each_phase_total_from_its_start_and_ends_full() {
    let report = evaluate(&example("llm_1f1b.mpipe"), &Vec::new()).unwrap();
    // 40 × 25 synthetic candidates, past the exhaustive limit; step time is a bowl around (17, 9).
    let candidates: Vec<Overrides> =
        (0..40).flat_map(|a| (0..25).map(move |b| set(&[("a", &a.to_string()), ("b", &b.to_string())]))).collect();
    assert!(candidates.len() > tune::EXHAUSTIVE);
    let mut calls: Vec<(&'static str, usize, usize)> = Vec::new();
    let outcome = tune::search(
        candidates,
        Objective::StepTime,
        0,
        |o| {
            let x = |k: usize| o[k].1.parse::<f64>().unwrap();
            let mut r = report.clone();
            r.step_time_s = 1.0 + (x(0) - 17.0).powi(2) + (x(1) - 9.0).powi(2);
            Some(r)
        },
        |phase, done, total| calls.push((phase, done, total)),
    );
    assert!(!outcome.exhaustive);
    let mut phases: Vec<Vec<(&str, usize, usize)>> = Vec::new();
    for call in calls {
        match phases.last_mut() {
            Some(phase) if phase.last().is_some_and(|last| last.1 < last.2) => phase.push(call),
            _ => phases.push(vec![call]),
        }
    }
    assert_eq!(phases[0][0].0, "sampling");
    assert!(phases.len() >= 2 && phases[1..].iter().all(|p| p[0].0 == "refining"), "{:?}", phases.len());
    for phase in &phases {
        let (name, _, total) = phase[0];
        assert!(phase.iter().all(|c| c.0 == name && c.2 == total), "one total per phase: {phase:?}");
        assert_eq!(phase.iter().map(|c| c.1).collect::<Vec<_>>(), (1..=total).collect::<Vec<_>>(), "{name}");
    }
    assert_eq!(outcome.ranked[0].overrides, set(&[("a", "17"), ("b", "9")]));
}
