//! The driver: a source loaded once checks under each set of overrides as if read afresh, a
//! build is simulated once and shared, and a backend answers from the `Built`.

use mpipe::Depth;
use mpipe::algebra::{Chunks, Skeleton};
use mpipe::backend::native::{Verdict, verdict};
use mpipe::backend::{Request, Target};
use mpipe::derive::nearest::Encoder;
use mpipe::derive::resolved::{Choices, Resolved};
use mpipe::diagnostics::Code;
use mpipe::driver::Make;
use mpipe::resolve::loader::MemoryLoader;

fn example(name: &str) -> Vec<u8> {
    std::fs::read(format!("{}/examples/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

fn set(key: &str, value: &str) -> Vec<(String, String)> {
    vec![(key.to_string(), value.to_string())]
}

#[test]
fn a_loaded_source_checks_each_variation_as_if_read_afresh() {
    let loader = MemoryLoader::new();
    let loaded = mpipe::driver::load("plan.mpipe", "plan.mpipe", example("llm_1f1b.mpipe"), &loader);
    let written = mpipe::driver::compile("plan.mpipe", "plan.mpipe", example("llm_1f1b.mpipe"), &loader).plan.unwrap();
    let varied = loaded.clone().check(&loader, &set("batch.microbatches", "16")).plan.unwrap();
    assert_eq!(varied.batch.microbatches, 16);
    assert_ne!(written.batch.microbatches, 16, "the override must change something to show it does not leak");
    // The variation before left the loaded source as it was.
    assert_eq!(loaded.clone().check(&loader, &[]).plan.unwrap(), written);
    let refused = loaded.check(&loader, &set("batch.microbatches", "0"));
    assert!(refused.plan.is_none() && refused.has_errors());
}

#[test]
fn a_build_is_simulated_once_and_shared() {
    let loader = MemoryLoader::new();
    let plan = mpipe::driver::compile("plan.mpipe", "plan.mpipe", example("llm_1f1b.mpipe"), &loader).plan.unwrap();
    let built = mpipe::driver::build(&plan).unwrap();
    let first = built.evaluate();
    assert!(std::ptr::eq(first, built.evaluate()));
    let report = first.report.clone();
    let fresh = mpipe::sim::report::simulate(&built.derived, &built.costs).report;
    assert_eq!(report, fresh);
    assert_eq!(built.into_simulated().1.report, report);
}

#[test]
fn a_backend_answers_from_the_built_plan() {
    let text = "use std::hardware::h100_sxm;\n\
                decoder lm { layers = 8; hidden = 1024; ffn = 4096; heads = 8; vocab = 32000; }\n\
                model m { llm = lm; }\n\
                cluster { hardware = h100_sxm; devices = 4; pp = 4; }\n\
                batch { microbatches = 8; seq_len = 1024; }\n\
                cut llm;\n\
                schedule zb1p(2);\n";
    let loader = MemoryLoader::new();
    let plan = mpipe::driver::compile("plan.mpipe", "plan.mpipe", text.as_bytes().to_vec(), &loader).plan.unwrap();
    let built = mpipe::driver::build(&plan).unwrap();
    let ask = |target, nearest| verdict(Request { target, nearest, span: None }, &built);
    assert!(matches!(ask(Target::Torch, false), Verdict::AsWritten));
    match ask(Target::Megatron, false) {
        Verdict::Impossible(d) => assert_eq!(d.code, Code::E0401),
        _ => panic!("megatron has no zero-bubble schedule; without nearest the plan is refused"),
    }
    match ask(Target::Megatron, true) {
        Verdict::Nearest(form) => {
            assert_eq!(form.body.0.to_string(), "interleaved(2)");
            assert!(!form.changes.is_empty());
        }
        _ => panic!("megatron runs the nearest interleaved plan"),
    }
    let megatron = [Request { target: Target::Megatron, nearest: true, span: None }];
    let products = mpipe::driver::produce(&plan, &megatron, Make::Files, &|| true).unwrap().unwrap();
    let answer = &products.answers[0];
    assert_eq!(answer.diagnostics.iter().map(|d| d.code).collect::<Vec<_>>(), [Code::W0004]);
    assert!(!answer.refused && !answer.artifacts.is_empty());
    let nearest = answer.nearest.as_ref().unwrap();
    assert_eq!(nearest.resolved.body().0.to_string(), "interleaved(2)");
    assert_eq!(nearest.derived.ir.regions[0].skeleton, "interleaved(2)", "the lists are of the nearest form");
    assert_eq!(nearest.plan(), &plan, "the plan as written, with the form as a choice");
}

#[test]
fn a_build_whose_answer_is_no_longer_wanted_stops_between_its_passes() {
    use std::cell::Cell;
    let loader = MemoryLoader::new();
    let compiled = mpipe::driver::compile("plan.mpipe", "plan.mpipe", example("llm_1f1b.mpipe"), &loader);
    let asked = Cell::new(0);
    let everything = mpipe::diagnose_while(
        &compiled,
        Depth::Build,
        &|| {
            asked.set(asked.get() + 1);
            true
        },
        &mut |_| {},
    );
    assert_eq!(everything.expect("a build that is always wanted answers"), mpipe::diagnose(&compiled, Depth::Build));
    let never = mpipe::diagnose_while(&compiled, Depth::Check, &|| panic!("checking asks nothing"), &mut |_| {
        panic!("checking builds nothing")
    });
    assert_eq!(never, Some(compiled.diagnostics.clone()));
    // Before the build, before the simulation, before each of its two targets.
    assert_eq!(asked.get(), 4u32);
    for yes in 0..asked.get() {
        let left = Cell::new(yes);
        let answer = mpipe::diagnose_while(
            &compiled,
            Depth::Build,
            &|| {
                let wanted = left.get() > 0;
                left.set(left.get().saturating_sub(1));
                wanted
            },
            &mut |_| {},
        );
        assert!(answer.is_none(), "a build told no after {yes} yes must stop");
    }
}

#[test]
fn lowering_reads_the_resolved_plan_and_plan_txt_lists_its_choices() {
    let loader = MemoryLoader::new();
    let plan = mpipe::driver::compile("plan.mpipe", "plan.mpipe", example("paper_small.mpipe"), &loader).plan.unwrap();
    let products = mpipe::driver::produce(&plan, &[], Make::Files, &|| true).unwrap().unwrap();
    let built = &products.built;
    let choices = &built.resolved.choices;
    assert!(std::ptr::eq(built.resolved.plan, &plan), "the resolved plan holds the plan as written");
    let Some(Skeleton::Transpose { chunks: Chunks::Auto, .. }) = choices.encoder else {
        panic!("paper_small's encoder runs its own `transpose`, chunks chosen: {choices:?}")
    };
    assert!(choices.chunks > 1, "the search chunks paper_small's encodes: {choices:?}");
    // The lists follow the choices and nothing else: one chunk fewer is one encoder stage fewer.
    // (Without a schedule for the encoder's chunks, lowering places them itself.)
    let fewer = Choices { chunks: choices.chunks - 1, encoder_schedule: None, ..choices.clone() };
    let fewer = Resolved { plan: &plan, choices: fewer };
    let encoder_stages = |ir: &mpipe::ir::PlanIr| ir.stages.iter().filter(|s| s.region == "enc").count();
    assert_eq!(encoder_stages(&built.derived.ir), choices.chunks as usize);
    assert_eq!(encoder_stages(&mpipe::derive::lower(&fewer, &built.costs).ir), choices.chunks as usize - 1);
    assert_eq!(mpipe::derive::lower(&built.resolved, &built.costs).ir, built.derived.ir);
    let listing = products.files(mpipe::outputs::PlanFormat::Readable);
    let plan_txt = listing.iter().find(|f| f.path == "plan.txt").unwrap();
    let mut text = Vec::new();
    plan_txt.write_to(&mut text).unwrap();
    let text = String::from_utf8(text).unwrap();
    let header = format!(
        "\nchoices:\n  enc form: transpose\n  enc chunks: {}\n  enc owner: by_microbatch\n  enc head delay: {:.3e} s\n\n",
        choices.chunks,
        choices.encoder_schedule.as_ref().expect("a slack-filling encoder's chunks are placed by choose").delay
    );
    assert!(text.contains(&header), "{}", &text[..400.min(text.len())]);
}

#[test]
fn the_checker_rejects_a_bad_choice_in_the_resolved_plan() {
    let loader = MemoryLoader::new();
    let plan = mpipe::driver::compile("plan.mpipe", "plan.mpipe", example("paper_small.mpipe"), &loader).plan.unwrap();
    let built = mpipe::driver::build(&plan).unwrap();
    let problems = built.resolved.problems();
    assert!(problems.is_empty(), "the search's own choices pass: {problems:?}");
    let codes = |change: &dyn Fn(&mut Choices)| {
        let mut resolved = built.resolved.clone();
        change(&mut resolved.choices);
        resolved.problems().iter().map(|e| e.to_diagnostic().code).collect::<Vec<_>>()
    };
    let layers = plan.cut.regions[0].layers.end - plan.cut.regions[0].layers.start;
    assert_eq!(codes(&|c| c.chunks = layers as u32 + 1), [Code::E0319], "more chunks than the encoder has layers");
    let (m, p) = (plan.batch.microbatches as usize, plan.cluster.pp as u32);
    assert_eq!(
        codes(&|c| c.encoder_schedule.as_mut().unwrap().owners[0] = p),
        [Code::E0311],
        "an owner past the ranks"
    );
    // One image per microbatch: a split into two parts has no second image to give.
    assert!(codes(&|c| c.parts = vec![2; m]).contains(&Code::E0207));
    // A target's nearest form is a choice too, checked when it is built.
    let megatron = Request { target: Target::Megatron, nearest: true, span: None };
    let Verdict::Nearest(mut form) = verdict(megatron, &built) else { panic!("megatron runs a nearest form") };
    let Encoder::Folded(split) = &mut form.encoder else { panic!("megatron folds the encoder into stage 0") };
    split[0] += 1;
    let invalid = mpipe::built::nearest(&built, *form).err().expect("a split over more layers than the model has");
    assert!(invalid.problems.iter().any(|p| p.contains("`split` sums to")), "{:?}", invalid.problems);
}
