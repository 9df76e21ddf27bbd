//! The LOOM GEMM (`gemm.xwt_<ty>.v8` for ty = bf16, f16, and `gemm.xwt_exact_<ty>.v7` for
//! ty = bf16, f16, f32): `y = x · wᵀ`, or `y += x · wᵀ`, with the weight in its stored dtype.
//! `gemm.xwt` takes the activations transposed, in the weight's type and in blocks of 64 of
//! their rows with pairs of K interleaved (`gemm.transpose_x_<ty>.v3`), `gemm.xwt_exact`
//! transposed in f32 in blocks of 64 rows (`gemm.transpose_x_f32.v2`), each written once per
//! input into a buffer the device keeps between calls ([`Device::scratch`]). A weight kept
//! in a ggml block format ([`super::QuantView`]) goes through `gemm.xwt_<q>.v1` (q = q4_0,
//! q4_1, q5_0, q5_1, q8_0, q4_k, q5_k, q6_k), which dequantizes each K step's block into
//! shared memory and takes the same f32 products, except that a K-quant weight against Q8_K
//! activations ([`Activations::Q8K`], how a GGUF model runs) takes the integer GEMM
//! (`super::gemm_int`); one in mlx's affine quantization ([`super::AffineView`]) goes
//! through `gemm.xwt_mlx<b>_<ty>.v1` (b = 4, 8; ty = the scales' dtype) the same way.

use half::{bf16, f16};
use lse_kernels::act_quant::{q8_0, q8_k};
use lse_kernels::gemm::{
    gemm_xwt_bf16, gemm_xwt_bf16x3_bf16, gemm_xwt_exact_bf16, gemm_xwt_exact_f16,
    gemm_xwt_exact_f32, gemm_xwt_f16, transpose_x_bf16, transpose_x_bf16x3_bf16, transpose_x_f16,
    transpose_x_f32,
};
use lse_kernels::gemm_mlx::{
    gemm_xwt_mlx4_bf16, gemm_xwt_mlx4_f16, gemm_xwt_mlx4_f32, gemm_xwt_mlx8_bf16,
    gemm_xwt_mlx8_f16, gemm_xwt_mlx8_f32,
};
use lse_kernels::gemm_narrow::{
    gemm_xwt_exact_narrow_bf16, gemm_xwt_exact_narrow_f16, gemm_xwt_exact_narrow_f32,
    gemm_xwt_narrow_bf16, gemm_xwt_narrow_f16,
};
use lse_kernels::gemm_quant::{
    gemm_xwt_q4_0, gemm_xwt_q4_1, gemm_xwt_q4_k, gemm_xwt_q5_0, gemm_xwt_q5_1, gemm_xwt_q5_k,
    gemm_xwt_q6_k, gemm_xwt_q8_0,
};

use super::affine::AffineParams;
use super::gemm_int;
use super::lm_head::WeightView;
use super::moe::ExpertSlots;
use super::quant::{Interleaved, QuantFormat};
use super::{check_len, to_u32, OpError};
use crate::device::{DevSlice, DevSliceMut, Device, Scratch};

/// Rows and columns of `y` per workgroup of `gemm.xwt_exact` (its `2 * BM` and `BN`).
pub(super) const EXACT_ROWS: u32 = 128;
const EXACT_COLS: u32 = 64;
/// Rows and columns of `y` per workgroup of the quantized GEMMs (`gemm.xwt_q*`,
/// `gemm.xwt_mlx*`: `4 * BM` and `BN`).
const QUANT_ROWS: u32 = 256;
const QUANT_COLS: u32 = 32;
/// Rows and columns of `y` per workgroup of `gemm.xwt` (its `BM` and `BN`).
const XWT_ROWS: u32 = 64;
const XWT_COLS: u32 = 64;
/// Rows and columns of `x` per workgroup of `gemm.transpose_x`.
const TRANSPOSE_BLOCK: u32 = 64;
/// Rows and columns of `y` per workgroup of `gemm.xwt_narrow` and `gemm.xwt_exact_narrow`
/// (their `BM` and `BN`), and the most rows of `x` a product of one weight takes there: past
/// 32 rows a block of 64 (the wide kernels') computes at most a quarter more rows than blocks
/// of 16 do, and reads each block of weight rows once where they read it three or four times.
pub const NARROW_ROWS: usize = 16;
const NARROW_COLS: u32 = 64;
const NARROW_MAX_M: u32 = 32;
/// The narrow kernels' table of experts for a product of one weight: every block on it.
const ONE_WEIGHT: [u32; NARROW_MAX_M as usize / NARROW_ROWS] = [0; 2];

/// Whether the product replaces `y` or is added to it (a fused residual add).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GemmOut {
    Overwrite,
    Accumulate,
}

/// In which precision activations enter the products with a 16-bit weight (an f32 weight
/// always multiplies f32 activations).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activations {
    /// Rounded to the weight's type, so products of two 16-bit values are exact and the
    /// matrix instructions (`vdpbf16ps`, AMX) apply; llama.cpp does the same against bf16
    /// weights.
    RoundedToWeight,
    /// Kept f32: each product `x · w` is rounded once, as an f32 SGEMM on the widened weight.
    F32,
    /// Kept f32 in value, but against a bf16 weight on AMX (the host device's AMX level) split
    /// into three bf16 pieces that sum to each value exactly (`gemm.transpose_x_bf16x3`), so
    /// every product is exact, as `F32`'s are before rounding, and the dots run on AMX tiles
    /// (`gemm.xwt_bf16x3`) at three times the bf16 GEMM's work; the sums are in the tiles'
    /// order, so the bits differ from `F32`'s by rounding. Anywhere else, and for products of
    /// at most 32 rows (the narrow kernels'), as `F32`.
    Bf16x3,
    /// Each block of 32 values of a row replaced by what its llama.cpp Q8_0 (or Q8_1) form
    /// stands for (`act_quant.q8_0`), then kept f32: against a dequantized Q4_0, Q4_1, Q5_0,
    /// Q5_1 or Q8_0 weight of a GGUF checkpoint, as llama.cpp's CPU backend multiplies it.
    Q8_0,
    /// The same with llama.cpp's Q8_K blocks of 256 (`act_quant.q8_k`), against a dequantized
    /// K-quant weight; against a K-quant weight kept in its block format, the integer GEMM
    /// (`act_quant.q8_k_int`, then exact integer sums as llama.cpp forms them).
    Q8K,
}

/// `y[r, c] (=|+=) Σ_j x[r, j] · w[c, j]` for `x` `[m, k]`, `w` `[n, k]` and `y` `[m, n]`, with
/// `m = x.len() / k`; `act` says how activations meet a 16-bit weight (LOOM.md, "Numeric
/// contract of `tile_dot`").
#[allow(clippy::too_many_arguments)]
pub fn gemm<'a>(
    dev: &Device,
    x: impl Into<DevSlice<'a, f32>>,
    k: usize,
    w: impl Into<WeightView<'a>>,
    n: usize,
    y: impl Into<DevSliceMut<'a, f32>>,
    out: GemmOut,
    act: Activations,
) -> Result<(), OpError> {
    let (x, w, y) = (x.into(), w.into(), y.into());
    let m = check_shapes(x, k, w, n, &y)?;
    if m == 0 {
        return Ok(());
    }
    launch(dev, x, w, y, [m as u32, n as u32, k as u32], out, act)
}

/// [`gemm`] of f32 activations against a bf16 weight through the kernels
/// [`Activations::Bf16x3`] takes on AMX (`gemm.transpose_x_bf16x3`, `gemm.xwt_bf16x3`), on any
/// device and for any row count: each product exact, the sums in the device's dot order.
/// The model takes it only where AMX runs it ([`Activations::Bf16x3`]); tests run its kernels
/// everywhere.
pub fn gemm_bf16x3<'a>(
    dev: &Device,
    x: impl Into<DevSlice<'a, f32>>,
    k: usize,
    w: impl Into<DevSlice<'a, bf16>>,
    n: usize,
    y: impl Into<DevSliceMut<'a, f32>>,
    out: GemmOut,
) -> Result<(), OpError> {
    let (x, w, y) = (x.into(), WeightView::Bf16(w.into()), y.into());
    let m = check_shapes(x, k, w, n, &y)?;
    if m == 0 {
        return Ok(());
    }
    let [m, n, k] = [m, n, k].map(|v| v as u32);
    let x3 = transpose(dev, x, XtType::Bf16x3, [m, k])?;
    launch_transposed(dev, &x3, w, y, [m, n, k], out)
}

/// One product of [`gemm_same_x`]: `y (=|+=) x · wᵀ` with `w` `[n, k]`, as [`gemm`] takes it.
#[derive(Debug)]
pub struct GemmJob<'a> {
    pub w: WeightView<'a>,
    pub n: usize,
    pub y: DevSliceMut<'a, f32>,
    pub out: GemmOut,
    pub act: Activations,
}

/// [`gemm`] of one `x` (`[m, k]`) by several weights, with the same results, but `x` is
/// quantized once per activation format for the weights that take the integer GEMM, and
/// transposed once per 16-bit type for those that take `gemm.xwt` (q, k and v, or gate and
/// up, share their input; llama.cpp quantizes it once too). Every job's shapes and block
/// rows are checked before any product runs.
pub fn gemm_same_x<'a>(
    dev: &Device,
    x: impl Into<DevSlice<'a, f32>>,
    k: usize,
    jobs: Vec<GemmJob<'a>>,
) -> Result<(), OpError> {
    let x = x.into();
    let mut m = 0;
    for j in &jobs {
        m = check_shapes(x, k, j.w, j.n, &j.y)?;
        check_block_rows(j.w, k)?;
    }
    if m == 0 {
        return Ok(());
    }
    let mut shared = SharedX::new(x);
    for j in jobs {
        let mnk = [m as u32, j.n as u32, k as u32];
        launch_sharing(dev, &mut shared, j.w, j.y, mnk, j.out, j.act)?;
    }
    Ok(())
}

/// An input `x` and the forms of it that products by several weights share, each made the
/// first time a product needs it: its rows quantized per activation format (the integer
/// GEMMs) and `xᵀ` per 16-bit type (`gemm.xwt`).
struct SharedX<'d, 'x> {
    x: DevSlice<'x, f32>,
    quantized: Vec<(Activations, gemm_int::QuantizedRows<'d>)>,
    transposed: Vec<(XtType, TransposedX<'d>)>,
}

impl<'x> SharedX<'_, 'x> {
    fn new(x: DevSlice<'x, f32>) -> Self {
        SharedX {
            x,
            quantized: Vec::new(),
            transposed: Vec::new(),
        }
    }
}

/// The value `made` holds for `key`, made by `make` the first time `key` is asked for.
fn once_per<K: PartialEq, V>(
    made: &mut Vec<(K, V)>,
    key: K,
    make: impl FnOnce() -> Result<V, OpError>,
) -> Result<&V, OpError> {
    let at = match made.iter().position(|(k, _)| *k == key) {
        Some(at) => at,
        None => {
            made.push((key, make()?));
            made.len() - 1
        }
    };
    Ok(&made[at].1)
}

/// `m` for `x` `[m, k]`, after checking that `w` holds `[n, k]`, `y` `[m, n]`, `k` and `n`
/// are positive and every size is below 2^32.
fn check_shapes(
    x: DevSlice<'_, f32>,
    k: usize,
    w: WeightView<'_>,
    n: usize,
    y: &DevSliceMut<'_, f32>,
) -> Result<usize, OpError> {
    const OP: &str = "gemm";
    if k == 0 || n == 0 {
        return Err(OpError::Invalid {
            op: OP,
            message: format!("k = {k} and n = {n} must be positive"),
        });
    }
    let m = x.len() / k;
    check_len(OP, "x", x.len(), m * k)?;
    check_len(OP, "w", w.len(), n * k)?;
    check_len(OP, "y", y.len(), m * n)?;
    for (what, v) in [("m * k", m * k), ("n * k", n * k), ("m * n", m * n)] {
        to_u32(OP, what, v)?;
    }
    Ok(m)
}

/// That a block-format weight's rows of `k` values are whole blocks.
fn check_block_rows(w: WeightView<'_>, k: usize) -> Result<(), OpError> {
    match w {
        WeightView::Quant(q) => q.check_rows("gemm", "w", k),
        WeightView::Affine(q) => q.check_rows("gemm", "w", k),
        _ => Ok(()),
    }
}

/// The integer GEMM's route for `w`: its format and interleaved words, when `w` is a
/// quantized weight interleaved at load as `[n, k]` and `act` is what its integer GEMM
/// takes.
fn integer_route<'a>(
    w: WeightView<'a>,
    act: Activations,
    [_, n, k]: [u32; 3],
) -> Option<(QuantFormat, Interleaved<'a>)> {
    let WeightView::Quant(q) = w else {
        return None;
    };
    q.interleaved
        .filter(|i| {
            gemm_int::integer_gemm_activations(q.format) == Some(act)
                && i.rows == n as usize
                && i.cols == k as usize
        })
        .map(|i| (q.format, i))
}

/// The type `gemm.xwt` (bf16, f16) or `gemm.xwt_exact` (f32) takes `xᵀ` in, or the three
/// bf16 pieces `gemm.xwt_bf16x3` takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum XtType {
    Bf16,
    F16,
    F32,
    Bf16x3,
}

/// `xᵀ` rounded to [`XtType`] in `gemm.transpose_x`'s blocked pairs layout, or kept f32 in
/// `gemm.transpose_x_f32`'s blocked layout, written once and read by the products on it; in
/// a buffer the device keeps between calls.
pub(super) enum TransposedX<'d> {
    Bf16(Scratch<'d, bf16>),
    F16(Scratch<'d, f16>),
    F32(Scratch<'d, f32>),
    /// `gemm.transpose_x_bf16x3`'s three pieces.
    Bf16x3(Scratch<'d, bf16>),
}

/// The type `xᵀ` takes for a bf16, f16 or f32 weight `w`, `act` and `m` rows of `x` on `dev`:
/// the weight's for `gemm.xwt` (a 16-bit weight, activations rounded to it), the three bf16
/// pieces for `gemm.xwt_bf16x3` ([`Activations::Bf16x3`] against a bf16 weight, past the
/// narrow kernels' rows, on AMX), else f32 for `gemm.xwt_exact`.
pub(super) fn xt_type(dev: &Device, w: WeightView<'_>, act: Activations, m: u32) -> XtType {
    match (w, act) {
        (WeightView::Bf16(_), Activations::RoundedToWeight) => XtType::Bf16,
        (WeightView::F16(_), Activations::RoundedToWeight) => XtType::F16,
        (WeightView::Bf16(_), Activations::Bf16x3) if m > NARROW_MAX_M && dev.runs_amx() => {
            XtType::Bf16x3
        }
        _ => XtType::F32,
    }
}

/// Elements of `xᵀ` for `x` `[m, k]` in `ty`'s layout: blocks of 64 rows of `x` (a last
/// one padded out to 64), each two K interleaved for the 16-bit types (an odd `k` padded),
/// in chunks of 128 K of three pieces each for [`XtType::Bf16x3`].
pub(super) fn xt_len(ty: XtType, m: usize, k: usize) -> usize {
    let blocks = m.div_ceil(64);
    match ty {
        XtType::Bf16 | XtType::F16 => blocks * k.div_ceil(2) * 128,
        XtType::F32 => blocks * k * 64,
        XtType::Bf16x3 => blocks * k.div_ceil(128) * 384 * 64,
    }
}

/// `xᵀ` of `x` (`[m, k]`) in `ty`.
pub(super) fn transpose<'d>(
    dev: &'d Device,
    x: DevSlice<'_, f32>,
    ty: XtType,
    [m, k]: [u32; 2],
) -> Result<TransposedX<'d>, OpError> {
    let grid = [k.div_ceil(TRANSPOSE_BLOCK), m.div_ceil(TRANSPOSE_BLOCK), 1];
    // Every element a product reads is written here: a last block of fewer than 64 rows is
    // written out to 64 with zeros (the products read whole blocks and the stores clip their
    // rows); the padding of an odd `k` is neither written nor read.
    let len = xt_len(ty, m as usize, k as usize);
    // The kernels index `xᵀ` in u32 (three times `x` and more for the bf16x3 pieces).
    to_u32("gemm", "the transposed activations' length", len)?;
    Ok(match ty {
        XtType::Bf16 => {
            let mut xt = dev.scratch::<bf16>(len)?;
            dev.launch(
                grid,
                transpose_x_bf16::Args {
                    x,
                    xp: xt.view_mut(),
                    m,
                    k,
                },
            )?;
            TransposedX::Bf16(xt)
        }
        XtType::F16 => {
            let mut xt = dev.scratch::<f16>(len)?;
            dev.launch(
                grid,
                transpose_x_f16::Args {
                    x,
                    xp: xt.view_mut(),
                    m,
                    k,
                },
            )?;
            TransposedX::F16(xt)
        }
        XtType::F32 => {
            let mut xt = dev.scratch::<f32>(len)?;
            dev.launch(
                grid,
                transpose_x_f32::Args {
                    x,
                    xt: xt.view_mut(),
                    m,
                    k,
                },
            )?;
            TransposedX::F32(xt)
        }
        XtType::Bf16x3 => {
            let mut x3 = dev.scratch::<bf16>(len)?;
            dev.launch(
                grid,
                transpose_x_bf16x3_bf16::Args {
                    x,
                    x3: x3.view_mut(),
                    m,
                    k,
                },
            )?;
            TransposedX::Bf16x3(x3)
        }
    })
}

/// `y (=|+=) x · wᵀ` through `gemm.xwt` (or `gemm.xwt_exact` for f32 `xt`) on `xt` = `xᵀ`,
/// for a weight `xt`'s type was chosen for ([`xt_type`]).
pub(super) fn launch_transposed(
    dev: &Device,
    xt: &TransposedX<'_>,
    w: WeightView<'_>,
    y: DevSliceMut<'_, f32>,
    [m, n, k]: [u32; 3],
    out: GemmOut,
) -> Result<(), OpError> {
    let accumulate = u32::from(out == GemmOut::Accumulate);
    if m <= NARROW_MAX_M && !matches!(xt, TransposedX::Bf16x3(_)) {
        let experts = &ONE_WEIGHT[..(m as usize).div_ceil(NARROW_ROWS)];
        return launch_narrow(dev, xt, w, experts, y, [m, n, k], [0, 0], accumulate);
    }
    let grid = |rows: u32, cols: u32| [m.div_ceil(rows), n.div_ceil(cols), 1];
    // One launch of `$kernel` on `xᵀ` (its argument named `$arg`) and `$w`, on the grid of
    // `$rows` x `$cols` blocks of `y`.
    macro_rules! xwt {
        ($kernel:ident, $arg:ident: $xt:expr, $w:expr, $rows:expr, $cols:expr) => {
            dev.launch(
                grid($rows, $cols),
                $kernel::Args {
                    $arg: $xt.view(),
                    w: $w,
                    y,
                    m,
                    n,
                    k,
                    accumulate,
                },
            )?
        };
    }
    match (xt, w) {
        (TransposedX::Bf16(xt), WeightView::Bf16(w)) => {
            xwt!(gemm_xwt_bf16, xp: xt, w, XWT_ROWS, XWT_COLS)
        }
        (TransposedX::F16(xt), WeightView::F16(w)) => {
            xwt!(gemm_xwt_f16, xp: xt, w, XWT_ROWS, XWT_COLS)
        }
        (TransposedX::F32(xt), WeightView::Bf16(w)) => {
            xwt!(gemm_xwt_exact_bf16, xt: xt, w, EXACT_ROWS, EXACT_COLS)
        }
        (TransposedX::F32(xt), WeightView::F16(w)) => {
            xwt!(gemm_xwt_exact_f16, xt: xt, w, EXACT_ROWS, EXACT_COLS)
        }
        (TransposedX::F32(xt), WeightView::F32(w)) => {
            xwt!(gemm_xwt_exact_f32, xt: xt, w, EXACT_ROWS, EXACT_COLS)
        }
        (TransposedX::Bf16x3(x3), WeightView::Bf16(w)) => {
            xwt!(gemm_xwt_bf16x3_bf16, x3: x3, w, XWT_ROWS, XWT_COLS)
        }
        _ => return Err(mismatch()),
    }
    Ok(())
}

/// `gemm.xwt_narrow` (or `gemm.xwt_exact_narrow` for f32 `xt`) on `xt` = `xᵀ`: block `b` of
/// 16 rows of `y` (=|+=) the same rows of `x` times the `[n, k]` matrix at
/// `w[experts[b] * stride + offset..]` transposed (`[stride, offset]`; the caller checks that
/// each lies inside `w` and that `experts` has a block per 16 rows).
#[allow(clippy::too_many_arguments)]
fn launch_narrow(
    dev: &Device,
    xt: &TransposedX<'_>,
    w: WeightView<'_>,
    experts: &[u32],
    y: DevSliceMut<'_, f32>,
    [m, n, k]: [u32; 3],
    [w_stride, w_offset]: [u32; 2],
    accumulate: u32,
) -> Result<(), OpError> {
    let grid = [n.div_ceil(NARROW_COLS), m.div_ceil(NARROW_ROWS as u32), 1];
    // One launch of `$kernel` on `xᵀ` (its argument named `$arg`) and `$w`.
    macro_rules! narrow {
        ($kernel:ident, $arg:ident: $xt:expr, $w:expr) => {
            dev.launch(
                grid,
                $kernel::Args {
                    $arg: $xt.view(),
                    w: $w,
                    experts,
                    y,
                    m,
                    n,
                    k,
                    w_stride,
                    w_offset,
                    accumulate,
                },
            )?
        };
    }
    match (xt, w) {
        (TransposedX::Bf16(xt), WeightView::Bf16(w)) => narrow!(gemm_xwt_narrow_bf16, xp: xt, w),
        (TransposedX::F16(xt), WeightView::F16(w)) => narrow!(gemm_xwt_narrow_f16, xp: xt, w),
        (TransposedX::F32(xt), WeightView::Bf16(w)) => {
            narrow!(gemm_xwt_exact_narrow_bf16, xt: xt, w)
        }
        (TransposedX::F32(xt), WeightView::F16(w)) => {
            narrow!(gemm_xwt_exact_narrow_f16, xt: xt, w)
        }
        (TransposedX::F32(xt), WeightView::F32(w)) => {
            narrow!(gemm_xwt_exact_narrow_f32, xt: xt, w)
        }
        _ => return Err(mismatch()),
    }
    Ok(())
}

/// One weight of [`gemm_experts`]: expert `e`'s `[n, k]` matrix is
/// `w[e * stride + offset..][..n * k]` (a stacked `[E, n, k]` tensor: `stride = n k`,
/// `offset` 0; the gate or up half of a fused `[E, 2n, k]` one: `stride = 2 n k`, `offset` 0
/// or `n k`), and `y` (`[m, n]`) is overwritten.
#[derive(Debug)]
pub struct ExpertsJob<'a> {
    pub w: WeightView<'a>,
    pub n: usize,
    pub stride: usize,
    pub offset: usize,
    pub y: DevSliceMut<'a, f32>,
}

/// The routed experts' products of a mixture-of-experts layer in one launch per weight:
/// `y[r, :] = x[r, :] · W_e(r)ᵀ` for `x` `[m, k]` whose rows come in blocks of
/// [`NARROW_ROWS`], block `b` (rows `16b..16b + 16`) routed to expert `experts[b]` (each
/// expert's rows laid out from a multiple of 16, [`super::ExpertSlots::aligned`]). `x` is
/// transposed (or, for K-quant and Q8_0 weights met by llama.cpp's activations, quantized)
/// once for all `jobs` (gate and up share it), as for [`gemm_same_x`]. The weights are bf16,
/// f16 or f32, or all quantized and interleaved for the integer GEMM, each expert's matrix a
/// whole one of the interleaved tensor and `offset` a multiple of 64 of its rows (a block
/// format without the integer GEMM takes [`gemm`] expert by expert).
pub fn gemm_experts<'a>(
    dev: &Device,
    x: impl Into<DevSlice<'a, f32>>,
    k: usize,
    experts: &[u32],
    act: Activations,
    jobs: Vec<ExpertsJob<'a>>,
) -> Result<(), OpError> {
    experts_products(dev, ExpertsRows::Sorted(x.into()), k, experts, act, jobs)
}

/// [`gemm_experts`] on the rows `slots` gathers from the tokens' rows `x` (`[tokens, k]`): row
/// `r` of the products is token `slots.rows()[r]`, as [`super::moe_gather`] lays them out.
/// Against integer GEMMs the tokens' rows are quantized once and the quantized rows gathered
/// (`act_quant.gather_rows`), the same bits as quantizing the gathered rows, at a twelfth of
/// the quantization (8 of 256 experts: about 11 slot rows per token with the padding) and
/// without the f32 copy; otherwise the f32 rows are gathered first.
pub fn gemm_experts_gathered<'a>(
    dev: &Device,
    x: impl Into<DevSlice<'a, f32>>,
    k: usize,
    slots: &ExpertSlots,
    experts: &[u32],
    act: Activations,
    jobs: Vec<ExpertsJob<'a>>,
) -> Result<(), OpError> {
    let rows = ExpertsRows::Gathered(x.into(), slots);
    experts_products(dev, rows, k, experts, act, jobs)
}

/// The rows the routed experts' products multiply.
#[derive(Clone, Copy)]
enum ExpertsRows<'a, 's> {
    /// `[m, k]`, in expert order.
    Sorted(DevSlice<'a, f32>),
    /// The tokens' rows and the slots that gather them into expert order.
    Gathered(DevSlice<'a, f32>, &'s ExpertSlots),
}

/// [`gemm_experts`] and [`gemm_experts_gathered`].
fn experts_products<'a>(
    dev: &Device,
    rows: ExpertsRows<'a, '_>,
    k: usize,
    experts: &[u32],
    act: Activations,
    jobs: Vec<ExpertsJob<'a>>,
) -> Result<(), OpError> {
    const OP: &str = "gemm_experts";
    let invalid = |message: String| OpError::Invalid { op: OP, message };
    if k == 0 {
        return Err(invalid("k = 0 must be positive".into()));
    }
    let m = match rows {
        ExpertsRows::Sorted(x) => {
            let m = x.len() / k;
            check_len(OP, "x", x.len(), m * k)?;
            m
        }
        ExpertsRows::Gathered(x, slots) => {
            check_len(OP, "x", x.len(), slots.tokens() * k)?;
            slots.len()
        }
    };
    check_len(OP, "experts", experts.len(), m.div_ceil(NARROW_ROWS))?;
    to_u32(OP, "m * k", m * k)?;
    let Some(&most) = experts.iter().max() else {
        return Ok(());
    };
    let mut integer = Vec::with_capacity(jobs.len());
    for j in &jobs {
        if j.n == 0 {
            return Err(invalid("n = 0 must be positive".into()));
        }
        check_len(OP, "y", j.y.len(), m * j.n)?;
        to_u32(OP, "m * n", m * j.n)?;
        to_u32(OP, "the experts' stride", j.stride)?;
        to_u32(OP, "the experts' offset", j.offset)?;
        match j.w {
            WeightView::Bf16(_) | WeightView::F16(_) | WeightView::F32(_) => {
                // The last element of the last expert's matrix, inside `w` and below 2^32.
                let end = (most as usize)
                    .checked_mul(j.stride)
                    .and_then(|v| v.checked_add(j.offset))
                    .and_then(|v| v.checked_add(j.n * k))
                    .filter(|&end| end <= j.w.len())
                    .ok_or_else(|| {
                        invalid(format!(
                            "expert {most}'s {} x {k} matrix at {} * {} + {} passes the \
                             weight's {} elements",
                            j.n,
                            most,
                            j.stride,
                            j.offset,
                            j.w.len()
                        ))
                    })?;
                to_u32(OP, "the experts' weight", end)?;
            }
            WeightView::Quant(q) => integer.push(gemm_int::experts_weight(q, act, j, k, most)?),
            _ => {
                return Err(invalid(
                    "the experts' weights must be bf16, f16, f32 or interleaved for the \
                     integer GEMM"
                        .into(),
                ))
            }
        }
    }
    let Some(first) = jobs.first() else {
        return Ok(());
    };
    if !integer.is_empty() {
        if integer.len() != jobs.len() {
            return Err(mismatch());
        }
        let xq = match rows {
            ExpertsRows::Sorted(x) => gemm_int::quantize(dev, x, act, [m as u32, k as u32])?,
            ExpertsRows::Gathered(x, slots) => {
                let tokens = to_u32(OP, "tokens", slots.tokens())?;
                let xt = gemm_int::quantize(dev, x, act, [tokens, k as u32])?;
                gemm_int::gather(dev, &xt, slots.rows())?
            }
        };
        for (j, (format, w, stride)) in jobs.into_iter().zip(integer) {
            let rows = gemm_int::RowWeights::Experts {
                table: experts,
                stride,
            };
            let n = j.n as u32;
            gemm_int::launch_quantized(dev, &xq, format, w, j.y, n, GemmOut::Overwrite, rows)?;
        }
        return Ok(());
    }
    let mut gathered = None;
    let x = match rows {
        ExpertsRows::Sorted(x) => x,
        ExpertsRows::Gathered(x, slots) => {
            let mut xs = dev.scratch::<f32>(m * k)?;
            super::moe_gather(dev, x, k, slots, &mut xs)?;
            gathered.insert(xs).view()
        }
    };
    // Activations llama.cpp quantizes against such a weight are quantized first, then kept
    // f32, as `gemm` takes them.
    let quantized = q8_values(dev, x, k, act)?;
    let (x, act) = match &quantized {
        Some(xq) => (xq.view(), Activations::F32),
        None => (x, act),
    };
    // Blocks of at most 16 rows: never `gemm.xwt_bf16x3`'s pieces.
    let ty = xt_type(dev, first.w, act, 0);
    if jobs.iter().any(|j| xt_type(dev, j.w, act, 0) != ty) {
        return Err(mismatch());
    }
    let xt = transpose(dev, x, ty, [m as u32, k as u32])?;
    for j in jobs {
        let mnk = [m as u32, j.n as u32, k as u32];
        let place = [j.stride as u32, j.offset as u32];
        launch_narrow(dev, &xt, j.w, experts, j.y, mnk, place, 0)?;
    }
    Ok(())
}

/// `x` (rows of `k` values) replaced by what llama.cpp's Q8_0 or Q8_K blocks of it stand
/// for, in a scratch buffer, when `act` is one of those formats: how such activations meet a
/// weight the integer GEMM does not take. `None` for other activations.
fn q8_values<'d>(
    dev: &'d Device,
    x: DevSlice<'_, f32>,
    k: usize,
    act: Activations,
) -> Result<Option<Scratch<'d, f32>>, OpError> {
    if !matches!(act, Activations::Q8_0 | Activations::Q8K) {
        return Ok(None);
    }
    let mut xq = dev.scratch::<f32>(x.len())?;
    quantize_activations(dev, x, k, act, xq.view_mut())?;
    Ok(Some(xq))
}

/// A product asked of `xᵀ` in a type its weight does not take.
fn mismatch() -> OpError {
    OpError::Invalid {
        op: "gemm",
        message: "the transposed activations and the weight differ in type".into(),
    }
}

/// `y` = the rows of `x` (`[m, k]`) as llama.cpp quantizes them for `act` (`Q8_0`: blocks of
/// 32 through `act_quant.q8_0`; `Q8K`: blocks of 256 through `act_quant.q8_k`), each value
/// replaced by the one its quantized form stands for; `k` must be a multiple of the block.
/// Other modes copy nothing and are refused.
pub fn quantize_activations<'a>(
    dev: &Device,
    x: impl Into<DevSlice<'a, f32>>,
    k: usize,
    act: Activations,
    y: impl Into<DevSliceMut<'a, f32>>,
) -> Result<(), OpError> {
    const OP: &str = "act_quant";
    let (x, y) = (x.into(), y.into());
    let block = match act {
        Activations::Q8_0 => 32,
        Activations::Q8K => 256,
        Activations::RoundedToWeight | Activations::F32 | Activations::Bf16x3 => {
            return Err(OpError::Invalid {
                op: OP,
                message: format!("{act:?} activations are not quantized"),
            })
        }
    };
    if k == 0 || !k.is_multiple_of(block) {
        return Err(OpError::Invalid {
            op: OP,
            message: format!(
                "{act:?} activations need rows of a positive multiple of {block} values, k = {k}"
            ),
        });
    }
    let m = x.len() / k;
    check_len(OP, "x", x.len(), m * k)?;
    check_len(OP, "y", y.len(), m * k)?;
    let blocks = to_u32(OP, "m * k / block", m * k / block)?;
    if blocks == 0 {
        return Ok(());
    }
    let grid = [blocks, 1, 1];
    match act {
        Activations::Q8_0 => dev.launch(grid, q8_0::Args { x, y })?,
        _ => dev.launch(grid, q8_k::Args { x, y })?,
    }
    Ok(())
}

/// Launches the GEMM instance for `w`'s dtype and `act` on checked shapes: `x` `[m, k]`,
/// `w` `[n, k]`, `y` `[m, n]` with every size below 2^32 (any placement). Shared by [`gemm`]
/// and the LM head's matrix form.
pub(super) fn launch(
    dev: &Device,
    x: DevSlice<'_, f32>,
    w: WeightView<'_>,
    y: DevSliceMut<'_, f32>,
    mnk: [u32; 3],
    out: GemmOut,
    act: Activations,
) -> Result<(), OpError> {
    launch_sharing(dev, &mut SharedX::new(x), w, y, mnk, out, act)
}

/// [`launch`] on `shared.x`, taking its quantized rows or `xᵀ` from `shared` when an earlier
/// product made them, and leaving there those this one makes.
fn launch_sharing<'d>(
    dev: &'d Device,
    shared: &mut SharedX<'d, '_>,
    w: WeightView<'_>,
    y: DevSliceMut<'_, f32>,
    [m, n, k]: [u32; 3],
    out: GemmOut,
    act: Activations,
) -> Result<(), OpError> {
    let x = shared.x;
    check_block_rows(w, k as usize)?;
    if let Some((format, i)) = integer_route(w, act, [m, n, k]) {
        let xq = once_per(&mut shared.quantized, act, || {
            gemm_int::quantize(dev, x, act, [m, k])
        })?;
        let one = gemm_int::RowWeights::One;
        return gemm_int::launch_quantized(dev, xq, format, i, y, n, out, one);
    }
    if let Some(xq) = q8_values(dev, x, k as usize, act)? {
        return launch(dev, xq.view(), w, y, [m, n, k], out, Activations::F32);
    }
    let accumulate = u32::from(out == GemmOut::Accumulate);
    macro_rules! exact {
        ($kernel:ident, $w:expr, $grid:expr) => {
            dev.launch(
                $grid,
                $kernel::Args {
                    x,
                    w: $w,
                    y,
                    m,
                    n,
                    k,
                    accumulate,
                },
            )
        };
    }
    match w {
        WeightView::Bf16(_) | WeightView::F16(_) | WeightView::F32(_) => {
            let ty = xt_type(dev, w, act, m);
            let xt = once_per(&mut shared.transposed, ty, || transpose(dev, x, ty, [m, k]))?;
            return launch_transposed(dev, xt, w, y, [m, n, k], out);
        }
        WeightView::Quant(q) => {
            let grid = [m.div_ceil(QUANT_ROWS), n.div_ceil(QUANT_COLS), 1];
            match q.format {
                QuantFormat::Q4_0 => exact!(gemm_xwt_q4_0, q.words, grid),
                QuantFormat::Q4_1 => exact!(gemm_xwt_q4_1, q.words, grid),
                QuantFormat::Q5_0 => exact!(gemm_xwt_q5_0, q.words, grid),
                QuantFormat::Q5_1 => exact!(gemm_xwt_q5_1, q.words, grid),
                QuantFormat::Q8_0 => exact!(gemm_xwt_q8_0, q.words, grid),
                QuantFormat::Q4_K => exact!(gemm_xwt_q4_k, q.words, grid),
                QuantFormat::Q5_K => exact!(gemm_xwt_q5_k, q.words, grid),
                QuantFormat::Q6_K => exact!(gemm_xwt_q6_k, q.words, grid),
            }
        }
        WeightView::Affine(q) => {
            let grid = [m.div_ceil(QUANT_ROWS), n.div_ceil(QUANT_COLS), 1];
            let (w, group) = (q.words, q.format.group() as u32);
            macro_rules! affine {
                ($kernel:ident, $scales:expr, $biases:expr) => {
                    dev.launch(
                        grid,
                        $kernel::Args {
                            x,
                            w,
                            scales: $scales,
                            biases: $biases,
                            y,
                            m,
                            n,
                            k,
                            group,
                            accumulate,
                        },
                    )
                };
            }
            match (q.format.bits(), q.params) {
                (4, AffineParams::Bf16 { scales, biases }) => {
                    affine!(gemm_xwt_mlx4_bf16, scales, biases)
                }
                (4, AffineParams::F16 { scales, biases }) => {
                    affine!(gemm_xwt_mlx4_f16, scales, biases)
                }
                (4, AffineParams::F32 { scales, biases }) => {
                    affine!(gemm_xwt_mlx4_f32, scales, biases)
                }
                // 8 bits, the other width `AffineFormat` admits.
                (_, AffineParams::Bf16 { scales, biases }) => {
                    affine!(gemm_xwt_mlx8_bf16, scales, biases)
                }
                (_, AffineParams::F16 { scales, biases }) => {
                    affine!(gemm_xwt_mlx8_f16, scales, biases)
                }
                (_, AffineParams::F32 { scales, biases }) => {
                    affine!(gemm_xwt_mlx8_f32, scales, biases)
                }
            }
        }
    }?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::{cpu_side_devices, test_values as values};

    /// The bits of `x w^T` for `m` random rows of `k` values (seed `seed`) against `n` random
    /// bf16 weight rows, the activations rounded to bf16, on `dev`.
    fn bf16_product(dev: &Device, (m, n, k): (usize, usize, usize), seed: u64) -> Vec<u32> {
        let x = values(m * k, seed, 1.0);
        let w: Vec<bf16> = values(n * k, seed + 1, 0.1)
            .into_iter()
            .map(bf16::from_f32)
            .collect();
        let mut y = vec![0.0f32; m * n];
        gemm(
            dev,
            &x,
            k,
            WeightView::Bf16(DevSlice::from(&w[..])),
            n,
            &mut y,
            GemmOut::Overwrite,
            Activations::RoundedToWeight,
        )
        .unwrap();
        y.iter().map(|v| v.to_bits()).collect()
    }

    /// `gemm.transpose_x_bf16x3`'s three pieces of each activation sum to it exactly on every
    /// device, for values across f32's range (large, exact in bf16, halfway cases of the first
    /// rounding) down to 2^-110; below, where the last piece falls under bf16's subnormal
    /// step, to within 2^-133.
    #[test]
    fn bf16x3_pieces_sum_to_the_activations_exactly() {
        let (m, k) = (70, 300);
        let mut x = values(m * k, 21, 1.0);
        let special = [
            3.0e38,
            -1.7e-38,
            1.0e-40,
            -2.5e-44,
            1.0,
            -0.0,
            1.0 + 2f32.powi(-8),
            1.0 - 2f32.powi(-24),
            65504.0,
            1.0 / 3.0,
            -7.0e-3,
        ];
        for (i, v) in special.iter().enumerate() {
            x[i * 97] = *v;
        }
        for (i, v) in x.iter_mut().enumerate().skip(1).step_by(5) {
            *v *= 2f32.powi((i % 200) as i32 - 100);
        }
        for dev in cpu_side_devices() {
            let x3 = transpose(
                &dev,
                DevSlice::from(&x[..]),
                XtType::Bf16x3,
                [m as u32, k as u32],
            )
            .unwrap();
            let TransposedX::Bf16x3(x3) = x3 else {
                panic!("not the pieces")
            };
            let mut pieces = vec![bf16::ZERO; x3.view().len()];
            dev.download(x3.view(), &mut pieces).unwrap();
            let x3 = pieces;
            let chunks = k.div_ceil(128);
            for r in 0..m {
                for j in 0..k {
                    let piece = |p: usize| {
                        let at = (r / 64) * chunks * 384 * 64
                            + (j / 128) * 384 * 64
                            + p * 128 * 64
                            + (j % 128 / 2) * 128
                            + (r % 64) * 2
                            + j % 2;
                        x3[at].to_f64()
                    };
                    let sum = piece(0) + piece(1) + piece(2);
                    let want = x[r * k + j] as f64;
                    let tol = if want.abs() >= 2f64.powi(-110) {
                        0.0
                    } else {
                        2f64.powi(-133)
                    };
                    assert!(
                        (sum - want).abs() <= tol,
                        "{}: x[{r}][{j}] = {want:e}, the pieces sum to {sum:e}",
                        dev.arch()
                    );
                }
            }
        }
    }

    /// Products of bf16x3 activations ([`gemm_bf16x3`]) are as accurate as the f32 path's on
    /// every device: within four times its largest error against an f64 reference (three
    /// times the terms, each sum rounded), where a piece dropped or rounded would be off by
    /// 2^-16 or 2^-8 of the terms, tens of times more (a whole, fused shape; a ragged one;
    /// one row).
    #[test]
    fn bf16x3_products_are_as_accurate_as_f32_ones() {
        for (m, n, k) in [(70, 96, 1024), (37, 150, 300), (1, 40, 129)] {
            let x = values(m * k, 31, 1.0);
            let w: Vec<bf16> = values(n * k, 32, 0.1)
                .into_iter()
                .map(bf16::from_f32)
                .collect();
            let exact: Vec<f64> = (0..m * n)
                .map(|i| {
                    let (r, c) = (i / n, i % n);
                    (0..k)
                        .map(|j| x[r * k + j] as f64 * w[c * k + j].to_f64())
                        .sum()
                })
                .collect();
            let worst = |y: &[f32]| {
                y.iter()
                    .zip(&exact)
                    .map(|(a, b)| (*a as f64 - b).abs())
                    .fold(0.0, f64::max)
            };
            for dev in cpu_side_devices() {
                let mut y32 = vec![0.0f32; m * n];
                let wv = WeightView::Bf16(DevSlice::from(&w[..]));
                let over = GemmOut::Overwrite;
                gemm(&dev, &x, k, wv, n, &mut y32, over, Activations::F32).unwrap();
                let mut y3 = vec![0.0f32; m * n];
                gemm_bf16x3(&dev, &x, k, &w[..], n, &mut y3, over).unwrap();
                let (e32, e3) = (worst(&y32), worst(&y3));
                assert!(
                    e3 <= 4.0 * e32.max(1e-7),
                    "{} {m}x{n}x{k}: bf16x3 off by {e3:e}, f32 by {e32:e}",
                    dev.arch()
                );
            }
        }
    }

    /// A product with activations rounded to a bf16 weight adds each K pair as `vdpbf16ps`
    /// does, on every level: the generated Rust, the FMA levels, the default host device
    /// (which may run it on another level, `select::bf16_dot_host_cpu`) and, on an Intel CPU,
    /// `x86-64-v4-bf16` give the same bits, for ragged shapes and odd K (a last unpaired k).
    #[test]
    fn bf16_products_give_the_same_bits_on_every_level_and_the_default_device() {
        let mut devs = cpu_side_devices();
        devs.push(Device::open(crate::device::Pool::Host).unwrap());
        for shape in [(37, 70, 90), (5, 64, 1024), (1, 16, 33), (64, 48, 7)] {
            let want = bf16_product(&devs[0], shape, 11);
            for dev in &devs[1..] {
                let arch = dev.arch();
                let vendor_defined = !arch.ends_with("-bf16") || lse_dsl::rt::intel_cpu();
                if vendor_defined && !arch.ends_with("-amx") {
                    assert_eq!(bf16_product(dev, shape, 11), want, "{arch}: {shape:?}");
                }
            }
        }
    }

    /// `gemm_experts` multiplies each block of 16 rows by its expert's matrix, as `gemm` on
    /// that block and matrix alone gives it (the same kernels' order), on every CPU-side
    /// device: a stacked tensor of three experts and the up half of a fused one, an expert no
    /// block takes, f32 activations, rounded ones and llama.cpp's Q8_0 blocks of them.
    #[test]
    fn expert_products_are_each_blocks_product_with_its_expert() {
        let (k, n, experts) = (96, 40, [2u32, 2, 0, 2]);
        let m = experts.len() * NARROW_ROWS;
        let x = values(m * k, 7, 1.0);
        let w: Vec<bf16> = values(3 * 2 * n * k, 8, 0.1)
            .into_iter()
            .map(bf16::from_f32)
            .collect();
        let view = WeightView::Bf16(DevSlice::from(&w[..]));
        for dev in cpu_side_devices() {
            for act in [
                Activations::F32,
                Activations::RoundedToWeight,
                Activations::Q8_0,
            ] {
                for (stride, offset) in [(n * k, 0), (2 * n * k, n * k)] {
                    let mut y = vec![0.0f32; m * n];
                    let job = ExpertsJob {
                        w: view,
                        n,
                        stride,
                        offset,
                        y: DevSliceMut::from(&mut y[..]),
                    };
                    gemm_experts(&dev, &x, k, &experts, act, vec![job]).unwrap();
                    for (b, &e) in experts.iter().enumerate() {
                        let rows = b * NARROW_ROWS..(b + 1) * NARROW_ROWS;
                        let at = e as usize * stride + offset;
                        let mut want = vec![0.0f32; NARROW_ROWS * n];
                        gemm(
                            &dev,
                            &x[rows.start * k..rows.end * k],
                            k,
                            view.sub(at..at + n * k).unwrap(),
                            n,
                            &mut want,
                            GemmOut::Overwrite,
                            act,
                        )
                        .unwrap();
                        let got = &y[rows.start * n..rows.end * n];
                        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                        assert_eq!(bits(got), bits(&want), "{} {act:?} block {b}", dev.arch());
                    }
                }
            }
        }
    }

    /// `gemm_experts` refuses, before anything runs, an expert whose matrix would pass the
    /// weight's end, a table without one expert per block of 16 rows, and a weight in a
    /// block format that is not interleaved for the integer GEMM.
    #[test]
    fn expert_products_refuse_a_matrix_past_the_weight_and_a_short_table() {
        let dev = Device::open(crate::device::Pool::Host).unwrap();
        let (k, n) = (32, 16);
        let x = vec![0.5f32; 32 * k];
        let w = vec![bf16::ONE; 2 * n * k];
        let view = WeightView::Bf16(DevSlice::from(&w[..]));
        let run = |experts: &[u32], w: WeightView<'_>| {
            let mut y = vec![0.0f32; 32 * n];
            let job = ExpertsJob {
                w,
                n,
                stride: n * k,
                offset: 0,
                y: DevSliceMut::from(&mut y[..]),
            };
            gemm_experts(&dev, &x, k, experts, Activations::F32, vec![job])
                .map_err(|e| e.to_string())
        };
        assert!(run(&[0, 1], view).is_ok());
        assert_eq!(
            run(&[0, 2], view).unwrap_err(),
            "gemm_experts: expert 2's 16 x 32 matrix at 2 * 512 + 0 passes the weight's 1024 \
             elements"
        );
        assert!(run(&[0], view).unwrap_err().contains("experts"));
        let words = vec![0u32; 2 * n * k];
        let quant = WeightView::Quant(crate::ops::QuantView {
            format: QuantFormat::Q8_0,
            words: DevSlice::from(&words[..]),
            len: 2 * n * k,
            interleaved: None,
        });
        assert_eq!(
            run(&[0, 0], quant).unwrap_err(),
            "gemm_experts: the experts' Q8_0 weight must be interleaved for the integer GEMM, \
             with rows of k = 32 values met by its activations (F32 given)"
        );
    }

    /// The transposed activations live in a buffer the device keeps between products
    /// ([`Device::scratch`]): a product after a larger one, whose values are still there, gives
    /// the bits of the same product on a device that has run nothing.
    #[test]
    fn a_product_after_a_larger_one_gives_the_bits_of_a_fresh_device() {
        let (m, n, k) = (37, 70, 90);
        for (fresh, dev) in cpu_side_devices().iter().zip(cpu_side_devices()) {
            let want = bf16_product(fresh, (m, n, k), 3);
            bf16_product(&dev, (2 * m, n, 2 * k), 5);
            let got = bf16_product(&dev, (m, n, k), 3);
            assert_eq!(got, want, "{}", dev.arch());
        }
    }
}
