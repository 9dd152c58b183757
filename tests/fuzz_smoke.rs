//! A short fuzz smoke run in `cargo test`: the fuzz targets' properties (src/fuzzing.rs) on every
//! example and fixture, on the regression inputs of tests/fuzz/, and on a fixed number of
//! deterministic mutations of them; `--set` flags (tests/fuzz/overrides.txt, one a line) the
//! same way. The long runs are `scripts/fuzz` (cargo-fuzz).

mod common;

use mpipe::random::Lcg;

fn seeds() -> Vec<Vec<u8>> {
    let root = common::root();
    let mut files = common::files_under(&root.join("examples"), "mpipe");
    files.extend(common::files_under(&root.join("tests/ui"), "mpipe"));
    files.extend(common::files_under(&root.join("tests/fuzz"), "mpipe"));
    files.into_iter().map(|f| std::fs::read(f).unwrap()).collect()
}

#[test]
fn seeds_and_mutations() {
    let seeds = seeds();
    assert!(seeds.len() > 40);
    let mut rng = Lcg::new(0x5eed);
    let pieces: &[&[u8]] = &[
        b"|",
        b"transpose",
        b"1f1b",
        b"[",
        b"]",
        b"{",
        b"}",
        b";",
        b"0",
        b"99999999",
        b"interleaved(3)",
        b"zbv",
        b"\xff",
        b"//",
        b"owner [0, 9];",
    ];
    for seed in &seeds {
        mpipe::fuzzing::parse(seed);
        mpipe::fuzzing::pipeline(seed);
        for _ in 0..6 {
            let mut m = seed.clone();
            for _ in 0..1 + rng.below(3) {
                let at = if m.is_empty() { 0 } else { rng.below(m.len()) };
                match rng.below(3) {
                    0 => {
                        let end = (at + rng.below(8)).min(m.len());
                        m.drain(at..end);
                    }
                    1 => m.splice(at..at, pieces[rng.below(pieces.len())].iter().copied()).for_each(drop),
                    _ => {
                        if !m.is_empty() {
                            m[at] = m[rng.below(m.len())];
                        }
                    }
                }
            }
            mpipe::fuzzing::parse(&m);
            mpipe::fuzzing::pipeline(&m);
        }
    }
}

#[test]
fn overrides_and_mutations() {
    let flags = std::fs::read_to_string(common::root().join("tests/fuzz/overrides.txt")).unwrap();
    let flags: Vec<&[u8]> = flags.lines().map(str::as_bytes).collect();
    assert!(flags.len() > 20);
    let mut rng = Lcg::new(0x5e7);
    let pieces: &[&[u8]] = &[b";", b"}", b"{", b"=", b".", b" | ", b",", b"(", b")", b"[", b"]", b"//", b"\"", b"8"];
    for flag in &flags {
        mpipe::fuzzing::overrides(flag);
        for _ in 0..8 {
            let mut m = flag.to_vec();
            for _ in 0..1 + rng.below(3) {
                let at = rng.below(m.len() + 1);
                match rng.below(3) {
                    0 => m.truncate(at),
                    1 => m.splice(at..at, pieces[rng.below(pieces.len())].iter().copied()).for_each(drop),
                    _ => m.splice(at..at, flags[rng.below(flags.len())].iter().copied()).for_each(drop),
                }
            }
            mpipe::fuzzing::overrides(&m);
        }
    }
}
