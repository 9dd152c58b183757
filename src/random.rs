//! The one seeded generator the compiler and its tests draw from: Knuth's MMIX linear
//! congruential step, so a seed gives the same draws on every machine (sampled batches, tune's
//! sample, the fuzz smoke run, the robustness soups).

/// A linear congruential generator over `u64`.
#[derive(Clone, Debug)]
pub struct Lcg(u64);

impl Lcg {
    pub fn new(state: u64) -> Lcg {
        Lcg(state)
    }

    fn step(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0
    }

    /// The next draw, 31 bits: the high bits, which are the well-mixed ones.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.step() >> 33
    }

    /// A draw below `n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        self.next() as usize % n
    }

    /// The next draw as a float in [0, 1), from 53 bits.
    pub fn uniform(&mut self) -> f64 {
        (self.step() >> 11) as f64 / (1u64 << 53) as f64
    }
}
