//! `owner adaptive`: the time to place one batch's plan (re-place the encoder for the batch's
//! image tokens on the body kept from the static plan, validate, check memory, simulate it and
//! the static plan), on paper_small and paper_512 with batches drawn from the first mix of issue
//! 25's table for each (criterion; medians in the report).

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use mpipe::resolve::loader::MemoryLoader;

/// An example plan with `owner adaptive` and a distribution of image tokens to draw from.
fn example(name: &str, histogram: &[(u64, f64)]) -> mpipe::plan::Plan {
    let root = env!("CARGO_MANIFEST_DIR");
    let mut loader = MemoryLoader::new();
    for entry in std::fs::read_dir(format!("{root}/examples/lib")).unwrap() {
        let path = entry.unwrap().path();
        let key = format!("examples/lib/{}", path.file_name().unwrap().to_string_lossy());
        loader.insert(&key, &std::fs::read_to_string(&path).unwrap());
    }
    let key = format!("examples/{name}");
    let text =
        std::fs::read_to_string(format!("{root}/{key}")).unwrap().replace("owner by_microbatch;", "owner adaptive;");
    let mut plan = mpipe::driver::compile(&key, &key, text.into_bytes(), &loader).plan.expect("the example checks");
    plan.batch.histogram = histogram.to_vec();
    plan
}

fn per_batch(c: &mut Criterion) {
    let mut group = c.benchmark_group("adaptive per batch");
    group.sample_size(10);
    let plans = [
        (
            "paper_small",
            example("paper_small.mpipe", &[(32768, 3.0), (24576, 3.0), (16384, 2.0), (8192, 1.0), (0, 1.0)]),
        ),
        ("paper_512", example("paper_512.mpipe", &[(16384, 2.0), (12288, 1.0), (8192, 1.0)])),
    ];
    for (name, plan) in &plans {
        let built = mpipe::driver::build(plan).unwrap();
        let adaptive = mpipe::adaptive::Adaptive::new(&built);
        let batches = mpipe::explore::samples::draw(plan, 8, 1);
        let mut next = batches.iter().cycle();
        group
            .bench_function(BenchmarkId::from_parameter(name), |b| b.iter(|| adaptive.for_batch(next.next().unwrap())));
    }
    group.finish();
}

criterion_group!(benches, per_batch);
criterion_main!(benches);
