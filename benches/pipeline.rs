//! The compiler's speed, stage by stage: parse + check, derive + lower + validate, simulate,
//! and the whole build (parse to every output written into a temporary folder), on
//! interleaved(2) plans at P×M from 8×16 to 64×1024 (criterion; medians in the report).

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use mpipe::bench::{SIZES, plan, plan_text};
use mpipe::resolve::loader::MemoryLoader;

fn stages(c: &mut Criterion) {
    let mut check = c.benchmark_group("parse+check");
    check.sample_size(20);
    for &(p, m) in SIZES {
        let text = plan_text(p, m);
        check.bench_with_input(BenchmarkId::from_parameter(format!("P{p}xM{m}")), &text, |b, text| {
            b.iter(|| {
                mpipe::driver::compile("bench.mpipe", "bench.mpipe", text.clone().into_bytes(), &MemoryLoader::new())
            })
        });
    }
    check.finish();
    let mut derive = c.benchmark_group("derive+lower+validate");
    derive.sample_size(10);
    for &(p, m) in SIZES {
        let plan = plan(p, m);
        let n = mpipe::outputs::instructions(&mpipe::driver::build(&plan).unwrap().derived.ir);
        derive.throughput(Throughput::Elements(n as u64));
        derive.bench_with_input(BenchmarkId::from_parameter(format!("P{p}xM{m}")), &plan, |b, plan| {
            b.iter(|| mpipe::driver::build(plan).unwrap())
        });
    }
    derive.finish();
    let mut simulate = c.benchmark_group("simulate");
    simulate.sample_size(10);
    for &(p, m) in SIZES {
        let plan = plan(p, m);
        let built = mpipe::driver::build(&plan).unwrap();
        // The simulator itself: `evaluate` would answer from its first run.
        simulate.bench_with_input(BenchmarkId::from_parameter(format!("P{p}xM{m}")), &built, |b, built| {
            b.iter(|| mpipe::sim::report::simulate(&built.derived, &built.costs))
        });
    }
    simulate.finish();
    let mut whole = c.benchmark_group("whole build");
    whole.sample_size(10);
    let scratch = std::env::temp_dir().join(format!("mpipec-criterion-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).unwrap();
    for &(p, m) in SIZES {
        let text = plan_text(p, m);
        whole.bench_with_input(BenchmarkId::from_parameter(format!("P{p}xM{m}")), &text, |b, text| {
            b.iter(|| build_into(text, &scratch))
        });
    }
    whole.finish();
    std::fs::remove_dir_all(&scratch).unwrap();
}

/// What `mpipec build --target torch` does, but for the atomic rename: every output streamed
/// into its file under `dir`.
fn build_into(text: &str, dir: &std::path::Path) {
    let checked = mpipe::driver::compile("bench.mpipe", "bench.mpipe", text.as_bytes().to_vec(), &MemoryLoader::new());
    let plan = checked.plan.unwrap();
    let torch = [mpipe::backend::Request { target: mpipe::backend::Target::Torch, nearest: false, span: None }];
    let products = mpipe::driver::produce(&plan, &torch, mpipe::driver::Make::Files, &|| true).unwrap().unwrap();
    for f in &products.files(mpipe::outputs::PlanFormat::Auto) {
        let path = dir.join(&f.path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        f.write_to(&mut std::fs::File::create(path).unwrap()).unwrap();
    }
}

criterion_group!(benches, stages);
criterion_main!(benches);
