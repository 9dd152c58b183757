//! A short fuzz smoke run in `cargo test`: the fuzz targets' properties (src/fuzzing.rs) on every
//! example and fixture, on the regression inputs of tests/fuzz/, and on a fixed number of
//! deterministic mutations of them. The long runs are `scripts/fuzz` (cargo-fuzz).

mod common;

struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> usize {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) as usize
    }
}

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
    let mut rng = Lcg(0x5eed);
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
            for _ in 0..1 + rng.next() % 3 {
                let at = if m.is_empty() { 0 } else { rng.next() % m.len() };
                match rng.next() % 3 {
                    0 => {
                        let end = (at + rng.next() % 8).min(m.len());
                        m.drain(at..end);
                    }
                    1 => m.splice(at..at, pieces[rng.next() % pieces.len()].iter().copied()).for_each(drop),
                    _ => {
                        if !m.is_empty() {
                            m[at] = m[rng.next() % m.len()];
                        }
                    }
                }
            }
            mpipe::fuzzing::parse(&m);
            mpipe::fuzzing::pipeline(&m);
        }
    }
}
