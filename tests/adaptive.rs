//! `owner adaptive`: a plan placed again for each batch's image tokens is never slower than the
//! static plan on any batch, its step is what the interpreter times, and on mixes bounded by
//! the plan's `image_tokens` it gains what it gains (printed with `--nocapture`).

mod common;

use mpipe::adaptive::{self, Fallback};
use mpipe::algebra::OwnerSpec;
use mpipe::cost::model::CostModel;
use mpipe::explore::samples;
use mpipe::plan::Plan;

fn example(name: &str, owner: &str) -> Plan {
    edited(name, &[("owner by_microbatch;", &format!("owner {owner};"))])
}

/// An example with each (from, to) of its text replaced.
fn edited(name: &str, edits: &[(&str, &str)]) -> Plan {
    let key = format!("examples/{name}");
    let mut text = std::fs::read_to_string(common::root().join(&key)).unwrap();
    for (from, to) in edits {
        assert!(text.contains(from), "{from}");
        text = text.replace(from, to);
    }
    let loader = common::repo_loader(&["examples"]);
    let compiled = mpipe::driver::compile(&key, &key, text.into_bytes(), &loader);
    compiled.plan.unwrap_or_else(|| panic!("{:?}", compiled.diagnostics.iter().map(|d| &d.message).collect::<Vec<_>>()))
}

fn mix(plan: &Plan, histogram: &[(u64, f64)]) -> Plan {
    let mut p = plan.clone();
    p.batch.histogram = histogram.to_vec();
    p
}

#[test]
fn the_language_takes_owner_adaptive_and_derives_the_static_plan_as_by_microbatch() {
    let adaptive = example("paper_small.mpipe", "adaptive");
    assert_eq!(adaptive.owner, Some(OwnerSpec::Adaptive));
    let by_microbatch = example("paper_small.mpipe", "by_microbatch");
    let a = mpipe::driver::build(&adaptive).unwrap();
    let b = mpipe::driver::build(&by_microbatch).unwrap();
    assert_eq!(a.derived.ir.ranks, b.derived.ir.ranks);
    assert!(a.resolved.describe().iter().any(|l| l.ends_with("owner: adaptive")), "{:?}", a.resolved.describe());
}

#[test]
fn adaptive_is_never_slower_than_static_and_its_step_is_what_the_interpreter_times() {
    let plan = mix(&example("paper_small.mpipe", "adaptive"), &[(32768, 2.0), (16384, 3.0), (4096, 3.0), (0, 1.0)]);
    let built = mpipe::driver::build(&plan).unwrap();
    let mut placed = 0;
    for tokens in samples::draw(&plan, 12, 7) {
        let batch = adaptive::for_batch(&built, &tokens);
        assert!(batch.step_s() <= batch.static_s, "{tokens:?}: {} > {}", batch.step_s(), batch.static_s);
        let p = adaptive::batch_of(&plan, &tokens);
        let model = CostModel::new(&p);
        assert_eq!(batch.static_s, adaptive::makespan(&built.derived, &model));
        match (&batch.derived, &batch.fallback) {
            (Some(derived), None) => {
                placed += 1;
                assert!(mpipe::ir::validate::validate(&derived.ir).is_ok());
                assert_eq!(adaptive::makespan(derived, &model), batch.step_s());
                let simulated = mpipe::sim::report::simulate(derived, &model).report;
                assert_eq!(simulated.step_time_s, batch.step_s());
                // What does not depend on image sizes stays: stages, their ranks, the body up
                // to which microbatch runs at each of its places.
                assert_eq!(derived.ir.stages, built.derived.ir.stages);
                let mut place = vec![0; batch.order.len()];
                for (k, &mb) in batch.order.iter().enumerate() {
                    place[mb as usize] = k as u32;
                }
                let body = |ir: &mpipe::ir::PlanIr, place: &dyn Fn(u32) -> u32| -> Vec<Vec<_>> {
                    let first = built.derived.ir.stages.iter().find(|s| s.rank.is_some()).unwrap().id;
                    ir.ranks
                        .iter()
                        .map(|r| {
                            r.instructions
                                .iter()
                                .filter(|i| i.op.is_compute() && i.stage.is_some_and(|s| s >= first))
                                .map(|i| (i.op, i.stage, i.mb.map(place)))
                                .collect()
                        })
                        .collect()
                };
                assert_eq!(body(&derived.ir, &|mb| place[mb as usize]), body(&built.derived.ir, &|mb| mb));
            }
            (None, Some(Fallback::NotFaster)) => assert!(batch.adaptive_s.unwrap() >= batch.static_s),
            other => panic!("{tokens:?}: {:?}", other.1),
        }
    }
    assert!(placed > 0, "no sampled batch ran its own plan");
}

#[test]
fn the_microbatches_of_least_encoder_work_run_where_the_body_leaves_least_room() {
    let plan = example("paper_small.mpipe", "adaptive");
    let built = mpipe::driver::build(&plan).unwrap();
    let adaptive = adaptive::Adaptive::new(&built);
    let m = plan.batch.microbatches as u32;
    // Equal microbatches keep the static order.
    assert_eq!(adaptive.for_batch(&[16384]).order, (0..m).collect::<Vec<_>>());
    // A frozen encoder's room is the time before the first body stage needs the features: the
    // microbatches without images go first, each group in its own order.
    let tokens: Vec<u64> = (0..m).map(|mb| if mb % 2 == 0 { 32768 } else { 0 }).collect();
    let batch = adaptive.for_batch(&tokens);
    let (empty, full): (Vec<u32>, Vec<u32>) = (0..m).partition(|mb| mb % 2 == 1);
    assert_eq!(batch.order, [empty, full].concat());
    assert!(batch.fallback.is_none(), "{:?}", batch.fallback);
    let derived = batch.derived.unwrap();
    let first_stage = derived.ir.stages.iter().find(|s| s.rank.is_some()).unwrap().id;
    let head = derived.ir.ranks.iter().find(|r| r.instructions.iter().any(|i| i.stage == Some(first_stage))).unwrap();
    let first_forward = head.instructions.iter().find(|i| i.stage == Some(first_stage)).unwrap();
    assert_eq!(first_forward.mb, Some(1));
}

#[test]
fn a_batch_over_device_memory_runs_the_static_plan() {
    let mut plan = example("paper_small.mpipe", "adaptive");
    // A device that holds less than the weights: no per-batch plan fits.
    plan.cluster.hardware.hbm_bytes = 1e9;
    let built = mpipe::driver::build(&plan).unwrap();
    let tokens: Vec<u64> = (0..plan.batch.microbatches).map(|mb| if mb % 2 == 0 { 32768 } else { 0 }).collect();
    let batch = adaptive::for_batch(&built, &tokens);
    assert!(matches!(batch.fallback, Some(Fallback::OverMemory(_))), "{:?}", batch.fallback);
    assert!(batch.derived.is_none());
    assert_eq!(batch.step_s(), batch.static_s);
}

/// Mean steps over sampled batches of each held-out mix, (static, adaptive), the static plan
/// built once (a histogram only draws the batches). Every `full`-th batch, if any, is also
/// derived in full, the plan built afresh for its image tokens: adaptive's quick re-placement stays within
/// 1% of it on each of those batches.
fn mean_gain(name: &str, mixes: &[&[(u64, f64)]], samples: usize, full: Option<usize>) -> f64 {
    let plan = example(name, "adaptive");
    let built = mpipe::driver::build(&plan).unwrap();
    let adaptive = adaptive::Adaptive::new(&built);
    let mut gains = Vec::new();
    for histogram in mixes {
        let (mut fixed, mut placed) = (0.0, 0.0);
        for (k, tokens) in samples::draw(&mix(&plan, histogram), samples, 25).into_iter().enumerate() {
            let batch = adaptive.for_batch(&tokens);
            assert!(batch.step_s() <= batch.static_s);
            fixed += batch.static_s;
            placed += batch.step_s();
            if full.is_some_and(|f| k % f == 0) {
                // Derived in full as the batch comes, and with its microbatches in adaptive's order.
                let ordered: Vec<u64> = batch.order.iter().map(|&mb| tokens[mb as usize]).collect();
                let again = |tokens: &[u64]| {
                    let batch_plan = adaptive::batch_of(&plan, tokens);
                    mpipe::driver::build(&batch_plan).unwrap().evaluate().report.step_time_s
                };
                let (as_drawn, in_order) = (again(&tokens), again(&ordered));
                println!(
                    "{name} {tokens:?}: adaptive {:.4} s, full re-derivation {as_drawn:.4} s, in adaptive's order {in_order:.4} s",
                    batch.step_s()
                );
                assert!(batch.step_s() <= as_drawn * 1.01, "{tokens:?}: {} against {as_drawn}", batch.step_s());
                assert!(batch.step_s() <= in_order * 1.01, "{ordered:?}: {} against {in_order}", batch.step_s());
            }
        }
        let n = samples as f64;
        println!(
            "{name} {histogram:?}: static {:.3} s, adaptive {:.3} s ({:.4}x)",
            fixed / n,
            placed / n,
            fixed / placed
        );
        gains.push(fixed / placed);
    }
    let mean = gains.iter().sum::<f64>() / gains.len() as f64;
    println!("{name} mean gain {mean:.4}x over {gains:?}");
    mean
}

/// The paper_small mixes of issue 25's table (held out: nothing was tuned on them).
#[test]
fn held_out_mixes_on_paper_small() {
    let mixes: [&[(u64, f64)]; 2] = [
        &[(32768, 3.0), (24576, 3.0), (16384, 2.0), (8192, 1.0), (0, 1.0)],
        &[(32768, 4.0), (16384, 2.0), (8192, 2.0), (4096, 1.0), (0, 3.0)],
    ];
    let mean = mean_gain("paper_small.mpipe", &mixes, 16, Some(8));
    // Issue 25's target. Measured 1.094x; 1.0135x with each batch's microbatches in the order
    // they came, where the per-batch plan was already at its bound (a large encode among the
    // first microbatches holds the body back whatever the owners).
    assert!(mean >= 1.015, "{mean}");
}

/// The paper_512 mixes of issue 25's table, fewer batches; none derived in full here (a build
/// of 512 devices' plan per batch), benches/adaptive.rs compares those in a release build.
#[test]
fn held_out_mixes_on_paper_512() {
    let mixes: [&[(u64, f64)]; 2] =
        [&[(16384, 2.0), (12288, 1.0), (8192, 1.0)], &[(16384, 3.0), (12288, 3.0), (8192, 2.0), (4096, 1.0), (0, 1.0)]];
    let mean = mean_gain("paper_512.mpipe", &mixes, 6, None);
    // Issue 25's target. Measured 1.072x (1.053x in the order the microbatches came).
    assert!(mean >= 1.05, "{mean}");
}

/// Issue 25: on every sampled batch, adaptive's quick re-placement within 1% of the batch's plan
/// derived in full (as it comes and in adaptive's order), over the forms the runtime runs:
/// frozen and trainable encoders, a 1f1b and a zbv body, chunks.
#[test]
fn adaptive_is_within_one_percent_of_a_full_derivation_on_every_form() {
    const ADAPTIVE: (&str, &str) = ("owner by_microbatch;", "owner adaptive;");
    const TRAINABLE: (&str, &str) = ("frozen = true", "frozen = false");
    let forms: [(&str, &[(&str, &str)]); 4] = [
        ("frozen, 1f1b", &[ADAPTIVE]),
        ("trainable, 1f1b", &[ADAPTIVE, TRAINABLE]),
        ("frozen, zbv", &[ADAPTIVE, ("schedule transpose, 1f1b;", "schedule transpose, zbv;")]),
        ("trainable, chunks = 2", &[ADAPTIVE, TRAINABLE, ("schedule transpose,", "schedule transpose(chunks = 2),")]),
    ];
    let histogram = [(32768, 3.0), (24576, 3.0), (16384, 2.0), (8192, 1.0), (0, 1.0)];
    for (form, edits) in forms {
        let plan = mix(&edited("paper_small.mpipe", edits), &histogram);
        let built = mpipe::driver::build(&plan).unwrap();
        let adaptive = adaptive::Adaptive::new(&built);
        for tokens in samples::draw(&plan, 6, 11) {
            let batch = adaptive.for_batch(&tokens);
            let ordered: Vec<u64> = batch.order.iter().map(|&mb| tokens[mb as usize]).collect();
            let full = |tokens: &[u64]| {
                mpipe::driver::build(&adaptive::batch_of(&plan, tokens)).unwrap().evaluate().report.step_time_s
            };
            let best = full(&tokens).min(full(&ordered));
            println!(
                "{form} {tokens:?}: adaptive {:.4} s, full {best:.4} s ({:+.2}%)",
                batch.step_s(),
                (batch.step_s() / best - 1.0) * 100.0
            );
            assert!(batch.step_s() <= best * 1.01, "{form} {tokens:?}: {} against {best}", batch.step_s());
        }
    }
}
