//! The compiler's speed, stage by stage: parse + check, derive + lower + validate, simulate,
//! on interleaved(2) plans at P×M from 8×16 to 64×1024 (criterion; medians in the report).

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use mpipe::bench::{SIZES, plan, plan_text};
use mpipe::resolve::loader::MemoryLoader;

fn stages(c: &mut Criterion) {
    let mut check = c.benchmark_group("parse+check");
    check.sample_size(20);
    for &(p, m) in SIZES {
        let text = plan_text(p, m);
        check.bench_with_input(BenchmarkId::from_parameter(format!("P{p}xM{m}")), &text, |b, text| {
            b.iter(|| mpipe::check("bench.mpipe", "bench.mpipe", text.clone().into_bytes(), &MemoryLoader::new()))
        });
    }
    check.finish();
    let mut derive = c.benchmark_group("derive+lower+validate");
    derive.sample_size(10);
    for &(p, m) in SIZES {
        let plan = plan(p, m);
        let n: usize = mpipe::build::derive_checked(&plan).unwrap().ir.ranks.iter().map(|r| r.instructions.len()).sum();
        derive.throughput(Throughput::Elements(n as u64));
        derive.bench_with_input(BenchmarkId::from_parameter(format!("P{p}xM{m}")), &plan, |b, plan| {
            b.iter(|| mpipe::build::derive_checked(plan).unwrap())
        });
    }
    derive.finish();
    let mut simulate = c.benchmark_group("simulate");
    simulate.sample_size(10);
    for &(p, m) in SIZES {
        let plan = plan(p, m);
        let derived = mpipe::build::derive_checked(&plan).unwrap();
        simulate.bench_with_input(BenchmarkId::from_parameter(format!("P{p}xM{m}")), &derived, |b, derived| {
            b.iter(|| mpipe::build::simulate(&plan, derived))
        });
    }
    simulate.finish();
}

criterion_group!(benches, stages);
criterion_main!(benches);
