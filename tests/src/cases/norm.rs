//! Differential cases of the residual stream's kernels: the token embedding
//! (`embedding.gather_<ty>`), the RMSNorm (`norm.rmsnorm`) and the residual
//! add fused with it (`norm.add_rmsnorm`), on Qwen3.5-0.8B's width and ragged ones.
//!
//! Tolerance of the norms against the f64 reference: the sum of `d` squares in any order is
//! within `(d - 1)·u` relative (u = 2^-24), the square root halves that and adds one
//! rounding, the division and the two products add one each, so every output is within
//! `((d - 1) / 2 + 5)·u` of the reference, relative. The embedding and the residual add's
//! stored sum are exact.

use lse_runtime::device::Device;
use lse_runtime::ops;

use super::{Dtype, Stored};
use crate::diff::{Case, Out, Rng, Tol, SAME_ORDER};
use crate::reference::norm::rmsnorm;

const EPS: f32 = 1e-6;

/// The norms' relative bound for rows of `d` values.
fn norm_tol(d: usize) -> Tol {
    Tol {
        abs: 0.0,
        rel: ((d - 1) as f32 / 2.0 + 5.0) * f32::EPSILON / 2.0,
    }
}

struct NormCase {
    rows: usize,
    d: usize,
    /// `norm.add_rmsnorm` (with a residual) or `norm.rmsnorm`.
    add: bool,
    /// Scale of the inputs (tiny rows test the eps, huge ones the range).
    scale: f32,
}

impl NormCase {
    fn inputs(&self) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        let mut rng = Rng(0x6e + (self.rows * 7 + self.d) as u64);
        let x = rng.f32s(self.rows * self.d, self.scale);
        let m = rng.f32s(self.rows * self.d, self.scale);
        let w = rng.f32s(self.d, 0.5);
        (x, m, w)
    }
}

impl Case for NormCase {
    fn name(&self) -> String {
        let op = if self.add { "add_rmsnorm" } else { "rmsnorm" };
        format!("{op} rows={} d={} scale={}", self.rows, self.d, self.scale)
    }

    fn run(&self, dev: &Device) -> Vec<Out> {
        let (mut x, m, w) = self.inputs();
        let mut y = vec![f32::NAN; x.len()];
        if self.add {
            ops::add_rmsnorm(dev, &mut x, &m, &w, EPS, &mut y).unwrap();
            vec![Out::F32("x", x), Out::F32("y", y)]
        } else {
            ops::rmsnorm(dev, &x, &w, EPS, &mut y).unwrap();
            vec![Out::F32("y", y)]
        }
    }

    fn reference(&self) -> Vec<Out> {
        let (mut x, m, w) = self.inputs();
        if self.add {
            for (a, b) in x.iter_mut().zip(&m) {
                *a += b;
            }
        }
        let y = x
            .chunks(self.d)
            .flat_map(|row| rmsnorm(row, &w, EPS))
            .map(|v| v as f32)
            .collect();
        if self.add {
            vec![Out::F32("x", x), Out::F32("y", y)]
        } else {
            vec![Out::F32("y", y)]
        }
    }

    fn tolerance(&self) -> Tol {
        norm_tol(self.d)
    }
}

struct EmbedCase {
    vocab: usize,
    hidden: usize,
    ids: Vec<u32>,
    dtype: Dtype,
}

impl EmbedCase {
    fn table(&self) -> Stored {
        let mut rng = Rng(0xe3 + self.hidden as u64);
        Stored::new(&rng.f32s(self.vocab * self.hidden, 3.0), self.dtype)
    }
}

impl Case for EmbedCase {
    fn name(&self) -> String {
        format!(
            "embed_tokens vocab={} hidden={} t={} {:?}",
            self.vocab,
            self.hidden,
            self.ids.len(),
            self.dtype
        )
    }

    fn run(&self, dev: &Device) -> Vec<Out> {
        let table = self.table();
        let mut x = vec![f32::NAN; self.ids.len() * self.hidden];
        ops::embed_tokens(dev, table.head(), self.hidden, &self.ids, &mut x).unwrap();
        vec![Out::F32("x", x)]
    }

    fn reference(&self) -> Vec<Out> {
        let table = self.table().widened();
        let x = self
            .ids
            .iter()
            .flat_map(|&id| {
                let at = id as usize * self.hidden;
                table[at..at + self.hidden].to_vec()
            })
            .collect();
        vec![Out::F32("x", x)]
    }

    fn tolerance(&self) -> Tol {
        SAME_ORDER
    }
}

/// Every case of the embedding and the norms.
pub fn cases() -> Vec<Box<dyn Case>> {
    let mut out: Vec<Box<dyn Case>> = Vec::new();
    for add in [false, true] {
        for (rows, d, scale) in [
            (3, 1024, 1.0),
            (1, 1, 1.0),
            (5, 257, 4.0),
            (2, 100, 1e-5),
            (4, 600, 1e15),
            (7, 63, 1.0),
        ] {
            out.push(Box::new(NormCase {
                rows,
                d,
                add,
                scale,
            }));
        }
    }
    for dtype in [Dtype::Bf16, Dtype::F16, Dtype::F32] {
        for (vocab, hidden, ids) in [
            (50, 1024, vec![0, 49, 7, 7, 0]),
            (3, 1, vec![2, 1]),
            (10, 300, vec![9]),
        ] {
            out.push(Box::new(EmbedCase {
                vocab,
                hidden,
                ids,
                dtype,
            }));
        }
    }
    out
}
