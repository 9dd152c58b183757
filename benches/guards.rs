//! The refusals that must come before the cost they guard against: a sweep past its point
//! limit, refused from the sizes of its ranges (criterion; medians in the report).

use criterion::{Criterion, criterion_group, criterion_main};
use mpipe::explore::sweep;

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
    group.finish();
}

criterion_group!(benches, guards);
criterion_main!(benches);
