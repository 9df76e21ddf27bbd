//! The K-quant GEMM in integers (`gemm.xwt_<q>_q8_k.v1`, q = q4_k, q5_k, q6_k): the
//! activation rows quantized to Q8_K as three parts (`act_quant.q8_k_int`: the 8-bit values,
//! one scale per block of 256 and the sums of each 32 values), then exact integer dot
//! products with the weight's quants and sub-block scales and one f32 epilogue per block, as
//! llama.cpp's CPU backend multiplies a K-quant weight (`kernels-src/src/gemm_int.rs`).

use lse_kernels::act_quant::q8_k_int;
use lse_kernels::gemm_int::{gemm_xwt_q4_k_q8_k, gemm_xwt_q5_k_q8_k, gemm_xwt_q6_k_q8_k};

use super::quant::{QuantFormat, QuantView};
use super::{to_u32, GemmOut, OpError};
use crate::device::{DevSlice, DevSliceMut, Device};

/// Rows and columns of `y` per workgroup of the integer GEMMs (their `BM` and `BN`).
const ROWS: u32 = 48;
const COLS: u32 = 64;

/// Whether `format` has an integer GEMM (the K-quants).
pub(super) fn has_integer_gemm(format: QuantFormat) -> bool {
    matches!(
        format,
        QuantFormat::Q4_K | QuantFormat::Q5_K | QuantFormat::Q6_K
    )
}

/// `y (=|+=) x · wᵀ` for `x` `[m, k]` quantized to Q8_K and a K-quant `w` `[n, k]`, on shapes
/// the caller checked (`k` a multiple of 256, every size below 2^32, `w` in a format that
/// [`has_integer_gemm`] accepts).
pub(super) fn launch(
    dev: &Device,
    x: DevSlice<'_, f32>,
    w: QuantView<'_>,
    y: DevSliceMut<'_, f32>,
    [m, n, k]: [u32; 3],
    out: GemmOut,
) -> Result<(), OpError> {
    const OP: &str = "gemm";
    let (mu, ku) = (m as usize, k as usize);
    let blocks = to_u32(OP, "m * k / 256", mu * ku / 256)?;
    let mut xq = dev.alloc::<i32>(mu * ku)?;
    let mut xd = dev.alloc::<f32>(blocks as usize)?;
    let mut xs = dev.alloc::<f32>(blocks as usize * 8)?;
    dev.launch(
        [blocks, 1, 1],
        q8_k_int::Args {
            x,
            q: xq.view_mut(),
            d: xd.view_mut(),
            sums: xs.view_mut(),
        },
    )?;
    let accumulate = u32::from(out == GemmOut::Accumulate);
    let grid = [n.div_ceil(COLS), m.div_ceil(ROWS), 1];
    let (xq, xd, xs, words) = (xq.view(), xd.view(), xs.view(), w.words);
    match w.format {
        QuantFormat::Q4_K => dev.launch(
            grid,
            gemm_xwt_q4_k_q8_k::Args {
                xq,
                xd,
                xs,
                w: words,
                y,
                m,
                n,
                k,
                accumulate,
            },
        ),
        QuantFormat::Q5_K => dev.launch(
            grid,
            gemm_xwt_q5_k_q8_k::Args {
                xq,
                xd,
                xs,
                w: words,
                y,
                m,
                n,
                k,
                accumulate,
            },
        ),
        QuantFormat::Q6_K => dev.launch(
            grid,
            gemm_xwt_q6_k_q8_k::Args {
                xq,
                xd,
                w: words,
                y,
                m,
                n,
                k,
                accumulate,
            },
        ),
        other => {
            return Err(OpError::Invalid {
                op: OP,
                message: format!("no integer GEMM for {} weights", other.name()),
            })
        }
    }?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::{cpu_side_devices, test_values as values};
    use crate::ops::quant::tests::{bits, blocks, dequantized};
    use crate::ops::{gemm, Activations, HeadWeight, WeightView};

    /// The integer GEMM gives the same bits on every device (its integer parts are exact and
    /// its f32 epilogue has one order), and, up to f32 rounding, the f32 GEMM on the
    /// dequantized weight and the same Q8_K activations; for shapes the blocking does not
    /// divide (one row; rows past 48; columns past 64; several blocks per row, so Q6_K blocks
    /// start at half-words), overwriting and accumulating.
    #[test]
    fn integer_gemm_is_the_q8_k_product_on_every_device() {
        let devs = cpu_side_devices();
        for format in [QuantFormat::Q4_K, QuantFormat::Q5_K, QuantFormat::Q6_K] {
            for (m, n, k) in [(1, 1, 256), (3, 70, 768), (2 * 48 + 5, 129, 512)] {
                let b = blocks(format, n, k, (m * n + k) as u64);
                let w: Vec<u32> = bytemuck::pod_collect_to_vec(&b);
                let wf = dequantized(format, &b, k);
                let x = values(m * k, 3, 1.0);
                let init = values(m * n, 4, 1.0);
                let view = WeightView::Quant(QuantView {
                    format,
                    words: DevSlice::from(&w[..]),
                    len: n * k,
                });
                // Σ |x · w| per element of y: the scale of the rounding differences.
                let mags: Vec<f32> = (0..m * n)
                    .map(|i| {
                        let (r, c) = (i / n, i % n);
                        (0..k).map(|j| (x[r * k + j] * wf[c * k + j]).abs()).sum()
                    })
                    .collect();
                for out in [GemmOut::Overwrite, GemmOut::Accumulate] {
                    let mut want = init.clone();
                    let wfv = HeadWeight::F32(&wf);
                    gemm(
                        &devs[0],
                        &x[..],
                        k,
                        wfv,
                        n,
                        &mut want[..],
                        out,
                        Activations::Q8K,
                    )
                    .unwrap();
                    let mut first: Option<Vec<u32>> = None;
                    for dev in &devs {
                        let at = format!("{} {m}x{n}x{k} {out:?} on {}", format.name(), dev.arch());
                        let mut got = init.clone();
                        gemm(dev, &x[..], k, view, n, &mut got[..], out, Activations::Q8K).unwrap();
                        match &first {
                            Some(f) => assert_eq!(&bits(&got), f, "{at}"),
                            None => first = Some(bits(&got)),
                        }
                        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                            let tol = 1e-5 * (mags[i] + init[i].abs());
                            assert!((g - w).abs() <= tol, "{at} y[{i}]: {g} vs {w}");
                        }
                    }
                }
            }
        }
    }
}
