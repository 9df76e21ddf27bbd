//! The LM head kernels (`lm_head.matrix_<ty>.v1`, `lm_head.matvec_<ty>.v1` for ty = bf16, f16,
//! f32): one instance per weight dtype of the same LOOM source.

use half::{bf16, f16};
use lse_dsl::rt::KernelDef;
use lse_kernels::lm_head::{
    lm_head_matrix_bf16, lm_head_matrix_f16, lm_head_matrix_f32, lm_head_matvec_bf16,
    lm_head_matvec_f16, lm_head_matvec_f32,
};

use super::{check_len, to_u32, OpError};
use crate::device::{Arg, Device};

/// Rows per workgroup of `lm_head.matrix_*` (its `ROWS` constant).
const MATRIX_ROW_TILE: u32 = 128;

/// The head's weight, `[vocab, dim]`, in its stored dtype.
#[derive(Clone, Copy, Debug)]
pub enum HeadWeight<'a> {
    Bf16(&'a [bf16]),
    F16(&'a [f16]),
    F32(&'a [f32]),
}

impl<'a> HeadWeight<'a> {
    fn len(&self) -> usize {
        match self {
            HeadWeight::Bf16(w) => w.len(),
            HeadWeight::F16(w) => w.len(),
            HeadWeight::F32(w) => w.len(),
        }
    }

    /// The weight as a kernel argument.
    fn arg(self) -> Arg<'a> {
        match self {
            HeadWeight::Bf16(w) => Arg::buf(w),
            HeadWeight::F16(w) => Arg::buf(w),
            HeadWeight::F32(w) => Arg::buf(w),
        }
    }

    /// The matrix kernel (many rows) for this weight's dtype.
    pub fn matrix_kernel(&self) -> &'static KernelDef {
        match self {
            HeadWeight::Bf16(_) => &lm_head_matrix_bf16::KERNEL,
            HeadWeight::F16(_) => &lm_head_matrix_f16::KERNEL,
            HeadWeight::F32(_) => &lm_head_matrix_f32::KERNEL,
        }
    }

    /// The matrix-vector kernel (one row) for this weight's dtype.
    pub fn matvec_kernel(&self) -> &'static KernelDef {
        match self {
            HeadWeight::Bf16(_) => &lm_head_matvec_bf16::KERNEL,
            HeadWeight::F16(_) => &lm_head_matvec_f16::KERNEL,
            HeadWeight::F32(_) => &lm_head_matvec_f32::KERNEL,
        }
    }
}

/// `out[r, v] = Σ_k hidden[r, k] · weight[v, k]` for `rows = hidden.len() / dim` rows; one row
/// uses the matrix-vector kernel (serving's shape), more use the matrix kernel (scoring's).
pub fn lm_head(
    dev: &Device,
    hidden: &[f32],
    dim: usize,
    weight: HeadWeight<'_>,
    vocab: usize,
    out: &mut [f32],
) -> Result<(), OpError> {
    const OP: &str = "lm_head";
    if dim == 0 || vocab == 0 {
        return Err(OpError::Invalid {
            op: OP,
            message: format!("dim = {dim} and vocab = {vocab} must be positive"),
        });
    }
    let rows = hidden.len() / dim;
    check_len(OP, "hidden", hidden.len(), rows * dim)?;
    check_len(OP, "weight", weight.len(), vocab * dim)?;
    check_len(OP, "out", out.len(), rows * vocab)?;
    to_u32(OP, "vocab * dim", vocab * dim)?;
    to_u32(OP, "rows * vocab", rows * vocab)?;
    let vocab32 = to_u32(OP, "vocab", vocab)?;
    if rows == 1 {
        let blocks = vocab32.div_ceil(weight.matvec_kernel().workgroup_size);
        dev.launch(
            weight.matvec_kernel(),
            [blocks, 1, 1],
            &[
                Arg::buf(hidden),
                weight.arg(),
                Arg::buf_mut(out),
                Arg::U32(vocab as u32),
                Arg::U32(dim as u32),
            ],
        )?;
    } else if rows > 1 {
        let blocks = vocab32.div_ceil(weight.matrix_kernel().workgroup_size);
        let tiles = to_u32(OP, "rows", rows)?.div_ceil(MATRIX_ROW_TILE);
        dev.launch(
            weight.matrix_kernel(),
            [blocks, tiles, 1],
            &[
                Arg::buf(hidden),
                weight.arg(),
                Arg::buf_mut(out),
                Arg::U32(rows as u32),
                Arg::U32(vocab as u32),
                Arg::U32(dim as u32),
            ],
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Pool;

    /// Deterministic values in [-scale, scale).
    fn values(n: usize, seed: u64, scale: f32) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
            })
            .collect()
    }

    /// Shapes the matrix kernel's blocking does not divide: `dim` not a multiple of its
    /// 4-wide `k` blocks, `rows` not a multiple of its row tile, `vocab` not a multiple of the
    /// workgroup. Every host variant must agree bit for bit with the generated Rust, and both
    /// with an f64 reference.
    #[test]
    fn matrix_kernel_handles_ragged_shapes_identically_everywhere() {
        let (rows, dim, vocab) = (MATRIX_ROW_TILE as usize + 3, 13, 70);
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
}
