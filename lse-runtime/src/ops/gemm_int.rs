//! The quantized GEMMs in integers (`gemm.xwt_<q>_q8_k`, q = q4_k, q5_k, q6_k, and
//! `gemm.xwt_q8_0_q8_0`): the activation rows quantized to Q8_K (Q8_0 for a Q8_0 weight) as
//! parts (`act_quant.q8_k_int` / `q8_0_int`: the 8-bit values, one scale per block and the
//! sums of each 32 values, for Q8_K also of each 16), then exact integer dot products with
//! the weight's quants and sub-block scales and one f32 epilogue per block, as llama.cpp's CPU
//! backend multiplies such a weight (`kernels-src/src/gemm_int.rs`). The kernels read the
//! weight interleaved by 64 rows ([`interleave`], done once at load).

use lse_kernels::act_quant::{gather_rows, q8_0_int, q8_k_int};
use lse_kernels::gemm_int::{
    gemm_xwt_q4_0_q8_0_bm16, gemm_xwt_q4_0_q8_0_bm64, gemm_xwt_q4_k_q8_k_bm16,
    gemm_xwt_q4_k_q8_k_bm64, gemm_xwt_q5_0_q8_0_bm16, gemm_xwt_q5_0_q8_0_bm64,
    gemm_xwt_q5_k_q8_k_bm16, gemm_xwt_q5_k_q8_k_bm64, gemm_xwt_q6_k_q8_k_bm16,
    gemm_xwt_q6_k_q8_k_bm64, gemm_xwt_q8_0_q8_0_bm16, gemm_xwt_q8_0_q8_0_bm64,
};

use rayon::prelude::*;

use super::gemm::NARROW_ROWS;
use super::quant::{Interleaved, QuantFormat, QuantView};
use super::{to_u32, Activations, ExpertsJob, GemmOut, OpError};
use crate::device::{DevSlice, DevSliceMut, Device, Scratch};

/// Rows and columns of `y` per workgroup of the integer GEMMs (their `BM` and `BN`); the
/// weight's rows are interleaved in groups of `COLS`.
const ROWS: u32 = 64;
const COLS: u32 = 64;

/// The activations `format`'s integer GEMM takes (Q8_K for the K-quants, Q8_0 for Q4_0, Q5_0
/// and Q8_0, as llama.cpp's `vec_dot_type`), or `None` when it has none.
pub fn integer_gemm_activations(format: QuantFormat) -> Option<Activations> {
    match format {
        QuantFormat::Q4_K | QuantFormat::Q5_K | QuantFormat::Q6_K => Some(Activations::Q8K),
        QuantFormat::Q4_0 | QuantFormat::Q5_0 | QuantFormat::Q8_0 => Some(Activations::Q8_0),
        _ => None,
    }
}

/// `matrices` matrices of `rows` x `cols` values of `format` (`bytes`, the blocks of each
/// row in order, the matrices one after another) interleaved by 64 rows, as the integer GEMMs
/// read them: each block's bytes zero-padded to [`QuantFormat::slot_words`] words `W`, and
/// word `t` of block `sb` of row `g · 64 + c` of a matrix at `((g · B + sb) · W + t) · 64 + c`
/// of that matrix's words (`B` blocks per row), the last group of each matrix padded with
/// zero rows (whose values are 0). `None` when `bytes` does not hold exactly those values.
pub fn interleave(
    format: QuantFormat,
    bytes: &[u8],
    matrices: usize,
    rows: usize,
    cols: usize,
) -> Option<Vec<u32>> {
    let mut out = vec![0u32; interleaved_len(format, matrices, rows, cols)?];
    interleave_into(format, bytes, matrices, rows, cols, &mut out)?;
    Some(out)
}

/// The number of words [`interleave`] makes of `matrices` matrices of `rows` x `cols` values
/// of `format`: `None` when `cols` is not whole blocks or the count passes `usize`.
pub fn interleaved_len(
    format: QuantFormat,
    matrices: usize,
    rows: usize,
    cols: usize,
) -> Option<usize> {
    let per_row = cols
        .is_multiple_of(format.block_elems())
        .then(|| cols / format.block_elems())?;
    64usize
        .checked_mul(per_row)?
        .checked_mul(format.slot_words())?
        .checked_mul(rows.div_ceil(64))?
        .checked_mul(matrices)
}

/// [`interleave`] into `out`, which must hold [`interleaved_len`] words (its values before
/// do not matter: every word is written), each group of 64 rows on its own core. Filling a
/// device buffer in place this way saves the copy and first touching twice the pages (in a
/// 1-chunk run of the 0.8B-shaped Q8_0 file a third of the samples had been the kernel
/// clearing those pages).
/// `None`, with `out` untouched, when `bytes` or `out` has another size.
pub fn interleave_into(
    format: QuantFormat,
    bytes: &[u8],
    matrices: usize,
    rows: usize,
    cols: usize,
    out: &mut [u32],
) -> Option<()> {
    let (size, slot) = (format.block_bytes(), format.slot_words());
    let per_row = cols / format.block_elems();
    let row_bytes = per_row * size;
    let len = interleaved_len(format, matrices, rows, cols)?;
    if out.len() != len || bytes.len() != matrices.checked_mul(rows)?.checked_mul(row_bytes)? {
        return None;
    }
    let group = 64 * per_row * slot;
    let groups = rows.div_ceil(64);
    if group == 0 {
        return Some(());
    }
    out.par_chunks_mut(group).enumerate().for_each(|(i, dst)| {
        let (mat, g) = (i / groups, i % groups);
        let mut block = vec![0u8; 4 * slot];
        for c in 0..64 {
            let r = g * 64 + c;
            let row = (r < rows).then(|| &bytes[(mat * rows + r) * row_bytes..][..row_bytes]);
            for sb in 0..per_row {
                match row {
                    Some(row) => block[..size].copy_from_slice(&row[sb * size..][..size]),
                    None => block.fill(0),
                }
                for (t, word) in block.chunks_exact(4).enumerate() {
                    let w = u32::from_le_bytes([word[0], word[1], word[2], word[3]]);
                    dst[(sb * slot + t) * 64 + c] = w;
                }
            }
        }
    });
    Some(())
}

/// The activation rows quantized for the integer GEMMs (`act_quant.q8_k_int` or
/// `q8_0_int`): the 8-bit values in the kernels' tile order, one scale per block and the
/// sums per 32 values. Made once, it serves every integer GEMM on the same rows (q, k and v;
/// gate and up), as llama.cpp quantizes a shared input once.
pub(super) struct QuantizedRows<'d> {
    q: Scratch<'d, i32>,
    d: Scratch<'d, f32>,
    /// Q8_0's sums per block (exact in f32); a 1-element buffer for Q8_K.
    sums: Scratch<'d, f32>,
    /// Q8_K's integer sums per 32 values (the Q4_K and Q5_K GEMMs'); 1 element for Q8_0.
    sums32: Scratch<'d, i32>,
    /// Q8_K's integer sums per 16 values times -32, row by row (the Q6_K GEMM's row
    /// offsets), for whole blocks of rows; a 1-element buffer for Q8_0.
    offsets16: Scratch<'d, i32>,
    /// Whether the rows are Q8_0's (or Q8_K's).
    q8_0: bool,
    m: u32,
    k: u32,
}

/// The values of a row that lie together in the activation kernels' tile order: four blocks
/// of Q8_0 (128), a block of Q8_K (256).
fn run_values(q8_0: bool) -> u32 {
    if q8_0 {
        128
    } else {
        256
    }
}

/// The words of `act_quant`'s `q` for `rows` rows (in whole blocks of [`ROWS`]) of `k` values:
/// each row's runs ([`run_values`]) whole, the last one padded.
fn q_words(rows: usize, k: usize, q8_0: bool) -> usize {
    let run = run_values(q8_0) as usize;
    rows.div_ceil(ROWS as usize) * ROWS as usize * k.div_ceil(run) * run / 4
}

/// Quantizes `x` (`[m, k]`, checked by the caller) as `act` (Q8_0 or Q8_K, from
/// [`integer_gemm_activations`]) for the integer GEMMs, into the device's scratch buffers
/// (the padding rows of the last block of rows hold whatever an earlier user left: the
/// GEMMs' results leave them out).
pub(super) fn quantize<'d>(
    dev: &'d Device,
    x: DevSlice<'_, f32>,
    act: Activations,
    [m, k]: [u32; 2],
) -> Result<QuantizedRows<'d>, OpError> {
    const OP: &str = "gemm";
    // Q8_0 activations come in blocks of 32 with one f32 sum each, Q8_K in blocks of 256
    // with an integer sum per 32 and per 16 values.
    let q8_0 = act == Activations::Q8_0;
    let block = if q8_0 { 32 } else { 256 };
    let (mu, ku) = (m as usize, k as usize);
    let blocks = to_u32(OP, "m * k / block", mu * ku / block)?;
    let per_block = |n: usize, q8_0_has: bool| {
        if q8_0 == q8_0_has {
            blocks as usize * n
        } else {
            1
        }
    };
    // The activation kernels' layout: rows in blocks of `ROWS`, the last one padded; four
    // values to a word (and Q8_K's offsets a word per 16 values).
    let padded_rows = mu.div_ceil(ROWS as usize) * ROWS as usize;
    let mut xq = dev.scratch::<i32>(q_words(mu, ku, q8_0))?;
    let mut xd = dev.scratch::<f32>(blocks as usize)?;
    let mut xs = dev.scratch::<f32>(per_block(1, true))?;
    let mut xs32 = dev.scratch::<i32>(per_block(8, false))?;
    let mut xo16 = dev.scratch::<i32>(if q8_0 { 1 } else { padded_rows * ku / 16 })?;
    let (q, d) = (xq.view_mut(), xd.view_mut());
    if q8_0 {
        let sums = xs.view_mut();
        let args = q8_0_int::Args {
            x,
            q,
            d,
            sums,
            blocks,
            k,
        };
        // Eight blocks a workgroup.
        dev.launch([blocks.div_ceil(8), 1, 1], args)?;
    } else {
        let (sums, offsets16) = (xs32.view_mut(), xo16.view_mut());
        let args = q8_k_int::Args {
            x,
            q,
            d,
            sums,
            offsets16,
            k,
        };
        dev.launch([blocks, 1, 1], args)?;
    }
    Ok(QuantizedRows {
        q: xq,
        d: xd,
        sums: xs,
        sums32: xs32,
        offsets16: xo16,
        q8_0,
        m,
        k,
    })
}

/// The rows `rows` of the quantized `x` (row `i` of the result is row `rows[i]` of `x`, each
/// below `x.m`) in new scratch buffers (`act_quant.gather_rows`): bit for bit the quantization
/// of the gathered rows, since each row is quantized on its own.
pub(super) fn gather<'d>(
    dev: &'d Device,
    x: &QuantizedRows<'_>,
    rows: &[u32],
) -> Result<QuantizedRows<'d>, OpError> {
    const OP: &str = "act_quant.gather_rows";
    let m = to_u32(OP, "rows", rows.len())?;
    if let Some((i, &r)) = rows.iter().enumerate().find(|&(_, &r)| r >= x.m) {
        return Err(OpError::Invalid {
            op: OP,
            message: format!("row {i} gathers row {r} of {} quantized rows", x.m),
        });
    }
    let (mu, k) = (rows.len(), x.k);
    let ku = k as usize;
    // Per row: the scales, Q8_0's sums, Q8_K's sums per 32 and offsets per 16.
    let (dl, sl, s32l, ol) = match x.q8_0 {
        true => (k / 32, k / 32, 0, 0),
        false => (k / 256, 0, k / 32, k / 16),
    };
    let padded_rows = mu.div_ceil(ROWS as usize) * ROWS as usize;
    let part = |len: usize| len.max(1);
    let mut q = dev.scratch::<i32>(q_words(mu, ku, x.q8_0))?;
    let mut d = dev.scratch::<f32>(mu * dl as usize)?;
    let mut sums = dev.scratch::<f32>(part(mu * sl as usize))?;
    let mut sums32 = dev.scratch::<i32>(part(mu * s32l as usize))?;
    let mut offsets16 = dev.scratch::<i32>(part(padded_rows * ol as usize))?;
    if m > 0 {
        let args = gather_rows::Args {
            q: x.q.view(),
            d: x.d.view(),
            sums: x.sums.view(),
            sums32: x.sums32.view(),
            offsets16: x.offsets16.view(),
            rows,
            gq: q.view_mut(),
            gd: d.view_mut(),
            gsums: sums.view_mut(),
            gsums32: sums32.view_mut(),
            goffsets16: offsets16.view_mut(),
            k,
            qw_log2: (run_values(x.q8_0) / 4).trailing_zeros(),
            dl,
            sl,
            s32l,
            ol,
        };
        dev.launch([m, 1, 1], args)?;
    }
    Ok(QuantizedRows {
        q,
        d,
        sums,
        sums32,
        offsets16,
        q8_0: x.q8_0,
        m,
        k,
    })
}

/// Which weight each block of rows of an integer GEMM multiplies.
#[derive(Clone, Copy, Debug)]
pub(super) enum RowWeights<'e> {
    /// Every row on the one matrix `w` holds.
    One,
    /// Block `b` of [`NARROW_ROWS`] rows on matrix `table[b]` of `w`, `stride` words after the
    /// one before it (a mixture of experts' routed products).
    Experts { table: &'e [u32], stride: u32 },
}

/// `y (=|+=) x · wᵀ` for the quantized rows `x` and the interleaved `format` weight `w`
/// (`[n, x.k]`, or each expert's when `rows` names them), `y` `[x.m, n]`, on shapes the caller
/// checked; `x` must be quantized as [`integer_gemm_activations`] says for `format`. The
/// experts' products take the kernels' instance of 16 rows per workgroup (`_bm16`), a product
/// of one weight the one of 64 (`_bm64`): on few rows of one weight (`--ubatch-size 32`) the
/// 16-row instance, which streams the weight once per 16 rows, was no faster (the weight's
/// unpacking, not the byte dots, takes most of such a product).
#[allow(clippy::too_many_arguments)]
pub(super) fn launch_quantized(
    dev: &Device,
    x: &QuantizedRows<'_>,
    format: QuantFormat,
    w: Interleaved<'_>,
    y: DevSliceMut<'_, f32>,
    n: u32,
    out: GemmOut,
    rows: RowWeights<'_>,
) -> Result<(), OpError> {
    const OP: &str = "gemm";
    let (m, k) = (x.m, x.k);
    let accumulate = u32::from(out == GemmOut::Accumulate);
    let one_weight;
    let (narrow, experts, w_stride) = match rows {
        RowWeights::Experts { table, stride } => (true, table, stride),
        RowWeights::One => {
            one_weight = vec![0u32; m.div_ceil(ROWS) as usize];
            (false, &one_weight[..], 0)
        }
    };
    // The 16-row instances run column blocks fastest (grid x), the 64-row ones row blocks.
    let grid = match narrow {
        true => [n.div_ceil(COLS), m.div_ceil(NARROW_ROWS as u32), 1],
        false => [m.div_ceil(ROWS), n.div_ceil(COLS), 1],
    };
    let (xq, xd, w) = (x.q.view(), x.d.view(), w.words);
    macro_rules! args {
        ($kernel:ident, $sums:ident: $buf:ident) => {
            $kernel::Args {
                xq,
                xd,
                $sums: x.$buf.view(),
                w,
                experts,
                y,
                m,
                n,
                k,
                w_stride,
                accumulate,
            }
        };
    }
    match (format, narrow) {
        (QuantFormat::Q4_K, false) => dev.launch(grid, args!(gemm_xwt_q4_k_q8_k_bm64, xs: sums32)),
        (QuantFormat::Q4_K, true) => dev.launch(grid, args!(gemm_xwt_q4_k_q8_k_bm16, xs: sums32)),
        (QuantFormat::Q5_K, false) => dev.launch(grid, args!(gemm_xwt_q5_k_q8_k_bm64, xs: sums32)),
        (QuantFormat::Q5_K, true) => dev.launch(grid, args!(gemm_xwt_q5_k_q8_k_bm16, xs: sums32)),
        (QuantFormat::Q6_K, false) => {
            dev.launch(grid, args!(gemm_xwt_q6_k_q8_k_bm64, xo16: offsets16))
        }
        (QuantFormat::Q6_K, true) => {
            dev.launch(grid, args!(gemm_xwt_q6_k_q8_k_bm16, xo16: offsets16))
        }
        (QuantFormat::Q4_0, false) => dev.launch(grid, args!(gemm_xwt_q4_0_q8_0_bm64, xs: sums)),
        (QuantFormat::Q4_0, true) => dev.launch(grid, args!(gemm_xwt_q4_0_q8_0_bm16, xs: sums)),
        (QuantFormat::Q5_0, false) => dev.launch(grid, args!(gemm_xwt_q5_0_q8_0_bm64, xs: sums)),
        (QuantFormat::Q5_0, true) => dev.launch(grid, args!(gemm_xwt_q5_0_q8_0_bm16, xs: sums)),
        (QuantFormat::Q8_0, false) => dev.launch(grid, args!(gemm_xwt_q8_0_q8_0_bm64, xs: sums)),
        (QuantFormat::Q8_0, true) => dev.launch(grid, args!(gemm_xwt_q8_0_q8_0_bm16, xs: sums)),
        (other, _) => {
            return Err(OpError::Invalid {
                op: OP,
                message: format!("no integer GEMM for {} weights", other.name()),
            })
        }
    }?;
    Ok(())
}

/// The interleaved words of [`super::gemm_experts`]' quantized job `j` as the integer GEMM's
/// experts read them: its format, the first expert's matrix (from `j.offset`'s rows) and the
/// words between two experts' matrices, after checking that the weight is interleaved for
/// `act`, that `j.stride` is one whole matrix, `j.offset` a multiple of 64 rows inside it and
/// expert `most`'s matrix inside the words and indexable in `u32`.
pub(super) fn experts_weight<'a>(
    q: QuantView<'a>,
    act: Activations,
    j: &ExpertsJob<'a>,
    k: usize,
    most: u32,
) -> Result<(QuantFormat, Interleaved<'a>, u32), OpError> {
    let invalid = |message: String| OpError::Invalid {
        op: "gemm_experts",
        message,
    };
    let f = q.format;
    let Some(il) = q
        .interleaved
        .filter(|il| integer_gemm_activations(f) == Some(act) && il.cols == k)
    else {
        return Err(invalid(format!(
            "the experts' {} weight must be interleaved for the integer GEMM, with rows of \
             k = {k} values met by its activations ({act:?} given)",
            f.name()
        )));
    };
    let matrix = il.rows * k;
    if j.stride != matrix || !j.offset.is_multiple_of(64 * k) || j.offset + j.n * k > matrix {
        return Err(invalid(format!(
            "the experts' {} x {k} matrices must be whole {} x {k} matrices of the weight, \
             starting at a multiple of 64 rows (stride {}, offset {})",
            j.n, il.rows, j.stride, j.offset
        )));
    }
    // Words per matrix and per group of 64 rows, as `interleave` lays them out (an
    // interleaved weight's rows are whole blocks, so both exist).
    let words_of = |rows| {
        interleaved_len(f, 1, rows, k)
            .ok_or_else(|| invalid(format!("{rows} x {k} {} values pass usize", f.name())))
    };
    let (matrix_words, group) = (words_of(il.rows)?, words_of(64)?);
    let start = j.offset / (64 * k) * group;
    let end = (most as usize)
        .checked_mul(matrix_words)
        .and_then(|v| v.checked_add(start + j.n.div_ceil(64) * group))
        .filter(|&end| end <= il.words.len() && u32::try_from(end).is_ok())
        .ok_or_else(|| {
            invalid(format!(
                "expert {most}'s matrix passes the {} weight's {} interleaved words (or 2^32)",
                f.name(),
                il.words.len()
            ))
        })?;
    let words = il.words.sub(start..end)?;
    let w = Interleaved {
        words,
        rows: j.n,
        cols: k,
    };
    Ok((
        f,
        w,
        to_u32("gemm_experts", "the experts' stride", matrix_words)?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::{cpu_side_devices, test_values as values, Pool};
    use crate::ops::quant::tests::{bits, blocks, dequantized};
    use crate::ops::{gemm, Activations, HeadWeight, QuantView, WeightView};

    /// The formats the integer GEMMs take.
    const INTEGER_FORMATS: [QuantFormat; 6] = [
        QuantFormat::Q4_K,
        QuantFormat::Q5_K,
        QuantFormat::Q6_K,
        QuantFormat::Q4_0,
        QuantFormat::Q5_0,
        QuantFormat::Q8_0,
    ];

    /// `x · wᵀ` (`x` `[m, k]`, `w` `[n, k]`) into a fresh `[m, n]` buffer, by `gemm`.
    fn product(
        dev: &Device,
        x: &[f32],
        k: usize,
        w: WeightView<'_>,
        n: usize,
        act: Activations,
    ) -> Vec<f32> {
        let mut y = vec![0.0f32; x.len() / k * n];
        gemm(dev, x, k, w, n, &mut y[..], GemmOut::Overwrite, act).unwrap();
        y
    }

    /// `format` weight `w` (`[n, k]`) with its interleaved copy `packed`, as the GEMMs take it.
    fn interleaved_view<'a>(
        format: QuantFormat,
        w: &'a [u32],
        packed: &'a [u32],
        n: usize,
        k: usize,
    ) -> WeightView<'a> {
        WeightView::Quant(QuantView {
            format,
            words: DevSlice::from(w),
            len: n * k,
            interleaved: Some(Interleaved {
                words: DevSlice::from(packed),
                rows: n,
                cols: k,
            }),
        })
    }

    /// The integer GEMMs (K-quants, Q8_0) give the same bits on every device (their integer
    /// parts are exact and their f32 epilogues have one order), and, up to f32 rounding, the
    /// f32 GEMM on the dequantized weight and the same quantized activations; for shapes the
    /// blocking does not divide (one row; rows past 64; columns past 64; several blocks per
    /// row, so Q6_K blocks start at half-words) and one it divides (two whole blocks of 64
    /// rows, one of 64 columns), overwriting and accumulating.
    #[test]
    fn integer_gemms_are_the_quantized_product_on_every_device() {
        let devs = cpu_side_devices();
        for format in INTEGER_FORMATS {
            let act = integer_gemm_activations(format).unwrap();
            // Q8_0's rows of 160 end in a run of one block of 32 (the GEMMs' last step of
            // four blocks has three past the row).
            let ragged = (act == Activations::Q8_0).then_some((2 * 64 + 5, 70, 160));
            for (m, n, k) in [
                (1, 1, 256),
                (3, 70, 768),
                (2 * 64 + 5, 129, 512),
                (128, 64, 256),
            ]
            .into_iter()
            .chain(ragged)
            {
                let b = blocks(format, n, k, (m * n + k) as u64);
                let w: Vec<u32> = bytemuck::pod_collect_to_vec(&b);
                let packed = interleave(format, &b, 1, n, k).unwrap();
                let wf = dequantized(format, &b, k);
                let x = values(m * k, 3, 1.0);
                let init = values(m * n, 4, 1.0);
                let view = interleaved_view(format, &w, &packed, n, k);
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
                    gemm(&devs[0], &x[..], k, wfv, n, &mut want[..], out, act).unwrap();
                    let mut first: Option<Vec<u32>> = None;
                    for dev in &devs {
                        let at = format!("{} {m}x{n}x{k} {out:?} on {}", format.name(), dev.arch());
                        let mut got = init.clone();
                        gemm(dev, &x[..], k, view, n, &mut got[..], out, act).unwrap();
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

    /// `gemm_experts` on quantized experts multiplies each block of 16 rows by its expert's
    /// matrix with the integer GEMM's 16-row instance, giving the bits of the 64-row instance
    /// (`gemm`) on all rows and that expert and on the block alone, on every CPU-side device,
    /// for each integer format: a
    /// stacked tensor of three experts of 70 rows (each matrix padded to 128 interleaved
    /// rows) and the up half of a fused one of 2 x 64 rows, an expert no block takes.
    #[test]
    fn quantized_expert_products_are_each_blocks_product_with_its_expert() {
        let experts = [2u32, 2, 0, 2];
        let (m, k) = (experts.len() * NARROW_ROWS, 512);
        let x = values(m * k, 7, 1.0);
        for format in INTEGER_FORMATS {
            let act = integer_gemm_activations(format).unwrap();
            // (rows of each matrix, rows of the product, offset in rows)
            for (rows, n, first) in [(70, 70, 0), (128, 64, 64)] {
                let b = blocks(format, 3 * rows, k, rows as u64);
                let w: Vec<u32> = bytemuck::pod_collect_to_vec(&b);
                let packed = interleave(format, &b, 3, rows, k).unwrap();
                let mut view = interleaved_view(format, &w, &packed, 3 * rows, k);
                if let WeightView::Quant(q) = &mut view {
                    q.interleaved.as_mut().unwrap().rows = rows;
                }
                for dev in cpu_side_devices() {
                    let at = format!("{} {rows}/{n} on {}", format.name(), dev.arch());
                    let mut y = vec![0.0f32; m * n];
                    let job = ExpertsJob {
                        w: view,
                        n,
                        stride: rows * k,
                        offset: first * k,
                        y: DevSliceMut::from(&mut y[..]),
                    };
                    crate::ops::gemm_experts(&dev, &x, k, &experts, act, vec![job]).unwrap();
                    for (blk, &e) in experts.iter().enumerate() {
                        let start = (e as usize * rows + first) * k;
                        let matrix = view.sub(start..start + n * k).unwrap();
                        let all = product(&dev, &x, k, matrix, n, act);
                        let r = blk * NARROW_ROWS..(blk + 1) * NARROW_ROWS;
                        let alone = product(&dev, &x[r.start * k..r.end * k], k, matrix, n, act);
                        let got = bits(&y[r.start * n..r.end * n]);
                        assert_eq!(got, bits(&all[r.start * n..r.end * n]), "{at} block {blk}");
                        assert_eq!(got, bits(&alone), "{at} block {blk} alone");
                    }
                }
            }
        }
    }

    /// `gemm_experts_gathered` (the tokens' rows quantized once, the quantized rows gathered
    /// by `act_quant.gather_rows`) gives the bits of `moe_gather` then `gemm_experts` on every
    /// CPU-side device, for each integer format: 70 tokens (two blocks of 64 rows, the last
    /// partial), 3 of 5 experts per token, one expert no token chooses, padding rows. Token
    /// rows of another count than the routing's are refused, naming them.
    #[test]
    fn experts_products_on_gathered_quantized_rows_are_those_on_gathered_rows() {
        let (tokens, k, rows) = (70usize, 512usize, 64usize);
        let x = values(tokens * k, 5, 2.0);
        let ids: Vec<u32> = (0..tokens * 3)
            .map(|i| [0, 2, 3, 4][(i * 7 + i / 3) % 4])
            .collect();
        let routing = crate::ops::Routing {
            k: 3,
            num_experts: 5,
            weights: vec![0.5; ids.len()],
            ids,
        };
        let slots = crate::ops::ExpertSlots::aligned(&routing, NARROW_ROWS).unwrap();
        let experts = slots.block_experts();
        let m = slots.len();
        for format in INTEGER_FORMATS {
            let act = integer_gemm_activations(format).unwrap();
            let b = blocks(format, 5 * rows, k, 9);
            let w: Vec<u32> = bytemuck::pod_collect_to_vec(&b);
            let packed = interleave(format, &b, 5, rows, k).unwrap();
            let mut view = interleaved_view(format, &w, &packed, 5 * rows, k);
            if let WeightView::Quant(q) = &mut view {
                q.interleaved.as_mut().unwrap().rows = rows;
            }
            for dev in cpu_side_devices() {
                let at = format!("{} on {}", format.name(), dev.arch());
                let job = |y| ExpertsJob {
                    w: view,
                    n: rows,
                    stride: rows * k,
                    offset: 0,
                    y: DevSliceMut::from(y),
                };
                // Token rows of another count than the slots were routed from are refused.
                let mut refused = vec![0.0f32; m * rows];
                let jobs = vec![job(&mut refused[..])];
                let short = &x[..(tokens - 1) * k];
                let err =
                    crate::ops::gemm_experts_gathered(&dev, short, k, &slots, &experts, act, jobs)
                        .unwrap_err()
                        .to_string();
                let want_err = format!(
                    "gemm_experts: x has {} elements, expected {}",
                    (tokens - 1) * k,
                    tokens * k
                );
                assert_eq!(err, want_err, "{at}");
                let mut xs = vec![0.0f32; m * k];
                crate::ops::moe_gather(&dev, &x[..], k, &slots, &mut xs[..]).unwrap();
                let mut want = vec![0.0f32; m * rows];
                let jobs = vec![job(&mut want[..])];
                crate::ops::gemm_experts(&dev, &xs, k, &experts, act, jobs).unwrap();
                let mut got = vec![f32::NAN; m * rows];
                let jobs = vec![job(&mut got[..])];
                crate::ops::gemm_experts_gathered(&dev, &x, k, &slots, &experts, act, jobs)
                    .unwrap();
                assert_eq!(bits(&got), bits(&want), "{at}");
            }
        }
    }

    /// `act_quant.gather_rows` copies every part of the rows it is given, Q8_0's and Q8_K's,
    /// in any order and repeated, on every CPU-side device, and refuses a row past the
    /// quantized ones, naming it.
    #[test]
    fn gathered_quantized_rows_are_the_quantized_gathered_rows() {
        let (tokens, k) = (50usize, 512usize);
        let x = values(tokens * k, 3, 4.0);
        let rows: Vec<u32> = (0..61).map(|i| (i * 37 % tokens) as u32).collect();
        let gathered: Vec<f32> = rows
            .iter()
            .flat_map(|&r| x[r as usize * k..][..k].iter().copied())
            .collect();
        // The parts of the rows' quantization the format has, without the padding rows of `q`
        // and `offsets16`.
        let parts = |dev: &Device, q: &QuantizedRows<'_>, m: usize| {
            let host = |v: DevSlice<'_, i32>| {
                let mut out = vec![0; v.len()];
                dev.download(v, &mut out).unwrap();
                out
            };
            let host_bits = |v: DevSlice<'_, f32>| {
                let mut out = vec![0.0; v.len()];
                dev.download(v, &mut out).unwrap();
                bits(&out)
            };
            let run = run_values(q.q8_0) as usize;
            let qv = from_tile_order(&host(q.q.view()), m * k, k, run);
            let d = host_bits(q.d.view());
            if q.q8_0 {
                return (qv, d, host_bits(q.sums.view()), vec![], vec![]);
            }
            let o16 = host(q.offsets16.view())[..m * k / 16].to_vec();
            (qv, d, vec![], host(q.sums32.view()), o16)
        };
        for act in [Activations::Q8_0, Activations::Q8K] {
            for dev in cpu_side_devices() {
                let at = format!("{act:?} on {}", dev.arch());
                let mk = |v: &[f32], m: usize| quantize(&dev, v.into(), act, [m as u32, k as u32]);
                let all = mk(&x, tokens).unwrap();
                let got = gather(&dev, &all, &rows).unwrap();
                let want = mk(&gathered, rows.len()).unwrap();
                let m = rows.len();
                assert!(parts(&dev, &got, m) == parts(&dev, &want, m), "{at}");
                let err = gather(&dev, &all, &[3, 50]).err().unwrap().to_string();
                assert!(err.contains("row 1 gathers row 50 of 50"), "{at}: {err}");
            }
        }
    }

    /// `gemm_experts` refuses quantized experts it cannot read as whole interleaved matrices:
    /// a stride other than one matrix, an offset inside a group of 64 rows, an expert past the
    /// tensor, other activations than the format's, and a mix with a bf16 weight.
    #[test]
    fn quantized_expert_products_refuse_what_the_interleaved_tensor_does_not_hold() {
        let dev = Device::open(Pool::Host).unwrap();
        let (rows, k, format) = (128, 256, QuantFormat::Q8_0);
        let b = blocks(format, 2 * rows, k, 3);
        let w: Vec<u32> = bytemuck::pod_collect_to_vec(&b);
        let packed = interleave(format, &b, 2, rows, k).unwrap();
        let mut view = interleaved_view(format, &w, &packed, 2 * rows, k);
        if let WeightView::Quant(q) = &mut view {
            q.interleaved.as_mut().unwrap().rows = rows;
        }
        let x = vec![0.5f32; NARROW_ROWS * k];
        let plain = vec![half::bf16::ONE; 2 * rows * k];
        let run = |experts: &[u32], stride: usize, offset: usize, act, w2: Option<WeightView>| {
            let (mut y, mut y2) = (
                vec![0.0f32; NARROW_ROWS * 64],
                vec![0.0f32; NARROW_ROWS * 64],
            );
            let job = |w, y| ExpertsJob {
                w,
                n: 64,
                stride,
                offset,
                y: DevSliceMut::from(y),
            };
            let mut jobs = vec![job(view, &mut y[..])];
            jobs.extend(w2.map(|w| job(w, &mut y2[..])));
            crate::ops::gemm_experts(&dev, &x, k, experts, act, jobs).map_err(|e| e.to_string())
        };
        let q8 = Activations::Q8_0;
        assert!(run(&[1], rows * k, 64 * k, q8, None).is_ok());
        let e = run(&[1], 64 * k, 0, q8, None).unwrap_err();
        assert!(
            e.contains("must be whole 128 x 256 matrices") && e.contains("stride 16384"),
            "{e}"
        );
        let e = run(&[1], rows * k, 32 * k, q8, None).unwrap_err();
        assert!(e.contains("starting at a multiple of 64 rows"), "{e}");
        let e = run(&[2], rows * k, 0, q8, None).unwrap_err();
        assert!(
            e.starts_with("gemm_experts: expert 2's matrix passes the Q8_0 weight's"),
            "{e}"
        );
        let e = run(&[0], rows * k, 0, Activations::F32, None).unwrap_err();
        assert!(
            e.contains("must be interleaved for the integer GEMM") && e.contains("F32 given"),
            "{e}"
        );
        let bf16_view = WeightView::Bf16(DevSlice::from(&plain[..]));
        let e = run(&[0], rows * k, 0, q8, Some(bf16_view)).unwrap_err();
        assert!(e.contains("differ in type"), "{e}");
    }

    /// A Q4_K or Q5_K block's 256 weights exactly (f64): `d · sc_j · q - dmin · m_j`, with
    /// Q5_K's fifth bits (bit `j` of `qh[l]` for value `l` of sub-block `j`).
    fn k_quant_weights_exact(b: &[u8], format: QuantFormat) -> Vec<f64> {
        let half = |at: usize| half::f16::from_le_bytes([b[at], b[at + 1]]).to_f64();
        let (d, dmin, sc) = (half(0), half(2), &b[4..16]);
        // ggml's `get_scale_min_k4`.
        let scale_min = |j: usize| -> (f64, f64) {
            let (s, m) = if j < 4 {
                (sc[j] & 63, sc[j + 4] & 63)
            } else {
                (
                    (sc[j + 4] & 0xF) | ((sc[j - 4] >> 6) << 4),
                    (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4),
                )
            };
            (f64::from(s), f64::from(m))
        };
        let q5 = format == QuantFormat::Q5_K;
        let (qh, qs) = if q5 {
            (&b[16..48], &b[48..176])
        } else {
            (&b[0..0], &b[16..144])
        };
        (0..256)
            .map(|i| {
                let (j, l) = (i / 32, i % 32);
                let byte = qs[32 * (j / 2) + l];
                let low = if j % 2 == 0 { byte & 15 } else { byte >> 4 };
                let high = if q5 { ((qh[l] >> j) & 1) * 16 } else { 0 };
                let (s, m) = scale_min(j);
                d * s * f64::from(low + high) - dmin * m
            })
            .collect()
    }

    /// The Q4_K and Q5_K GEMMs stay within a few f32 roundings of the exact product: against
    /// the exact sum (f64 weights; activations of 128ths whose Q8_K quantization is exact,
    /// each block's first value `-127/128`), the error's RMS is below 1e-8 of `Σ |x · w|` and
    /// its largest below 1e-7 (2026-12-05: 3.1e-9 and 2.9e-8 for Q4_K, 2.9e-9 and 2.4e-8 for
    /// Q5_K), on weights with `d` and `dmin` positive as quantizers write them.
    #[test]
    fn k_quant_gemms_are_within_f32_rounding_of_the_exact_product() {
        let (m, n, k) = (96, 256, 1024);
        let mut state = 12345u64;
        let x: Vec<f32> = (0..m * k)
            .map(|i| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let q = (state % 255) as i32 - 127;
                if i % 256 == 0 {
                    -127.0 / 128.0
                } else {
                    q as f32 / 128.0
                }
            })
            .collect();
        let dev = Device::open(Pool::Host).unwrap();
        for format in [QuantFormat::Q4_K, QuantFormat::Q5_K] {
            let size = format.block_bytes();
            let mut b = blocks(format, n, k, 7);
            for block in b.chunks_exact_mut(size) {
                // The sign bits of `d` and `dmin` cleared.
                block[1] &= 0x7f;
                block[3] &= 0x7f;
            }
            let exact: Vec<f64> = b
                .chunks_exact(size)
                .flat_map(|block| k_quant_weights_exact(block, format))
                .collect();
            let w: Vec<u32> = bytemuck::pod_collect_to_vec(&b);
            let packed = interleave(format, &b, 1, n, k).unwrap();
            let view = interleaved_view(format, &w, &packed, n, k);
            let got = product(&dev, &x, k, view, n, Activations::Q8K);
            let (mut err2, mut mag2, mut worst) = (0f64, 0f64, 0f64);
            for (i, g) in got.iter().enumerate() {
                let (r, c) = (i / n, i % n);
                let terms = (0..k).map(|j| f64::from(x[r * k + j]) * exact[c * k + j]);
                let (sum, mag) = terms.fold((0.0, 0.0), |(s, a), t| (s + t, a + t.abs()));
                let err = f64::from(*g) - sum;
                err2 += err * err;
                mag2 += mag * mag;
                worst = worst.max(err.abs() / mag);
            }
            let rms = (err2 / mag2).sqrt();
            println!(
                "{}: RMS {rms:.2e}, largest {worst:.2e} of Σ |x·w|",
                format.name()
            );
            assert!(
                rms < 1e-8 && worst < 1e-7,
                "{}: {rms:e} {worst:e}",
                format.name()
            );
        }
    }

    /// `gemm_same_x` gives each product the bits `gemm` gives it alone, with the input
    /// quantized once per format family (Q8_K for Q4_K and Q6_K, Q8_0 for Q8_0) and
    /// transposed once per 16-bit type (two bf16 weights and an f16 one beside them); a job
    /// whose shapes are wrong fails the call before any product runs.
    #[test]
    fn products_of_one_input_give_the_bits_of_separate_gemms() {
        use crate::ops::{gemm_same_x, GemmJob};
        let dev = &cpu_side_devices()[0];
        let (m, k) = (5, 512);
        let x = values(m * k, 5, 1.0);
        let quant = |format: QuantFormat, n: usize| {
            let b = blocks(format, n, k, n as u64);
            let packed = interleave(format, &b, 1, n, k).unwrap();
            (
                format,
                bytemuck::pod_collect_to_vec::<u8, u32>(&b),
                packed,
                n,
            )
        };
        let weights = [
            quant(QuantFormat::Q4_K, 70),
            quant(QuantFormat::Q8_0, 33),
            quant(QuantFormat::Q6_K, 64),
        ];
        let mut all: Vec<(WeightView, usize, Activations)> = weights
            .iter()
            .map(|(format, w, packed, n)| {
                let view = interleaved_view(*format, w, packed, *n, k);
                (view, *n, integer_gemm_activations(*format).unwrap())
            })
            .collect();
        let sixteen_bit = |n: usize, seed: u64| values(n * k, seed, 0.1).into_iter();
        let wb2: Vec<half::bf16> = sixteen_bit(24, 9).map(half::bf16::from_f32).collect();
        let wh: Vec<half::f16> = sixteen_bit(12, 10).map(half::f16::from_f32).collect();
        let wb: Vec<half::bf16> = sixteen_bit(20, 6).map(half::bf16::from_f32).collect();
        let rounded = Activations::RoundedToWeight;
        all.push((WeightView::Bf16(DevSlice::from(&wb2[..])), 24, rounded));
        all.push((WeightView::F16(DevSlice::from(&wh[..])), 12, rounded));
        all.push((WeightView::Bf16(DevSlice::from(&wb[..])), 20, rounded));
        let outs: Vec<GemmOut> = (0..all.len())
            .map(|i| match i % 2 {
                0 => GemmOut::Overwrite,
                _ => GemmOut::Accumulate,
            })
            .collect();
        let init: Vec<Vec<f32>> = all.iter().map(|&(_, n, _)| values(m * n, 7, 1.0)).collect();
        let want: Vec<Vec<f32>> = all
            .iter()
            .zip(&outs)
            .zip(&init)
            .map(|((&(w, n, act), &out), y0)| {
                let mut y = y0.clone();
                gemm(dev, &x[..], k, w, n, &mut y[..], out, act).unwrap();
                y
            })
            .collect();
        let mut got = init.clone();
        let jobs = all
            .iter()
            .zip(&outs)
            .zip(got.iter_mut())
            .map(|((&(w, n, act), &out), y)| GemmJob {
                w,
                n,
                y: DevSliceMut::from(&mut y[..]),
                out,
                act,
            })
            .collect();
        gemm_same_x(dev, &x[..], k, jobs).unwrap();
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(bits(g), bits(w), "product {i}");
        }

        // The last job's `y` is one row short: nothing is written.
        let mut got = init.clone();
        let last = got.len() - 1;
        let jobs = all
            .iter()
            .zip(got.iter_mut())
            .enumerate()
            .map(|(i, (&(w, n, act), y))| {
                let len = if i == last { y.len() - n } else { y.len() };
                GemmJob {
                    w,
                    n,
                    y: DevSliceMut::from(&mut y[..len]),
                    out: GemmOut::Overwrite,
                    act,
                }
            })
            .collect();
        let err = gemm_same_x(dev, &x[..], k, jobs).unwrap_err().to_string();
        assert_eq!(err, "gemm: y has 80 elements, expected 100");
        assert_eq!(got, init);

        // Rows of 128 values are not whole Q4_K blocks: refused before the bf16 product.
        let (k, n) = (128, 4);
        let x = values(m * k, 8, 1.0);
        let wb: Vec<half::bf16> = vec![half::bf16::ONE; n * k];
        let wq = vec![0u32; n * k];
        let q4 = WeightView::Quant(QuantView {
            format: QuantFormat::Q4_K,
            words: DevSlice::from(&wq[..]),
            len: n * k,
            interleaved: None,
        });
        let (mut ya, mut yb) = (vec![-1f32; m * n], vec![-1f32; m * n]);
        let jobs = vec![
            GemmJob {
                w: WeightView::Bf16(DevSlice::from(&wb[..])),
                n,
                y: DevSliceMut::from(&mut ya[..]),
                out: GemmOut::Overwrite,
                act: Activations::RoundedToWeight,
            },
            GemmJob {
                w: q4,
                n,
                y: DevSliceMut::from(&mut yb[..]),
                out: GemmOut::Overwrite,
                act: Activations::Q8K,
            },
        ];
        let err = gemm_same_x(dev, &x[..], k, jobs).unwrap_err().to_string();
        assert_eq!(
            err,
            "gemm: w: a Q4_K weight needs rows of a multiple of 256 values, got 128"
        );
        assert!(ya.iter().chain(&yb).all(|&v| v == -1.0));
    }

    /// Word `t` of block `sb` of row `g · 64 + c` of each matrix lands at
    /// `((g · B + sb) · W + t) · 64 + c` of that matrix's words, a Q6_K block's 210 bytes
    /// padded with two zero bytes, the rows past the last of a group zero; bytes that are not
    /// the matrices' exact size are refused.
    #[test]
    fn interleaving_puts_each_rows_words_beside_its_group_neighbours() {
        for format in [QuantFormat::Q4_K, QuantFormat::Q6_K] {
            let (matrices, rows, cols) = (2, 70, 512);
            let b = blocks(format, matrices * rows, cols, 9);
            let words = interleave(format, &b, matrices, rows, cols).unwrap();
            let (size, slot, per_row) = (format.block_bytes(), format.slot_words(), cols / 256);
            let group = 64 * per_row * slot;
            assert_eq!(words.len(), matrices * 2 * group, "{}", format.name());
            for mat in 0..matrices {
                for r in [0, 1, 63, 64, 69] {
                    for sb in 0..per_row {
                        let block = &b[((mat * rows + r) * per_row + sb) * size..][..size];
                        for t in 0..slot {
                            let at = mat * 2 * group + ((r / 64 * per_row + sb) * slot + t) * 64;
                            let mut want = [0u8; 4];
                            for (i, w) in want.iter_mut().enumerate() {
                                *w = block.get(4 * t + i).copied().unwrap_or(0);
                            }
                            let got = words[at + r % 64];
                            assert_eq!(
                                got,
                                u32::from_le_bytes(want),
                                "{} {mat} {r} {sb} {t}",
                                format.name()
                            );
                        }
                    }
                }
                // Rows 70..128 of the second group are padding.
                let second = &words[mat * 2 * group + group..][..group];
                assert!(second
                    .chunks_exact(64)
                    .all(|l| l[6..].iter().all(|&w| w == 0)));
            }
            assert!(interleave(format, &b[1..], matrices, rows, cols).is_none());
            assert!(interleave(format, &b, matrices, rows, cols + 256).is_none());
            assert!(
                interleave(format, &b, matrices, rows, 100).is_none(),
                "not whole blocks"
            );
        }
    }

    /// `interleave_into` writes every word of its output, whatever the output held (padding
    /// words and rows included), giving `interleave`'s words, for every integer format and
    /// ragged row counts; an output or input of another size is refused and left as it was.
    #[test]
    fn interleaving_in_place_overwrites_every_word_and_refuses_other_sizes() {
        for format in INTEGER_FORMATS {
            for (matrices, rows) in [(1, 1), (2, 70), (3, 64), (1, 129)] {
                let cols = 512;
                let b = blocks(format, matrices * rows, cols, 5);
                let want = interleave(format, &b, matrices, rows, cols).unwrap();
                let len = interleaved_len(format, matrices, rows, cols).unwrap();
                assert_eq!(len, want.len());
                let mut out = vec![0xdead_beef; len];
                interleave_into(format, &b, matrices, rows, cols, &mut out).unwrap();
                assert_eq!(out, want, "{} {matrices} x {rows}", format.name());
                let mut short = vec![7u32; len - 1];
                assert!(interleave_into(format, &b, matrices, rows, cols, &mut short).is_none());
                assert!(short.iter().all(|&w| w == 7));
                let cut = &b[..b.len() - 1];
                assert!(interleave_into(format, cut, matrices, rows, cols, &mut out).is_none());
                assert_eq!(out, want);
            }
        }
        assert_eq!(interleaved_len(QuantFormat::Q4_K, 1, 1, 100), None);
        assert_eq!(
            interleaved_len(QuantFormat::Q4_K, usize::MAX, 64, 256),
            None
        );
    }

    /// One matrix of a 3-D K-quant tensor (an expert's) keeps its interleaved copy when sliced
    /// at a matrix boundary, and the integer GEMM on the slice gives the bits of the GEMM on
    /// that matrix alone; a slice that does not start a group of 64 rows loses the copy (and
    /// takes the f32 path).
    #[test]
    fn an_experts_slice_keeps_its_interleaved_rows() {
        let dev = Device::open(Pool::Host).unwrap();
        let (format, rows, k, m) = (QuantFormat::Q4_K, 70, 512, 5);
        let b = blocks(format, 2 * rows, k, 11);
        let w: Vec<u32> = bytemuck::pod_collect_to_vec(&b);
        let packed = interleave(format, &b, 2, rows, k).unwrap();
        let whole = QuantView {
            format,
            words: DevSlice::from(&w[..]),
            len: 2 * rows * k,
            interleaved: Some(Interleaved {
                words: DevSlice::from(&packed[..]),
                rows,
                cols: k,
            }),
        };
        let second = whole.sub(rows * k..2 * rows * k).unwrap();
        let own_bytes = &b[b.len() / 2..];
        let own_packed = interleave(format, own_bytes, 1, rows, k).unwrap();
        let sliced = second
            .interleaved
            .expect("a matrix boundary keeps the copy");
        assert_eq!((sliced.rows, sliced.cols), (rows, k));
        let own_words: Vec<u32> = bytemuck::pod_collect_to_vec(own_bytes);
        let own = QuantView {
            format,
            words: DevSlice::from(&own_words[..]),
            len: rows * k,
            interleaved: Some(Interleaved {
                words: DevSlice::from(&own_packed[..]),
                rows,
                cols: k,
            }),
        };
        let x = values(m * k, 5, 1.0);
        let run = |view: QuantView<'_>| {
            let w = WeightView::Quant(view);
            bits(&product(&dev, &x, k, w, rows, Activations::Q8K))
        };
        assert_eq!(run(second), run(own));
        assert!(
            whole.sub(k..(rows + 1) * k).unwrap().interleaved.is_none(),
            "row 1"
        );
        assert!(
            whole.sub(0..(rows + 1) * k).unwrap().interleaved.is_none(),
            "two matrices"
        );
        assert!(
            whole.sub(64 * k..rows * k).unwrap().interleaved.is_some(),
            "row 64"
        );
    }

    /// The 8-bit values of `len` activations (rows of `k`) read back from the activation
    /// kernels' tile order with runs of `run` values (128 for Q8_0, 256 for Q8_K) in blocks of
    /// `B` = [`ROWS`] rows: value `c` of row `r` at byte
    /// `((r / B · ceil(k / run) + c / run) · B + r % B) · run + c % run` of `laid`.
    fn from_tile_order(laid: &[i32], len: usize, k: usize, run: usize) -> Vec<i32> {
        let b = ROWS as usize;
        (0..len)
            .map(|i| {
                let (r, c) = (i / k, i % k);
                let at = ((r / b * k.div_ceil(run) + c / run) * b + r % b) * run + c % run;
                i32::from((laid[at / 4] >> (8 * (at % 4))) as i8)
            })
            .collect()
    }

    /// Each value `d · q` of the integer parts, one `d` per `block` values.
    fn dequantized_parts(q: &[i32], d: &[f32], block: usize) -> Vec<f32> {
        q.iter()
            .enumerate()
            .map(|(i, &q)| d[i / block] * q as f32)
            .collect()
    }

    /// `act_quant.q8_0_int` gives, on every device, `q` and `d` whose products are
    /// `act_quant.q8_0`'s values bit for bit and each block's exact sum of `q`: with rows of
    /// 16 blocks (v3's 8 blocks a workgroup in one row: one store) and of 3 blocks (groups
    /// that straddle rows, the last one partial: a store per block), an all-zero block, a
    /// largest magnitude that is negative, values that round half to even, and a NaN, which
    /// never sets the scale (its own value and its block's sum, NaN, are left out: the
    /// integer part has no NaN).
    #[test]
    fn q8_0_parts_are_the_q8_0_values_on_every_device() {
        for (rows, k) in [(3usize, 512usize), (5, 96)] {
            let blocks = rows * k / 32;
            let mut x = values(rows * k, 11, 3.0);
            x[32..64].fill(0.0);
            x[64 + 7] = -5.0;
            for (i, v) in x[96..128].iter_mut().enumerate() {
                *v = (i as f32 - 15.5) * 0.125;
            }
            x[96 + 31] = 127.0 * 0.125;
            x[160 + 3] = f32::NAN;
            x[160 + 9] = 6.0;
            let mut want = vec![0.0f32; x.len()];
            let host = Device::open(Pool::Host).unwrap();
            crate::ops::quantize_activations(&host, &x[..], k, Activations::Q8_0, &mut want[..])
                .unwrap();
            let mut first: Option<(Vec<i32>, Vec<u32>, Vec<u32>)> = None;
            for dev in cpu_side_devices() {
                let what = format!("{} at {rows} x {k}", dev.arch());
                let xd = dev.buffer_from(&x).unwrap();
                let mut q = dev.alloc::<i32>(q_words(rows, k, true)).unwrap();
                let mut d = dev.alloc::<f32>(blocks).unwrap();
                let mut sums = dev.alloc::<f32>(blocks).unwrap();
                let args = q8_0_int::Args {
                    x: xd.view(),
                    q: q.view_mut(),
                    d: d.view_mut(),
                    sums: sums.view_mut(),
                    blocks: blocks as u32,
                    k: k as u32,
                };
                dev.launch([blocks.div_ceil(8) as u32, 1, 1], args).unwrap();
                let (laid, dv, sv) = (
                    q.to_vec().unwrap(),
                    d.to_vec().unwrap(),
                    sums.to_vec().unwrap(),
                );
                let qv = from_tile_order(&laid, x.len(), k, 128);
                let got = dequantized_parts(&qv, &dv, 32);
                // The NaN's own value (NaN) has no integer part; the rest of its block is
                // scaled by the block's largest number, 6.0.
                let nan = 160 + 3;
                let (mut got, mut want) = (got, want.clone());
                (got[nan], want[nan]) = (0.0, 0.0);
                assert_eq!(bits(&got), bits(&want), "{what}");
                for (j, s) in sv.iter().enumerate().filter(|&(j, _)| j != nan / 32) {
                    let exact: i32 = qv[32 * j..32 * (j + 1)].iter().sum();
                    assert_eq!(*s, exact as f32, "sum {j} on {what}");
                }
                assert_eq!([qv[64 + 7], qv[160 + 9]], [-127, 127], "{what}");
                let parts = (qv, bits(&dv), bits(&sv));
                match &first {
                    Some(f) => assert_eq!(&parts, f, "{what}"),
                    None => first = Some(parts),
                }
            }
        }
    }

    /// `act_quant.q8_k_int` gives, on every device, `q` and `d` whose products are
    /// `act_quant.q8_k`'s values bit for bit and the exact sums of each 32 and each 16 `q`: for random
    /// blocks, an all-zero block, and blocks whose largest magnitude comes first with a minus
    /// sign and then with a plus sign (the first one sets the sign), and the other way round:
    /// held by different work-items of v7 (value `j · 64 + lane` is work-item `lane`'s `j`-th),
    /// by one work-item (positions 10 and 74), by a later work-item's earlier value (9 before
    /// 70), and behind a NaN in the same work-item (a NaN never wins).
    #[test]
    fn q8_k_parts_are_the_q8_k_values_on_every_device() {
        // Four rows of two blocks.
        let (blocks, k) = (8, 512);
        let mut x = values(blocks * 256, 7, 3.0);
        x[256..512].fill(0.0);
        x[512 + 5] = -4.0;
        x[512 + 200] = 4.0;
        x[768 + 3] = 4.0;
        x[768 + 100] = -4.0;
        x[1024 + 10] = -4.0;
        x[1024 + 74] = 4.0;
        x[1280 + 70] = 4.0;
        x[1280 + 9] = -4.0;
        x[1536] = f32::NAN;
        x[1536 + 64] = 4.0;
        let mut want = vec![0.0f32; x.len()];
        let host = Device::open(Pool::Host).unwrap();
        crate::ops::quantize_activations(&host, &x[..], k, Activations::Q8K, &mut want[..])
            .unwrap();
        // Each device's `q`, `d` and `sums` bits and `offsets16`.
        type Parts = (Vec<i32>, Vec<u32>, Vec<i32>, Vec<i32>);
        let mut first: Option<Parts> = None;
        for dev in cpu_side_devices() {
            let xd = dev.buffer_from(&x).unwrap();
            let mut q = dev.alloc::<i32>(ROWS as usize * k / 4).unwrap();
            let mut d = dev.alloc::<f32>(blocks).unwrap();
            let mut sums = dev.alloc::<i32>(blocks * 8).unwrap();
            let mut offsets16 = dev.alloc::<i32>(ROWS as usize * k / 16).unwrap();
            let args = q8_k_int::Args {
                x: xd.view(),
                q: q.view_mut(),
                d: d.view_mut(),
                sums: sums.view_mut(),
                offsets16: offsets16.view_mut(),
                k: k as u32,
            };
            dev.launch([blocks as u32, 1, 1], args).unwrap();
            let (laid, dv, sv) = (
                q.to_vec().unwrap(),
                d.to_vec().unwrap(),
                sums.to_vec().unwrap(),
            );
            let qv = from_tile_order(&laid, x.len(), k, 256);
            let values = dequantized_parts(&qv, &dv, 256);
            assert_eq!(bits(&values), bits(&want), "{}", dev.arch());
            for (j, s) in sv.iter().enumerate() {
                let exact: i32 = qv[32 * j..32 * (j + 1)].iter().sum();
                assert_eq!(*s, exact, "sum {j} on {}", dev.arch());
            }
            // Sum `j` of row `r`, times -32, at `r · k / 16 + j`.
            let o16 = offsets16.to_vec().unwrap();
            for (i, sub) in qv.chunks_exact(16).enumerate() {
                let exact: i32 = sub.iter().sum();
                assert_eq!(o16[i], -32 * exact, "offset {i} on {}", dev.arch());
            }
            // The first value of the largest magnitude becomes -127, whatever its sign.
            let signs = [
                qv[512 + 5],
                qv[512 + 200],
                qv[768 + 3],
                qv[768 + 100],
                qv[1024 + 10],
                qv[1024 + 74],
                qv[1280 + 9],
                qv[1280 + 70],
                qv[1536 + 64],
            ];
            assert_eq!(
                signs,
                [-127, 127, -127, 127, -127, 127, -127, 127, -127],
                "{}",
                dev.arch()
            );
            let got = (qv, bits(&dv), sv, o16);
            match &first {
                Some(f) => assert_eq!(&got, f, "{}", dev.arch()),
                None => first = Some(got),
            }
        }
    }
}
