//! The refusals that must come before the cost they guard against: a sweep past its point
//! limit, refused from the sizes of its ranges, and one pilot of the estimate that refuses a
//! build too large to write (criterion; medians in the report).

use criterion::{Criterion, criterion_group, criterion_main};
use mpipe::explore::sweep;
use mpipe::outputs::PlanFormat;
use mpipe::resolve::loader::MemoryLoader;

fn guards(c: &mut Criterion) {
    let mut group = c.benchmark_group("guards");
    group.sample_size(20);
    // The sweep: 4000 × 4000 points, which expanded took 11 s and 4 GB.
    group.bench_function("sweep 4000x4000 refused", |b| {
        b.iter(|| {
            let varies: Vec<sweep::Vary> = ["batch.image_tokens=1..4000+1", "batch.seq_len=1..4000+1"]
                .iter()
                .map(|v| sweep::parse_vary(v).unwrap())
                .collect();
            sweep::grid(&varies).unwrap_err()
        })
    });
    // What `build` spends on each of its two pilots before refusing 55 000 microbatches of
    // examples/paper_small.mpipe: the plan at 32 (or 64) microbatches, built, simulated and
    // every output counted.
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/paper_small.mpipe")).unwrap();
    let loader = MemoryLoader::new();
    for m in [32, 64] {
        let set = vec![("batch.microbatches".to_string(), m.to_string())];
        let plan = mpipe::driver::load("p.mpipe", "p.mpipe", text.clone().into_bytes(), &loader)
            .check(&loader, &set)
            .plan
            .unwrap();
        group.bench_function(format!("estimate pilot M={m}"), |b| {
            b.iter(|| mpipe::outputs::sizes(&mpipe::driver::build(&plan).unwrap(), PlanFormat::Readable))
        });
    }
    group.finish();
}

criterion_group!(benches, guards);
criterion_main!(benches);
