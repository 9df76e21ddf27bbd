//! Differential cases of the LOOM GEMM (`gemm.xwt_<ty>`, and `gemm.xwt_narrow_<ty>` for at
//! most 32 rows): every weight dtype, the 0.8B model's widths on a few rows, ragged shapes
//! (m, n, k not multiples of any tile; m = 1; k = 1), overwrite and accumulate; and bf16x3
//! activations (f32 as three exact bf16 pieces), both as the model's products take them
//! (`gemm.xwt_bf16x3` on AMX, the f32 path elsewhere) and through `gemm.xwt_bf16x3` on every
//! device ([`ops::gemm_bf16x3`]).
//!
//! Tolerance (the numeric contract of `tile_dot`, LOOM.md): the reference sums the exact
//! products of the operands the kernel multiplies (activations rounded to the weight's 16-bit
//! type for bf16/f16 weights) in f64. Any order of f32 additions of `k` terms is within
//! `k · 2^-24 · Σ|x_j w_j|` of it, and `Σ|x_j w_j| <= k · max|x| · max|w|`, so the case allows
//! `abs = k² · 2^-24 · max|x| · max|w|` (plus one rounding of `y` for accumulate). bf16x3
//! activations add `3k` exact products whose magnitudes sum to at most `(1 + 2^-8)` times
//! `Σ|x_j w_j|`, so their bound is three times that.
//! Hosts whose dot keeps the reference's order (every level without AVX512-BF16, and the f16,
//! f32 and f32-activation instances everywhere) agree with the generated Rust to the bit, and
//! the cases whose every level does so are checked to the bit; the bf16 instance with rounded
//! activations sums in its own order on the AVX512-BF16 and AMX levels and is held to the
//! tolerance, as bf16x3 activations are.

use half::{bf16, f16};
use lse_runtime::device::Device;
use lse_runtime::ops::{self, Activations, GemmOut};

use super::{Dtype, Stored};
use crate::diff::{Case, Out, Rng, Tol};

/// Scale of the activations and of the weights.
const X_SCALE: f32 = 2.0;
const W_SCALE: f32 = 0.5;

struct GemmCase {
    m: usize,
    n: usize,
    k: usize,
    dtype: Dtype,
    out: GemmOut,
    act: Activations,
    /// Through `gemm.xwt_bf16x3` on every device ([`ops::gemm_bf16x3`]), not as `act` routes.
    pieces: bool,
}

impl GemmCase {
    fn inputs(&self) -> (Vec<f32>, Stored, Vec<f32>) {
        let mut rng = Rng(0x6e6d + (self.m * 31 + self.n * 7 + self.k) as u64);
        let x = rng.f32s(self.m * self.k, X_SCALE);
        let w = Stored::new(&rng.f32s(self.n * self.k, W_SCALE), self.dtype);
        let y = rng.f32s(self.m * self.n, 1.0);
        (x, w, y)
    }

    /// An activation as the kernel multiplies it.
    fn operand(&self, v: f32) -> f64 {
        match (self.dtype, self.act) {
            (Dtype::Bf16, Activations::RoundedToWeight) => bf16::from_f32(v).to_f64(),
            (Dtype::F16, Activations::RoundedToWeight) => f16::from_f32(v).to_f64(),
            _ => v as f64,
        }
    }
}

impl Case for GemmCase {
    fn name(&self) -> String {
        format!(
            "gemm m={} n={} k={} {:?} {:?} {:?}{}",
            self.m,
            self.n,
            self.k,
            self.dtype,
            self.out,
            self.act,
            if self.pieces { " (gemm_bf16x3)" } else { "" }
        )
    }

    fn run(&self, dev: &Device) -> Vec<Out> {
        let (x, w, mut y) = self.inputs();
        if self.pieces {
            let Stored::Bf16(w) = w else {
                panic!("gemm_bf16x3 takes a bf16 weight")
            };
            ops::gemm_bf16x3(dev, &x, self.k, &w[..], self.n, &mut y, self.out).unwrap();
            return vec![Out::F32("y", y)];
        }
        ops::gemm(
            dev,
            &x,
            self.k,
            w.head(),
            self.n,
            &mut y,
            self.out,
            self.act,
        )
        .unwrap();
        vec![Out::F32("y", y)]
    }

    fn reference(&self) -> Vec<Out> {
        let (x, w, y0) = self.inputs();
        let w = w.widened();
        let mut y = vec![0f32; self.m * self.n];
        for r in 0..self.m {
            for c in 0..self.n {
                let dot: f64 = (0..self.k)
                    .map(|j| self.operand(x[r * self.k + j]) * w[c * self.k + j] as f64)
                    .sum();
                let prev = match self.out {
                    GemmOut::Overwrite => 0.0,
                    GemmOut::Accumulate => y0[r * self.n + c] as f64,
                };
                y[r * self.n + c] = (dot + prev) as f32;
            }
        }
        vec![Out::F32("y", y)]
    }

    fn tolerance(&self) -> Tol {
        let k = self.k as f32;
        let pieces = if self.act == Activations::Bf16x3 || self.pieces {
            3.0
        } else {
            1.0
        };
        let bound = pieces * k * k * f32::EPSILON / 2.0 * X_SCALE * W_SCALE;
        Tol {
            abs: bound + 4.0 * f32::EPSILON,
            rel: f32::EPSILON,
        }
    }

    /// Only the bf16 dots leave the reference's order (on the AVX512-BF16 and AMX levels):
    /// with rounded activations, and bf16x3's pieces (whose product also differs from the f32
    /// path's that the generated Rust takes under `ops::gemm`); every other instance must
    /// match the generated Rust bit for bit on every level.
    fn same_order(&self) -> bool {
        self.dtype != Dtype::Bf16 || (self.act == Activations::F32 && !self.pieces)
    }
}

/// Every GEMM case: all shapes with activations rounded to the weight's type, and the ragged
/// ones with f32 activations against 16-bit weights (the model's projections).
pub fn cases() -> Vec<Box<dyn Case>> {
    let mut out: Vec<Box<dyn Case>> = Vec::new();
    for dtype in [Dtype::Bf16, Dtype::F16] {
        for (m, n, k) in [
            (37, 150, 300),
            (1, 70, 33),
            (3, 17, 1),
            (9, 1024, 1024),
            (100, 150, 300),
            (130, 70, 33),
            // 9 row blocks of 128: a group of 8 and a last group of 1 (the grid's order).
            (1100, 70, 33),
            // Whole weight blocks and K steps with a last block of 6 rows: the fused K loop
            // over the transpose's zero rows.
            (70, 128, 256),
            // 17 whole K steps of 64: the host's fused loop in chunks of 16 steps and 1
            // (`lse-codegen/src/host/tiles/fused.rs`).
            (70, 128, 1088),
            // `gemm.xwt_exact_narrow` (at most 32 rows): whole K steps, fused, with a last
            // row block of 4 rows, and its most rows, two whole blocks of 16.
            (20, 130, 256),
            (32, 64, 128),
        ] {
            out.push(Box::new(GemmCase {
                m,
                n,
                k,
                dtype,
                out: GemmOut::Overwrite,
                act: Activations::F32,
                pieces: false,
            }));
        }
    }
    for dtype in [Dtype::Bf16, Dtype::F16, Dtype::F32] {
        for (m, n, k) in [
            (37, 150, 300),
            (1, 70, 33),
            (5, 1, 129),
            (3, 17, 1),
            (64, 128, 256),
            (9, 1024, 1024),
            (4, 3584, 1024),
            (4, 1024, 3584),
            (100, 4, 16),
            // Whole K steps and whole blocks, where the host fuses the K loop (the 0.8B
            // model's 1024 x 3584 on 64 rows; 130 x 200 x 384 has partial edge blocks too).
            (64, 1024, 3584),
            (130, 200, 384),
            // 17 whole K steps of 128: the fused loop in chunks of 16 steps and 1.
            (70, 128, 2176),
            // 10 row blocks of 64: a group of 8 and a last group of 2.
            (600, 130, 66),
            // `gemm.xwt_narrow` (at most 32 rows, blocks of 16): its most rows, whole K
            // steps (fused); a ragged last row block; 33 rows, past it, take `gemm.xwt`.
            (32, 128, 256),
            (17, 70, 384),
            (33, 64, 256),
        ] {
            out.push(Box::new(GemmCase {
                m,
                n,
                k,
                dtype,
                out: GemmOut::Overwrite,
                act: Activations::RoundedToWeight,
                pieces: false,
            }));
        }
        for (m, n, k) in [
            (33, 65, 130),
            (200, 65, 130),
            (128, 192, 256),
            (600, 65, 130),
            // The fused K loop with a last row block of 6 rows.
            (70, 128, 256),
            // `gemm.xwt_narrow`, its second row block of 16 ragged.
            (30, 65, 256),
        ] {
            out.push(Box::new(GemmCase {
                m,
                n,
                k,
                dtype,
                out: GemmOut::Accumulate,
                act: Activations::RoundedToWeight,
                pieces: false,
            }));
        }
    }
    // bf16x3: the pieces' kernels on every device on ragged shapes (m, n, k not multiples of
    // a tile; m = 1; k = 1; a K past the last whole chunk of 128), the model's widths, whole
    // shapes the host fuses (K over several chunks of 128), and accumulate; and the model's
    // route, which takes them on AMX past 32 rows.
    for (m, n, k, accumulate, pieces) in [
        (37, 150, 300, false, true),
        (1, 70, 33, false, true),
        (3, 17, 1, false, true),
        (100, 65, 200, true, true),
        (64, 128, 384, false, true),
        (130, 200, 1024, false, true),
        (64, 1024, 3584, true, true),
        (600, 130, 66, false, true),
        (33, 64, 256, false, false),
        (20, 130, 256, false, false),
        (128, 192, 256, true, false),
    ] {
        out.push(Box::new(GemmCase {
            m,
            n,
            k,
            dtype: Dtype::Bf16,
            out: if accumulate {
                GemmOut::Accumulate
            } else {
                GemmOut::Overwrite
            },
            act: Activations::Bf16x3,
            pieces,
        }));
    }
    out
}
