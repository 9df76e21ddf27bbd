//! Differential cases of the full-attention layer's steps around attention itself: the q/k
//! norms with partial NeoX RoPE (`attention.qk_norm_rope`), the KV-cache write
//! (`attention.kv_write_<ty>`) and the sigmoid output gate (`attention.output_gate`).
//!
//! Tolerances against the f64 references: a normalised value is within
//! `((hd - 1) / 2 + 5)·u` relative (see `cases::norm`); a rotated one, `n_i cos - n_j sin`,
//! adds the table's cosine and sine (f32, within one rounding of the f64 values at the same
//! f32 angle) and two products and a sum, so it is within `((hd - 1) / 2 + 9)·u` of
//! `|n_i| + |n_j|`, at most twice the largest normalised value, which is at most
//! `sqrt(hd)·1.5` for weights in [-0.5, 0.5]. The gate is LOOM's `sigmoid` (2.37 ulp) times
//! one product; below x = -87 LOOM's sigmoid is 0 where the true one is under 1.7e-38, so
//! outputs (at most 3 in size) may be 0 instead of up to 5.1e-38. The cache write rounds to nearest even like `half`, so it is exact.

use half::{bf16, f16};
use lse_runtime::device::Device;
use lse_runtime::ops::{self, HeadLayout, KvCacheMut, KvRounding, RopeTable};

use super::{Dtype, Stored};
use crate::diff::{Case, Out, Rng, Tol, SAME_ORDER};
use crate::reference::norm::{rmsnorm, rope_neox, sigmoid};

const EPS: f32 = 1e-6;
const U: f32 = f32::EPSILON / 2.0;

struct QkCase {
    t: usize,
    pos0: usize,
    layout: HeadLayout,
    half: usize,
}

impl QkCase {
    fn inputs(&self) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        let l = self.layout;
        let mut rng = Rng(0x9e + (self.t * 13 + l.head_dim + l.row) as u64);
        let src = rng.f32s(self.t * l.row, 2.0);
        let w = rng.f32s(l.head_dim, 0.5);
        (src, w, ops::rope_inv_freq(1e7, 2 * self.half))
    }
}

impl Case for QkCase {
    fn name(&self) -> String {
        format!(
            "qk_norm_rope t={} pos0={} half={} {:?}",
            self.t, self.pos0, self.half, self.layout
        )
    }

    fn run(&self, dev: &Device) -> Vec<Out> {
        let (src, w, freq) = self.inputs();
        let l = self.layout;
        let rope = RopeTable::new(dev, &freq, self.pos0, self.t).unwrap();
        let mut dst = vec![f32::NAN; self.t * l.heads * l.head_dim];
        ops::qk_norm_rope(dev, &src, l, &w, EPS, &rope, &mut dst).unwrap();
        vec![Out::F32("dst", dst)]
    }

    fn reference(&self) -> Vec<Out> {
        let (src, w, freq) = self.inputs();
        let l = self.layout;
        let mut dst = Vec::new();
        for i in 0..self.t {
            for h in 0..l.heads {
                let at = i * l.row + h * l.head;
                let mut n = rmsnorm(&src[at..at + l.head_dim], &w, EPS);
                rope_neox(&mut n, &freq, self.pos0 + i);
                dst.extend(n.iter().map(|&v| v as f32));
            }
        }
        vec![Out::F32("dst", dst)]
    }

    fn tolerance(&self) -> Tol {
        let hd = self.layout.head_dim as f32;
        let rel = ((hd - 1.0) / 2.0 + 9.0) * U;
        Tol {
            abs: rel * 2.0 * hd.sqrt() * 1.5,
            rel,
        }
    }
}

struct GateCase {
    t: usize,
    heads: usize,
    head_dim: usize,
}

impl GateCase {
    fn inputs(&self) -> (Vec<f32>, Vec<f32>) {
        let mut rng = Rng(0x6a + (self.t * 5 + self.head_dim) as u64);
        let n = self.t * self.heads * self.head_dim;
        // Gates from -100 to 100 reach both saturated ends of the sigmoid.
        (rng.f32s(2 * n, 100.0), rng.f32s(n, 3.0))
    }
}

impl Case for GateCase {
    fn name(&self) -> String {
        format!(
            "output_gate t={} heads={} head_dim={}",
            self.t, self.heads, self.head_dim
        )
    }

    fn run(&self, dev: &Device) -> Vec<Out> {
        let (p, mut o) = self.inputs();
        ops::output_gate(dev, &p, self.heads, self.head_dim, &mut o).unwrap();
        vec![Out::F32("o", o)]
    }

    fn reference(&self) -> Vec<Out> {
        let (p, mut o) = self.inputs();
        let hd = self.head_dim;
        for (j, v) in o.iter_mut().enumerate() {
            let (row_head, d) = (j / hd, j % hd);
            *v = (*v as f64 * sigmoid(p[row_head * 2 * hd + hd + d])) as f32;
        }
        vec![Out::F32("o", o)]
    }

    fn tolerance(&self) -> Tol {
        Tol {
            abs: 5.1e-38,
            rel: 5.0 * f32::EPSILON,
        }
    }
}

struct KvWriteCase {
    t: usize,
    row: usize,
    pos0: usize,
    capacity: usize,
    dtype: Dtype,
    rounding: KvRounding,
}

impl KvWriteCase {
    fn inputs(&self) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        let mut rng = Rng(0x4b + (self.t * 3 + self.row) as u64);
        let k = rng.f32s(self.t * self.row, 70000.0);
        let v = rng.f32s(self.t * self.row, 1.0);
        // Rows outside the pass must keep what they held.
        let old = rng.f32s(self.capacity * self.row, 1.0);
        (k, v, old)
    }
}

impl Case for KvWriteCase {
    fn name(&self) -> String {
        format!(
            "kv_write t={} row={} pos0={} capacity={} {:?} {:?}",
            self.t, self.row, self.pos0, self.capacity, self.dtype, self.rounding
        )
    }

    fn run(&self, dev: &Device) -> Vec<Out> {
        let (k, v, old) = self.inputs();
        let (row, pos0) = (self.row, self.pos0);
        macro_rules! write {
            ($ty:ty, $variant:ident) => {{
                let mut kc: Vec<$ty> = old.iter().map(|&x| <$ty>::from_f32(x)).collect();
                let mut vc = kc.clone();
                let cache = KvCacheMut::$variant((&mut kc).into(), (&mut vc).into());
                ops::kv_write(dev, &k, &v, row, pos0, cache, self.rounding).unwrap();
                let widen = |c: Vec<$ty>| c.into_iter().map(|x| x.to_f32()).collect();
                (widen(kc), widen(vc))
            }};
        }
        let (kc, vc) = match self.dtype {
            Dtype::Bf16 => write!(bf16, Bf16),
            Dtype::F16 => write!(f16, F16),
            Dtype::F32 => {
                let (mut kc, mut vc) = (old.clone(), old.clone());
                ops::kv_write(
                    dev,
                    &k,
                    &v,
                    row,
                    pos0,
                    KvCacheMut::F32((&mut kc).into(), (&mut vc).into()),
                    self.rounding,
                )
                .unwrap();
                (kc, vc)
            }
        };
        vec![Out::F32("k_cache", kc), Out::F32("v_cache", vc)]
    }

    fn reference(&self) -> Vec<Out> {
        let (k, v, old) = self.inputs();
        let at = self.pos0 * self.row..(self.pos0 + self.t) * self.row;
        let mut kc = Stored::new(&old, self.dtype).widened();
        let mut vc = kc.clone();
        // Through f16, an f32 cache holds f16's values (70000 becomes infinite); 16-bit
        // caches round to their own dtype either way.
        let written = match (self.rounding, self.dtype) {
            (KvRounding::F32ThroughF16, Dtype::F32) => Dtype::F16,
            _ => self.dtype,
        };
        kc[at.clone()].copy_from_slice(&Stored::new(&k, written).widened());
        vc[at].copy_from_slice(&Stored::new(&v, written).widened());
        vec![Out::F32("k_cache", kc), Out::F32("v_cache", vc)]
    }

    fn tolerance(&self) -> Tol {
        SAME_ORDER
    }
}

/// Every case of the attention layer's elementwise steps.
pub fn cases() -> Vec<Box<dyn Case>> {
    let mut out: Vec<Box<dyn Case>> = Vec::new();
    // Queries inside [q | gate] pairs (0.8B: 8 heads of 256, 32 rotated pairs), keys packed,
    // ragged head sizes, no rotation, positions far into a long context.
    let q_layout = |heads: usize, hd: usize| HeadLayout {
        heads,
        head_dim: hd,
        row: 2 * heads * hd,
        head: 2 * hd,
    };
    let k_layout = |heads: usize, hd: usize| HeadLayout {
        heads,
        head_dim: hd,
        row: heads * hd,
        head: hd,
    };
    for (t, pos0, layout, half) in [
        (3, 0, q_layout(8, 256), 32),
        (5, 17, k_layout(2, 256), 32),
        (1, 131_000, q_layout(3, 72), 36),
        (4, 9, k_layout(1, 33), 8),
        (2, 0, k_layout(5, 1), 0),
        (6, 500, q_layout(2, 65), 0),
    ] {
        out.push(Box::new(QkCase {
            t,
            pos0,
            layout,
            half,
        }));
    }
    for (t, heads, head_dim) in [(3, 8, 256), (1, 1, 1), (5, 3, 65)] {
        out.push(Box::new(GateCase { t, heads, head_dim }));
    }
    for dtype in [Dtype::Bf16, Dtype::F16, Dtype::F32] {
        for rounding in [KvRounding::CacheDtype, KvRounding::F32ThroughF16] {
            for (t, row, pos0, capacity) in [(3, 512, 2, 8), (1, 1, 0, 1), (4, 300, 5, 9)] {
                out.push(Box::new(KvWriteCase {
                    t,
                    row,
                    pos0,
                    capacity,
                    dtype,
                    rounding,
                }));
            }
        }
    }
    out
}
