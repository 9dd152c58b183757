//! The plans the benchmarks time (criterion, `benches/pipeline.rs`) and `mpipec bench`
//! reports: a Llama-class decoder on P pipeline ranks with two chunks each, M microbatches.

/// Sizes from the issue: P×M from 8×16 to 64×1024.
pub const SIZES: &[(u32, u32)] = &[(8, 16), (8, 64), (16, 128), (32, 256), (64, 1024)];

pub fn plan_text(pp: u32, microbatches: u32) -> String {
    format!(
        "use std::hardware::h100_sxm;\n\
         decoder lm {{ layers = {}; hidden = 4096; ffn = 14336; heads = 32; kv_heads = 8; vocab = 128256; }}\n\
         model m {{ llm = lm; }}\n\
         cluster {{ hardware = h100_sxm; devices = {pp}; pp = {pp}; }}\n\
         batch {{ microbatches = {microbatches}; seq_len = 4096; }}\n\
         cut llm;\n\
         schedule interleaved(2);\n",
        pp * 4
    )
}

pub fn plan(pp: u32, microbatches: u32) -> crate::plan::Plan {
    let text = plan_text(pp, microbatches);
    crate::driver::compile(
        "bench.mpipe",
        "bench.mpipe",
        text.into_bytes(),
        &crate::resolve::loader::MemoryLoader::new(),
    )
    .plan
    .expect("the benchmark plans are valid")
}

/// Median seconds of `runs` calls of `f`.
pub fn median(runs: usize, mut f: impl FnMut()) -> f64 {
    let mut times: Vec<f64> = (0..runs.max(1))
        .map(|_| {
            let t = std::time::Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}
