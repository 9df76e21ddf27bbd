//! Differential cases of llama.cpp's activation quantization (`act_quant.q8_0`,
//! `act_quant.q8_k`) against plain-Rust transcriptions of ggml's x86 `quantize_row_q8_0` and
//! `quantize_row_q8_K_ref`, bit for bit: the kernels have no dot, and every step is one f32
//! operation (a maximum, a division, an f16 rounding, a product, a round to nearest even).

use half::f16;
use lse_runtime::device::Device;
use lse_runtime::ops::{self, Activations};

use crate::diff::{Case, Out, Rng, Tol, SAME_ORDER};

/// ggml's Q8_0 (and Q8_1) block of 32 as values: `f16(amax / 127) · round(v · 127 / amax)`.
fn q8_0(block: &[f32]) -> Vec<f32> {
    let amax = block.iter().fold(0.0f32, |a, v| a.max(v.abs()));
    let d = f16::from_f32(amax / 127.0).to_f32();
    let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
    block
        .iter()
        .map(|v| d * (v * id).round_ties_even())
        .collect()
}

/// ggml's Q8_K block of 256 as values: `max` the first value of the largest magnitude,
/// `iscale = -127 / max`, `(1 / iscale) · min(127, round(iscale · v))`.
fn q8_k(block: &[f32]) -> Vec<f32> {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in block {
        if v.abs() > amax {
            (amax, max) = (v.abs(), v);
        }
    }
    if amax == 0.0 {
        return vec![0.0; block.len()];
    }
    let iscale = -127.0 / max;
    let d = 1.0 / iscale;
    block
        .iter()
        .map(|v| d * (iscale * v).round_ties_even().min(127.0))
        .collect()
}

#[derive(Debug)]
struct QuantCase {
    act: Activations,
    rows: usize,
    k: usize,
}

impl QuantCase {
    /// Values of mixed magnitudes with exact ties of the rounding (a block whose largest value
    /// is 127 · 2^-3, so `v · 127 / amax` lands on halves), an all-zero block, a block whose
    /// largest magnitude is negative and appears twice, and subnormal-scale blocks.
    fn input(&self) -> Vec<f32> {
        let mut rng = Rng(0x8a + (self.rows * 1000 + self.k) as u64);
        let mut x = rng.f32s(self.rows * self.k, 4.0);
        let block = if self.act == Activations::Q8_0 {
            32
        } else {
            256
        };
        for (b, chunk) in x.chunks_mut(block).enumerate() {
            match b % 5 {
                0 => {
                    for (i, v) in chunk.iter_mut().enumerate() {
                        *v = (i as f32 - 10.5) * 0.125;
                    }
                    chunk[block - 1] = 127.0 * 0.125;
                }
                1 => chunk.fill(0.0),
                2 => {
                    chunk[3] = -9.0;
                    chunk[block - 2] = -9.0;
                    chunk[7] = 9.0 - f32::EPSILON;
                }
                3 => chunk.iter_mut().for_each(|v| *v *= 1e-38),
                _ => {}
            }
        }
        x
    }
}

impl Case for QuantCase {
    fn name(&self) -> String {
        format!("{self:?}")
    }

    fn run(&self, dev: &Device) -> Vec<Out> {
        let x = self.input();
        let mut y = vec![f32::NAN; x.len()];
        ops::quantize_activations(dev, &x, self.k, self.act, &mut y).unwrap();
        vec![Out::F32("y", y)]
    }

    fn reference(&self) -> Vec<Out> {
        let x = self.input();
        let y = match self.act {
            Activations::Q8_0 => x.chunks(32).flat_map(q8_0).collect(),
            _ => x.chunks(256).flat_map(q8_k).collect(),
        };
        vec![Out::F32("y", y)]
    }

    fn tolerance(&self) -> Tol {
        SAME_ORDER
    }
}

/// Every activation-quantization case: one row, several rows, Qwen3.5-0.8B's widths.
pub fn cases() -> Vec<Box<dyn Case>> {
    let mut out: Vec<Box<dyn Case>> = Vec::new();
    for (act, shapes) in [
        (Activations::Q8_0, [(1, 32), (3, 96), (5, 1024), (2, 3584)]),
        (Activations::Q8K, [(1, 256), (3, 512), (5, 1024), (2, 3584)]),
    ] {
        for (rows, k) in shapes {
            out.push(Box::new(QuantCase { act, rows, k }));
        }
    }
    out
}
