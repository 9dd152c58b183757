//! derive's search and the simulation as the microbatches grow: paper_small built (every
//! candidate of the search lowered and timed, the chosen plan lowered and validated) and
//! simulated at 1,375 to 22,000 microbatches, each four times the one before, so that the
//! medians in the report show the time growing with the microbatches and not faster
//! (criterion; docs/performance.md).

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use mpipe::resolve::loader::MemoryLoader;

fn paper_small(microbatches: u32) -> mpipe::plan::Plan {
    let key = "examples/paper_small.mpipe";
    let text = std::fs::read(format!("{}/{key}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let loader = MemoryLoader::new();
    let set = [("batch.microbatches".to_string(), microbatches.to_string())];
    mpipe::driver::load(key, key, text, &loader).check(&loader, &set).plan.expect("the example checks")
}

fn build_and_simulate(c: &mut Criterion) {
    let mut group = c.benchmark_group("paper_small build+simulate");
    group.sample_size(10);
    for microbatches in [1375, 5500, 22000] {
        let plan = paper_small(microbatches);
        group.throughput(Throughput::Elements(u64::from(microbatches)));
        group.bench_with_input(BenchmarkId::from_parameter(microbatches), &plan, |b, plan| {
            b.iter(|| mpipe::driver::build(plan).unwrap().evaluate().report.step_time_s)
        });
    }
    group.finish();
}

criterion_group!(benches, build_and_simulate);
criterion_main!(benches);
