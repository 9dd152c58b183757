//! What a layer's kernels reach on a device, when the plan pins no single `efficiency`: each
//! matrix product by its shape (tile and wave quantization, or memory-bound when small), the
//! attention core by its kernel (flash: its FLOPs at the measured attention rate; unfused: two
//! batched products over the whole score matrix and a softmax through HBM), and the
//! memory-bound kernels between them at HBM bandwidth. Sources in docs/costs.md.

use super::layers::{ELEMENT, Gemm, LayerCost, Scores, Split};
use crate::plan::Cluster;

/// Output tile of one thread block of a matrix product, rows × columns: the 128 × 128 tile
/// cuBLAS and CUTLASS use for large bf16 products (NVIDIA, "Matrix Multiplication Background
/// User's Guide", Sec. 2.3); a product runs as waves of one tile per compute unit (Sec. 3.2).
const TILE: f64 = 128.0;

/// Fraction of nominal HBM bandwidth memory-bound kernels reach (STREAM-like copies reach
/// 80–90% on A100 and H100; fused elementwise kernels in training sit at the low end).
const BANDWIDTH_EFFICIENCY: f64 = 0.8;

/// A large matrix product's sustained fraction of peak where the hardware states none.
pub const MATMUL_EFFICIENCY: f64 = 0.7;

/// Flash attention's forward against a plain matrix product of the same device: its softmax
/// runs beside the products (FlashAttention-2 on A100: 184–187 TFLOP/s with the softmax, 217–223
/// without it, liangan1/GPU_travel performance/flash-attn/README.md).
const ATTENTION_OF_MATMUL: f64 = 0.84;

/// A causal kernel's rate against a full one (the same source: 156–159 against 184–187 TFLOP/s
/// at 4096 tokens): the diagonal blocks are masked and the rows unequal.
const CAUSAL_RATE: f64 = 0.85;

/// Flash attention's backward runs 2.5× the forward's FLOPs (five products to two) at about
/// three quarters of its rate (FlashAttention-2's own benchmark, forward against backward).
const BACKWARD_FLOPS: f64 = 2.5;
const BACKWARD_RATE: f64 = 0.75;

/// The device side of the kernel model: rates, and how tensor and expert parallelism divide
/// a layer's kernels over devices.
pub struct Kernels {
    peak: f64,
    units: Option<f64>,
    matmul: f64,
    attention: f64,
    bandwidth: f64,
    tp: f64,
    ep: f64,
    flash: bool,
}

impl Kernels {
    pub fn new(cluster: &Cluster) -> Kernels {
        let hw = &cluster.hardware;
        let matmul = hw.matmul_efficiency.unwrap_or(MATMUL_EFFICIENCY);
        Kernels {
            peak: hw.peak_bf16,
            units: hw.compute_units.map(|u| u as f64),
            matmul,
            attention: hw.attention_efficiency.unwrap_or(ATTENTION_OF_MATMUL * matmul),
            bandwidth: hw.hbm_bandwidth * BANDWIDTH_EFFICIENCY,
            tp: cluster.tp as f64,
            ep: cluster.ep as f64,
            flash: cluster.flash_attention,
        }
    }

    /// `batch` products (m × k)·(k × n) in one kernel: whole waves of tiles at the sustained
    /// matmul rate, or the bytes of its operands and result when that is slower.
    fn gemm(&self, m: f64, n: f64, k: f64, batch: f64) -> f64 {
        let rate = self.peak * self.matmul;
        let compute = match self.units {
            Some(units) => {
                let tiles = batch * (m / TILE).ceil() * (n / TILE).ceil();
                (tiles / units).ceil() * units * 2.0 * TILE * TILE * k / rate
            }
            None => 2.0 * batch * m * n * k / rate,
        };
        compute.max(ELEMENT * batch * (m * k + k * n + m * n) / self.bandwidth)
    }

    /// One device's part of a layer's product: tensor parallelism splits its columns or its
    /// reduction; expert parallelism gives each device its experts and their tokens from all.
    fn local(&self, g: &Gemm) -> Gemm {
        let mut l = *g;
        match g.split {
            Split::Columns => l.n /= self.tp,
            Split::Rows => l.k /= self.tp,
        }
        if g.experts {
            l.batch /= self.ep;
            l.m *= self.ep;
        }
        l
    }

    /// A memory-bound kernel moving `bytes`.
    pub fn memory(&self, bytes: f64) -> f64 {
        bytes / self.bandwidth
    }

    /// The forward's kernels: the products, the attention core, the memory-bound rest.
    pub fn forward(&self, c: &LayerCost) -> f64 {
        let products: f64 = c.gemms.iter().map(|g| self.local(g)).map(|g| self.gemm(g.m, g.n, g.k, g.batch)).sum();
        products + self.attention_forward(&c.attention) + self.memory(c.elementwise / self.tp)
    }

    /// The activation gradient: each product's input gradient (m × n)·(n × k), the attention
    /// core's backward, and the memory-bound kernels reading their saved input and writing a
    /// gradient (twice the forward's bytes).
    pub fn backward_input(&self, c: &LayerCost) -> f64 {
        let products: f64 = c.gemms.iter().map(|g| self.local(g)).map(|g| self.gemm(g.m, g.k, g.n, g.batch)).sum();
        products + self.attention_backward(&c.attention) + self.memory(2.0 * c.elementwise / self.tp)
    }

    /// What per-op recompute runs again before the backward: the products it did not keep and
    /// every memory-bound kernel of the forward.
    pub fn recompute_ops(&self, c: &LayerCost) -> f64 {
        let products: f64 = c.recomputed.iter().map(|g| self.local(g)).map(|g| self.gemm(g.m, g.n, g.k, g.batch)).sum();
        products + self.memory(c.elementwise / self.tp)
    }

    /// The weight gradient of each product: (k × m)·(m × n), reduced over the tokens.
    pub fn backward_weight(&self, c: &LayerCost) -> f64 {
        c.gemms.iter().map(|g| self.local(g)).map(|g| self.gemm(g.k, g.n, g.m, g.batch)).sum()
    }

    /// The attention core's forward on one device (tensor parallelism divides the heads).
    pub fn attention_forward(&self, s: &Scores) -> f64 {
        let heads = s.heads / self.tp;
        if self.flash {
            return self.flash_time(s, heads, 1.0, 1.0);
        }
        // Unfused (Megatron's fused softmax, no flash kernel): Q·Kᵀ writes the whole score
        // matrix, causal or not; the softmax reads it and writes the probabilities; P·V reads
        // them.
        self.gemm(s.queries, s.keys, s.qk, heads)
            + self.memory(2.0 * ELEMENT * heads * s.queries * s.keys)
            + self.gemm(s.queries, s.v, s.keys, heads)
    }

    pub fn attention_backward(&self, s: &Scores) -> f64 {
        let heads = s.heads / self.tp;
        if self.flash {
            return self.flash_time(s, heads, BACKWARD_FLOPS, BACKWARD_RATE);
        }
        // Both gradients of both products; the softmax's backward reads P and dP, writes dS.
        self.gemm(s.queries, s.keys, s.v, heads)
            + self.gemm(s.keys, s.v, s.queries, heads)
            + self.memory(3.0 * ELEMENT * heads * s.queries * s.keys)
            + self.gemm(s.queries, s.qk, s.keys, heads)
            + self.gemm(s.keys, s.qk, s.queries, heads)
    }

    /// A flash kernel computes whole blocks of TILE queries × TILE keys, under a causal mask
    /// only those on or below the diagonal, at the device's attention rate; `flops` and `rate`
    /// scale both for the backward.
    fn flash_time(&self, s: &Scores, heads: f64, flops: f64, rate: f64) -> f64 {
        let rows = (s.queries / TILE).ceil();
        let columns = (s.keys / TILE).ceil();
        let (blocks, causal) = if s.causal { (rows * (rows + 1.0) / 2.0, CAUSAL_RATE) } else { (rows * columns, 1.0) };
        let work = flops * 2.0 * heads * blocks * TILE * TILE * (s.qk + s.v);
        let compute = work / (self.peak * self.attention * causal * rate);
        let bytes = ELEMENT * heads * (s.queries * (s.qk + s.v) + s.keys * (s.qk + s.v));
        compute.max(flops * self.memory(bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An A100 as std::hardware describes it, one device, no tensor parallelism.
    fn a100(flash: bool) -> Kernels {
        Kernels {
            peak: 312e12,
            units: Some(108.0),
            matmul: 0.7,
            attention: 0.575,
            bandwidth: 2039e9 * BANDWIDTH_EFFICIENCY,
            tp: 1.0,
            ep: 1.0,
            flash,
        }
    }

    fn rate(k: &Kernels, m: f64, n: f64, depth: f64) -> f64 {
        2.0 * m * n * depth / k.gemm(m, n, depth, 1.0) / (k.peak * k.matmul)
    }

    #[test]
    fn a_product_one_tile_past_a_wave_pays_for_a_second_wave() {
        let k = a100(true);
        // 12 × 9 = 108 tiles: one whole wave; one column more, 12 × 10 tiles: two waves.
        let whole = k.gemm(12.0 * TILE, 9.0 * TILE, 8192.0, 1.0);
        let spilled = k.gemm(12.0 * TILE, 9.0 * TILE + 1.0, 8192.0, 1.0);
        assert!((spilled / whole - 2.0).abs() < 1e-9, "{}", spilled / whole);
        assert!((rate(&k, 12.0 * TILE, 9.0 * TILE, 8192.0) - 1.0).abs() < 1e-9);
    }

    #[test]
    fn small_and_skinny_products_are_far_from_the_matmul_rate() {
        let k = a100(true);
        // 16 tiles on 108 units, and a product with a short reduction: memory-bound.
        assert!(rate(&k, 512.0, 512.0, 8192.0) < 0.2);
        assert!(rate(&k, 16384.0, 16384.0, 64.0) < 0.5);
        assert!(rate(&k, 8192.0, 8192.0, 8192.0) > 0.95);
    }

    #[test]
    fn causal_masks_save_work_only_in_a_flash_kernel() {
        let scores = |causal| Scores { heads: 32.0, queries: 4096.0, keys: 4096.0, qk: 128.0, v: 128.0, causal };
        let flash = a100(true);
        let ratio = flash.attention_forward(&scores(true)) / flash.attention_forward(&scores(false));
        // Half the blocks plus the diagonal, at the causal rate.
        let expected = (32.0 * 33.0 / 2.0) / (32.0 * 32.0) / CAUSAL_RATE;
        assert!((ratio - expected).abs() < 1e-9, "{ratio}");
        let unfused = a100(false);
        assert_eq!(unfused.attention_forward(&scores(true)), unfused.attention_forward(&scores(false)));
        assert!(unfused.attention_forward(&scores(true)) > flash.attention_forward(&scores(true)));
    }
}
