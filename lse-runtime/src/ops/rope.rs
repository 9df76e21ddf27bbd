//! `attention.qk_norm_rope.v2`: the q/k head norms and partial NeoX RoPE of a full-attention
//! layer, and the per-pass table of RoPE cosines and sines it reads.

use lse_kernels::attention::qk_norm_rope::qk_norm_rope as kernel;

use super::{check_len, to_u32, OpError};
use crate::device::{DevSlice, DevSliceMut, Device, DeviceBuf};

/// RoPE frequencies: `inv_freq[i] = θ^(−2i/rot)` for `i < rot / 2`, formed in f64 and
/// rounded to f32 as transformers does.
pub fn rope_inv_freq(theta: f64, rot: usize) -> Vec<f32> {
    (0..rot / 2)
        .map(|i| (1.0 / theta.powf(2.0 * i as f64 / rot as f64)) as f32)
        .collect()
}

/// The RoPE cosines and sines of one prefill pass: `[t, 2 · half]`, each token's `half`
/// cosines then its `half` sines. Built once per pass on the host and read by every
/// full-attention layer: the angle `pos · inv_freq[i]` is formed in f32 and its sine and
/// cosine taken in f32, as transformers does; LOOM has no `sin`/`cos`. The table lives in the
/// device's memory (one upload per pass on a GPU).
pub struct RopeTable {
    t: usize,
    half: usize,
    cos_sin: DeviceBuf<f32>,
}

impl RopeTable {
    /// The table for tokens at positions `pos0..pos0 + t` and frequencies `inv_freq`
    /// (`θ^(-2i/rot)`, `rot / 2` of them), in `dev`'s memory.
    pub fn new(dev: &Device, inv_freq: &[f32], pos0: usize, t: usize) -> Result<Self, OpError> {
        let half = inv_freq.len();
        let mut cos_sin = vec![0.0; t * 2 * half];
        for (i, row) in cos_sin.chunks_exact_mut(2 * half.max(1)).enumerate() {
            let pos = (pos0 + i) as f32;
            for (j, f) in inv_freq.iter().enumerate() {
                let (s, c) = (pos * f).sin_cos();
                row[j] = c;
                row[half + j] = s;
            }
        }
        Ok(RopeTable {
            t,
            half,
            cos_sin: dev.buffer_from(&cos_sin)?,
        })
    }

    /// Rotated pairs per head: `rot / 2`.
    pub fn half(&self) -> usize {
        self.half
    }

    /// The table's tokens.
    pub fn tokens(&self) -> usize {
        self.t
    }
}

/// Where the heads of a pass lie in the source rows: head `h` of token `i` starts at
/// `i * row + h * head` (queries inside the q projection's `[q | gate]` pairs, keys in the
/// k projection).
#[derive(Clone, Copy, Debug)]
pub struct HeadLayout {
    pub heads: usize,
    pub head_dim: usize,
    /// Elements from one token's row to the next.
    pub row: usize,
    /// Elements from one head to the next.
    pub head: usize,
}

/// Normalises every head of `src` with `w` (`[head_dim]`, a plain multiplier: the model adds the
/// 1 of the zero-centred norm at load) and rotates its first `2 · rope.half()` dimensions by
/// each token's position, into `dst` (`[t, heads, head_dim]`, `t = rope.tokens()`).
pub fn qk_norm_rope<'a>(
    dev: &Device,
    src: impl Into<DevSlice<'a, f32>>,
    layout: HeadLayout,
    w: impl Into<DevSlice<'a, f32>>,
    eps: f32,
    rope: &RopeTable,
    dst: impl Into<DevSliceMut<'a, f32>>,
) -> Result<(), OpError> {
    let (src, w, dst) = (src.into(), w.into(), dst.into());
    const OP: &str = "attention.qk_norm_rope.v2";
    let HeadLayout {
        heads,
        head_dim,
        row,
        head,
    } = layout;
    let t = rope.tokens();
    if head_dim == 0 || heads == 0 || 2 * rope.half > head_dim {
        return Err(OpError::Invalid {
            op: OP,
            message: format!(
                "{heads} heads of {head_dim} values with {} rotated dimensions: expected at least one head of at least the rotated dimensions",
                2 * rope.half
            ),
        });
    }
    if head < head_dim || row < (heads - 1) * head + head_dim {
        return Err(OpError::Invalid {
            op: OP,
            message: format!(
                "head stride {head} and row stride {row} overlap heads of {head_dim} values"
            ),
        });
    }
    check_len(OP, "w", w.len(), head_dim)?;
    check_len(OP, "dst", dst.len(), t * heads * head_dim)?;
    check_len(OP, "src", src.len(), t * row)?;
    to_u32(OP, "src", src.len())?;
    to_u32(OP, "dst", dst.len())?;
    if t == 0 {
        return Ok(());
    }
    let args = kernel::Args {
        src,
        w,
        cos_sin: rope.cos_sin.view(),
        dst,
        src_row: row as u32,
        src_head: head as u32,
        head_dim: head_dim as u32,
        half: rope.half as u32,
        eps,
    };
    dev.launch([to_u32(OP, "heads", heads)?, t as u32, 1], args)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Pool;

    #[test]
    fn qk_norm_rope_rejects_overlapping_heads_and_too_many_rotated_dimensions() {
        let dev = Device::open(Pool::Cpu).unwrap();
        let rope = RopeTable::new(&dev, &[1.0, 0.5], 0, 2).unwrap();
        let w = vec![0.0; 4];
        let src = vec![1.0; 16];
        let mut dst = vec![0.0; 16];
        let layout = HeadLayout {
            heads: 2,
            head_dim: 4,
            row: 8,
            head: 4,
        };
        qk_norm_rope(&dev, &src, layout, &w, 1e-6, &rope, &mut dst).unwrap();
        let overlap = HeadLayout { head: 3, ..layout };
        let e = qk_norm_rope(&dev, &src, overlap, &w, 1e-6, &rope, &mut dst).unwrap_err();
        assert!(e.to_string().contains("overlap"), "{e}");
        let short_row = HeadLayout { row: 7, ..layout };
        let e = qk_norm_rope(&dev, &src, short_row, &w, 1e-6, &rope, &mut dst).unwrap_err();
        assert!(e.to_string().contains("overlap"), "{e}");
        let narrow = HeadLayout {
            head_dim: 3,
            head: 3,
            row: 6,
            ..layout
        };
        let e = qk_norm_rope(&dev, &src, narrow, &w[..3], 1e-6, &rope, &mut dst).unwrap_err();
        assert!(e.to_string().contains("4 rotated dimensions"), "{e}");
        let e = qk_norm_rope(&dev, &src[..15], layout, &w, 1e-6, &rope, &mut dst).unwrap_err();
        assert!(
            e.to_string().contains("src has 15 elements, expected 16"),
            "{e}"
        );
    }

    #[test]
    fn rope_frequencies_fall_from_one_by_theta_over_the_rotated_pairs() {
        assert_eq!(rope_inv_freq(10000.0, 4), vec![1.0, 0.01]);
        assert!(rope_inv_freq(10000.0, 1).is_empty());
    }

    #[test]
    fn rope_table_keeps_its_tokens_without_rotated_dimensions() {
        let dev = Device::open(Pool::Cpu).unwrap();
        let table = RopeTable::new(&dev, &[], 5, 3).unwrap();
        assert_eq!((table.tokens(), table.half()), (3, 0));
    }
}
