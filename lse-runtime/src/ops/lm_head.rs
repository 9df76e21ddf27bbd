//! The LM head: many rows through the LOOM GEMM's f32-activation instances
//! (`gemm.xwt_exact_bf16.v8`, `gemm.xwt_exact_f16.v8`, `gemm.xwt_exact_f32.v8`), one row through
//! `lm_head.matvec_<ty>.v1` (ty = bf16, f16, f32). Both add the products of a logit in increasing
//! `k`, one `fma` rounding each, from 0.

use half::{bf16, f16};
use lse_kernels::lm_head::{lm_head_matvec_bf16, lm_head_matvec_f16, lm_head_matvec_f32};

use super::affine::AffineView;
use super::gemm::{self, Activations, GemmOut};
use super::quant::QuantView;
use super::{check_len, to_u32, OpError};
use crate::device::{DevSlice, DevSliceMut, Device};

/// A weight matrix in its stored dtype: the head's `[vocab, dim]`, or a projection's
/// `[out, in]` for [`super::gemm`].
#[derive(Clone, Copy, Debug)]
pub enum HeadWeight<'a> {
    Bf16(&'a [bf16]),
    F16(&'a [f16]),
    F32(&'a [f32]),
}

/// A weight as one launch reads it, in its stored dtype: a host slice or a view of device
/// memory (a weight loaded onto the device once). Each dtype has its own kernel instances.
#[derive(Clone, Copy, Debug)]
pub enum WeightView<'a> {
    Bf16(DevSlice<'a, bf16>),
    F16(DevSlice<'a, f16>),
    F32(DevSlice<'a, f32>),
    /// In a ggml block format, read as stored (the quantized GEMM and embedding kernels).
    Quant(QuantView<'a>),
    /// In mlx's affine quantization, read as stored (the MLX GEMM and embedding kernels).
    Affine(AffineView<'a>),
}

impl<'a> WeightView<'a> {
    /// The number of elements.
    pub fn len(&self) -> usize {
        match self {
            WeightView::Bf16(w) => w.len(),
            WeightView::F16(w) => w.len(),
            WeightView::F32(w) => w.len(),
            WeightView::Quant(w) => w.len,
            WeightView::Affine(w) => w.len,
        }
    }

    /// Whether the weight has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Elements `range` (flat index) of the weight.
    pub fn sub(&self, range: std::ops::Range<usize>) -> Result<WeightView<'a>, OpError> {
        Ok(match self {
            WeightView::Bf16(w) => WeightView::Bf16(w.sub(range)?),
            WeightView::F16(w) => WeightView::F16(w.sub(range)?),
            WeightView::F32(w) => WeightView::F32(w.sub(range)?),
            WeightView::Quant(w) => WeightView::Quant(w.sub(range)?),
            WeightView::Affine(w) => WeightView::Affine(w.sub(range)?),
        })
    }
}

impl<'a> From<HeadWeight<'a>> for WeightView<'a> {
    fn from(w: HeadWeight<'a>) -> Self {
        w.view()
    }
}

impl<'a> HeadWeight<'a> {
    /// The weight as a launch reads it.
    pub fn view(self) -> WeightView<'a> {
        match self {
            HeadWeight::Bf16(w) => WeightView::Bf16(w.into()),
            HeadWeight::F16(w) => WeightView::F16(w.into()),
            HeadWeight::F32(w) => WeightView::F32(w.into()),
        }
    }
}

/// `out[r, v] = Σ_k hidden[r, k] · weight[v, k]` for `rows = hidden.len() / dim` rows; one row
/// uses the matrix-vector kernel (serving's shape), more the LOOM GEMM with f32 activations
/// (scoring's).
pub fn lm_head(
    dev: &Device,
    hidden: &[f32],
    dim: usize,
    weight: HeadWeight<'_>,
    vocab: usize,
    out: &mut [f32],
) -> Result<(), OpError> {
    run(
        dev,
        hidden.into(),
        dim,
        weight.view(),
        vocab,
        out.into(),
        Activations::F32,
    )
}

/// [`lm_head`] on device views: `hidden`, `weight` and `out` stay where they are (on a GPU,
/// in device memory: the weight uploaded once, at model load).
pub fn lm_head_dev<'a>(
    dev: &Device,
    hidden: DevSlice<'_, f32>,
    dim: usize,
    weight: impl Into<WeightView<'a>>,
    vocab: usize,
    out: DevSliceMut<'_, f32>,
) -> Result<(), OpError> {
    lm_head_dev_act(dev, hidden, dim, weight, vocab, out, Activations::F32)
}

/// [`lm_head_dev`] with the activations meeting the weight as `act` says (a GGUF head's
/// llama.cpp rounding or quantization); anything but f32 takes the GEMM for every row count.
pub fn lm_head_dev_act<'a>(
    dev: &Device,
    hidden: DevSlice<'_, f32>,
    dim: usize,
    weight: impl Into<WeightView<'a>>,
    vocab: usize,
    out: DevSliceMut<'_, f32>,
    act: Activations,
) -> Result<(), OpError> {
    run(dev, hidden, dim, weight.into(), vocab, out, act)
}

/// Checks the shapes of `hidden` `[rows, dim]`, `weight` `[vocab, dim]` and `out`
/// `[rows, vocab]` (any placement), then launches the kernel for the row count.
fn run(
    dev: &Device,
    hidden: DevSlice<'_, f32>,
    dim: usize,
    weight: WeightView<'_>,
    vocab: usize,
    out: DevSliceMut<'_, f32>,
    act: Activations,
) -> Result<(), OpError> {
    const OP: &str = "lm_head";
    if dim == 0 || vocab == 0 {
        return Err(OpError::Invalid {
            op: OP,
            message: format!("dim = {dim} and vocab = {vocab} must be positive"),
        });
    }
    let hidden_len = hidden.len();
    let rows = hidden_len / dim;
    check_len(OP, "hidden", hidden_len, rows * dim)?;
    check_len(OP, "weight", weight.len(), vocab * dim)?;
    check_len(OP, "out", out.len(), rows * vocab)?;
    to_u32(OP, "vocab * dim", vocab * dim)?;
    to_u32(OP, "rows * vocab", rows * vocab)?;
    let vocab32 = to_u32(OP, "vocab", vocab)?;
    if rows == 0 {
        return Ok(());
    }
    let dim32 = to_u32(OP, "dim", dim)?;
    // One row against a float weight: the matrix-vector kernel (a quantized one takes the GEMM).
    if rows == 1 && matches!(act, Activations::F32 | Activations::Bf16x3) {
        macro_rules! matvec {
            ($kernel:ident, $w:expr) => {{
                let grid = [vocab32.div_ceil($kernel::KERNEL.workgroup_size), 1, 1];
                let args = $kernel::Args {
                    hidden,
                    w: $w,
                    out,
                    vocab: vocab32,
                    dim: dim32,
                };
                dev.launch(grid, args)?;
                return Ok(());
            }};
        }
        match weight {
            WeightView::Bf16(w) => matvec!(lm_head_matvec_bf16, w),
            WeightView::F16(w) => matvec!(lm_head_matvec_f16, w),
            WeightView::F32(w) => matvec!(lm_head_matvec_f32, w),
            WeightView::Quant(_) | WeightView::Affine(_) => {}
        }
    }
    // The GEMM `y = x · wᵀ` with x = hidden `[rows, dim]`, w `[vocab, dim]`, overwriting y.
    let rows32 = to_u32(OP, "rows", rows)?;
    gemm::launch(
        dev,
        hidden,
        weight,
        out,
        [rows32, vocab32, dim32],
        GemmOut::Overwrite,
        act,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::{test_values as values, Pool};
    use crate::ops::gemm::EXACT_ROWS;

    /// Shapes the matrix form's blocking does not divide: `dim` not a multiple of the GEMM's
    /// 64-wide K steps, `rows` not a multiple of its 64-row blocks, `vocab` not a multiple of
    /// its 64 columns. Every host variant must agree bit for bit with the generated Rust, and
    /// both with an f64 reference.
    #[test]
    fn matrix_kernel_handles_ragged_shapes_identically_everywhere() {
        let (rows, dim, vocab) = (2 * EXACT_ROWS as usize + 3, 13, 70);
        let hidden = values(rows * dim, 1, 2.0);
        let wf = values(vocab * dim, 2, 0.5);
        let wb: Vec<bf16> = wf.iter().map(|&x| bf16::from_f32(x)).collect();
        let wh: Vec<f16> = wf.iter().map(|&x| f16::from_f32(x)).collect();
        let weights = [
            (
                "bf16",
                HeadWeight::Bf16(&wb),
                wb.iter().map(|x| x.to_f32()).collect::<Vec<_>>(),
            ),
            (
                "f16",
                HeadWeight::F16(&wh),
                wh.iter().map(|x| x.to_f32()).collect(),
            ),
            ("f32", HeadWeight::F32(&wf), wf.clone()),
        ];
        let cpu = Device::open(Pool::Cpu).unwrap();
        let hosts: Vec<Device> = lse_dsl::rt::HOST_CPUS
            .iter()
            .filter_map(|c| Device::host_variant(c))
            .collect();
        for (name, weight, widened) in weights {
            let mut want = vec![0.0f32; rows * vocab];
            lm_head(&cpu, &hidden, dim, weight, vocab, &mut want).unwrap();
            for r in 0..rows {
                for v in 0..vocab {
                    let exact: f64 = (0..dim)
                        .map(|k| hidden[r * dim + k] as f64 * widened[v * dim + k] as f64)
                        .sum();
                    let got = want[r * vocab + v];
                    assert!(
                        (got as f64 - exact).abs() <= 1e-5,
                        "{name} [{r}, {v}]: {got} vs {exact}"
                    );
                }
            }
            for host in &hosts {
                let mut got = vec![0.0f32; rows * vocab];
                lm_head(host, &hidden, dim, weight, vocab, &mut got).unwrap();
                let same = got
                    .iter()
                    .zip(&want)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(
                    same,
                    "{name} on {}: differs from generated Rust",
                    host.arch()
                );
            }
        }
    }

    /// The scoring chain on device buffers (hidden rows uploaded, the weight resident, logits
    /// left in a device buffer and read there by both reductions) gives the bits of the chain
    /// on host slices, on every CPU-side device and for one row (matvec) and many (matrix).
    #[test]
    fn device_buffer_chain_matches_the_host_slice_chain() {
        use crate::ops::{lse_pick, lse_pick_dev, topk_pairs, topk_pairs_dev};
        let (dim, vocab, n_ids, k) = (24, 333, 2, 5);
        let wf = values(vocab * dim, 7, 0.5);
        let wb: Vec<bf16> = wf.iter().map(|&x| bf16::from_f32(x)).collect();
        let mut devs = vec![Device::open(Pool::Cpu).unwrap()];
        devs.extend(
            lse_dsl::rt::HOST_CPUS
                .iter()
                .filter_map(|c| Device::host_variant(c)),
        );
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        for dev in &devs {
            let resident = dev.buffer_from(&wb).unwrap();
            // Buffers larger than any block, as the head stage keeps them.
            let mut hidden_buf = dev.alloc::<f32>(9 * dim).unwrap();
            let mut logits_buf = dev.alloc::<f32>(9 * vocab + 1).unwrap();
            for rows in [1, 6] {
                let hidden = values(rows * dim, rows as u64, 2.0);
                let ids: Vec<u32> = (0..rows * n_ids).map(|i| (i * 53 % vocab) as u32).collect();
                let mut want = vec![0.0f32; rows * vocab];
                lm_head(dev, &hidden, dim, HeadWeight::Bf16(&wb), vocab, &mut want).unwrap();
                let want_pick = lse_pick(dev, &want, vocab, &ids, n_ids).unwrap();
                let want_top = topk_pairs(dev, &want, vocab, k).unwrap();

                hidden_buf.upload(&hidden).unwrap();
                let h = hidden_buf.slice(..rows * dim).unwrap();
                let out = logits_buf.slice_mut(..rows * vocab).unwrap();
                lm_head_dev(dev, h, dim, WeightView::Bf16(resident.view()), vocab, out).unwrap();
                let logits = logits_buf.slice(..rows * vocab).unwrap();
                let pick = lse_pick_dev(dev, logits, vocab, &ids, n_ids).unwrap();
                let top = topk_pairs_dev(dev, logits, vocab, k).unwrap();

                let mut got = vec![0.0f32; rows * vocab];
                logits_buf.download(&mut got).unwrap();
                let at = format!("rows={rows} on {}", dev.arch());
                assert_eq!(bits(&got), bits(&want), "logits, {at}");
                assert_eq!(bits(&pick.stats), bits(&want_pick.stats), "stats, {at}");
                assert_eq!(bits(&pick.picked), bits(&want_pick.picked), "picked, {at}");
                assert_eq!(top.ids, want_top.ids, "top-k ids, {at}");
                assert_eq!(
                    bits(&top.logits),
                    bits(&want_top.logits),
                    "top-k logits, {at}"
                );
            }
        }
    }

    /// The error of a host variant's call, after checking that it failed and that the device
    /// variant's call failed with the same message.
    fn same_error<T, U>(host: Result<T, OpError>, on_dev: Result<U, OpError>) -> String {
        let host = host.err().expect("the host variant refuses").to_string();
        let on_dev = on_dev
            .err()
            .expect("the device variant refuses")
            .to_string();
        assert_eq!(host, on_dev);
        host
    }

    /// The device variants share the host variants' checks: the same bad shapes give the
    /// same errors.
    #[test]
    fn device_variants_refuse_bad_shapes_like_the_host_variants() {
        use crate::ops::{lse_pick, lse_pick_dev, topk_pairs, topk_pairs_dev};
        let dev = Device::open(Pool::Cpu).unwrap();
        let (dim, vocab) = (4, 10);
        let w = values(vocab * dim, 1, 1.0);
        let resident = dev.buffer_from(&w).unwrap();
        let hidden = values(2 * dim + 1, 2, 1.0);
        let mut hidden_buf = dev.alloc::<f32>(hidden.len()).unwrap();
        hidden_buf.upload(&hidden).unwrap();
        let mut out = vec![0.0f32; 2 * vocab];
        let mut out_buf = dev.alloc::<f32>(2 * vocab).unwrap();
        let host = same_error(
            lm_head(&dev, &hidden, dim, HeadWeight::F32(&w), vocab, &mut out),
            lm_head_dev(
                &dev,
                hidden_buf.slice(..).unwrap(),
                dim,
                WeightView::F32(resident.view()),
                vocab,
                out_buf.slice_mut(..).unwrap(),
            ),
        );
        assert!(host.contains("hidden has 9 elements, expected 8"), "{host}");

        let logits = values(2 * vocab + 3, 3, 1.0);
        let mut logits_buf = dev.alloc::<f32>(logits.len()).unwrap();
        logits_buf.upload(&logits).unwrap();
        same_error(
            lse_pick(&dev, &logits, vocab, &[1, 2], 1),
            lse_pick_dev(&dev, logits_buf.slice(..).unwrap(), vocab, &[1, 2], 1),
        );
        let host = same_error(
            lse_pick(&dev, &logits[..2 * vocab], vocab, &[1, 10], 1),
            lse_pick_dev(
                &dev,
                logits_buf.slice(..2 * vocab).unwrap(),
                vocab,
                &[1, 10],
                1,
            ),
        );
        assert!(
            host.contains("id 10 is not below the vocabulary size 10"),
            "{host}"
        );
        let host = same_error(
            topk_pairs(&dev, &logits, vocab, 2),
            topk_pairs_dev(&dev, logits_buf.slice(..).unwrap(), vocab, 2),
        );
        assert!(
            host.contains("logits has 23 elements, expected 20"),
            "{host}"
        );
    }
}
