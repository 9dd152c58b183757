//! Lowering + validation throughput: interleaved(2) plans at P×M from 8×64 to 32×256, timed by
//! criterion; the instructions per second each size reaches are printed by `mpipec bench`
//! style reporting in the README table.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use mpipe::resolve::loader::MemoryLoader;

fn plan(p: u32, m: u32) -> mpipe::check::spec::Plan {
    let text = format!(
        "use std::hardware::h100_sxm;\ndecoder lm {{ layers = {}; hidden = 4096; ffn = 14336; heads = 32; vocab = 128256; }}\n\
         model m {{ llm = lm; }}\ncluster {{ hardware = h100_sxm; devices = {p}; pp = {p}; }}\n\
         batch {{ microbatches = {m}; seq_len = 4096; }}\ncut llm;\nschedule interleaved(2);\n",
        p * 4
    );
    mpipe::check("bench.mpipe", "bench.mpipe", text.into_bytes(), &MemoryLoader::new())
        .plan
        .expect("the bench plan is valid")
}

fn lower_and_validate(c: &mut Criterion) {
    let mut group = c.benchmark_group("derive+lower+validate");
    group.sample_size(20);
    for (p, m) in [(8, 64), (16, 128), (32, 256)] {
        let plan = plan(p, m);
        let instructions: usize =
            mpipe::build::derive_checked(&plan).unwrap().ir.ranks.iter().map(|r| r.instructions.len()).sum();
        group.throughput(Throughput::Elements(instructions as u64));
        group.bench_with_input(BenchmarkId::from_parameter(format!("P{p}xM{m}")), &plan, |b, plan| {
            b.iter(|| mpipe::build::derive_checked(plan).unwrap());
        });
    }
    group.finish();
}

criterion_group!(benches, lower_and_validate);
criterion_main!(benches);
