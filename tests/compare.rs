//! `sim --compare`: every baseline says what it is, runs the plan's own body skeleton, and the
//! Megatron baselines are the layouts Megatron builds, charged as the cost model charges a plan.

use mpipe::explore::compare::{self, baselines, body_skeleton};
use mpipe::plan::Plan;
use mpipe::resolve::loader::MemoryLoader;

/// Checks `text` as if it sat in examples/, beside the files the examples import.
fn plan(text: &str) -> Plan {
    let lib = format!("{}/examples/lib", env!("CARGO_MANIFEST_DIR"));
    let mut loader = MemoryLoader::new();
    for entry in std::fs::read_dir(&lib).unwrap() {
        let path = entry.unwrap().path();
        let key = format!("lib/{}", path.file_name().unwrap().to_string_lossy());
        loader.insert(&key, &std::fs::read_to_string(&path).unwrap());
    }
    let checked = mpipe::driver::compile("plan.mpipe", "plan.mpipe", text.as_bytes().to_vec(), &loader);
    checked.plan.unwrap_or_else(|| panic!("{:?}", checked.diagnostics.iter().map(|d| &d.message).collect::<Vec<_>>()))
}

fn example(name: &str) -> String {
    std::fs::read_to_string(format!("{}/examples/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

fn step(plan: &Plan) -> f64 {
    compare::step_time(plan).expect("the plan derives")
}

#[test]
fn every_baseline_says_what_it_is_and_runs_the_plans_body() {
    let small = example("paper_small.mpipe");
    let interleaved = small.replace("schedule transpose, 1f1b;", "schedule transpose, interleaved(2);");
    let zbv = example("vlm_zero_bubble.mpipe");
    for text in [&small, &interleaved, &zbv] {
        let p = plan(text);
        let body = body_skeleton(&p).unwrap();
        let found = baselines(&p);
        let names: Vec<&str> = found.iter().map(|b| b.name).collect();
        assert_eq!(
            names,
            ["megatron-even", "megatron-style", "disttrain-like", "prefix", "hyperparallel", "transpose-round-robin"],
            "{body}"
        );
        for b in &found {
            assert!(!b.description.is_empty() && !b.description.contains('\n'), "{}: {}", b.name, b.description);
            if b.name != "hyperparallel" {
                assert_eq!(body_skeleton(&b.plan), Some(body), "{} under {body}", b.name);
            }
        }
    }
}

#[test]
fn a_hand_balancer_is_never_slower_than_megatrons_default() {
    for text in [example("paper_small.mpipe"), example("vlm_zero_bubble.mpipe"), example("paper_512.mpipe")] {
        let p = plan(&text);
        let found = baselines(&p);
        let time = |name: &str| step(&found.iter().find(|b| b.name == name).unwrap().plan);
        assert!(time("megatron-style") <= time("megatron-even") + 1e-12, "{}", p.cluster.devices);
    }
}

/// The paper's plan laid out as Megatron-Core does with no layout flag is the layout of issue 14
/// written by hand: 27 encoder layers and 5 LLM layers on stage 0, the other 31 LLM layers
/// 5, 5, 5, 4, 4, 4, 4; and the baseline's step is that plan's.
#[test]
fn megatron_even_is_the_default_layout_written_as_a_plan() {
    let small = example("paper_small.mpipe");
    let found = baselines(&plan(&small));
    let even = &found.iter().find(|b| b.name == "megatron-even").unwrap().plan;
    assert_eq!(even.schedule.len(), 1);
    assert_eq!(even.schedule[0].split.as_deref(), Some(&[32, 5, 5, 5, 4, 4, 4, 4][..]));
    let by_hand = plan(
        &small
            .replace("cut enc | llm;", "cut enc + llm;")
            .replace("schedule transpose, 1f1b;", "schedule 1f1b(split = [32, 5, 5, 5, 4, 4, 4, 4]);")
            .replace("owner by_microbatch;", ""),
    );
    assert_eq!(step(even), step(&by_hand));
}
