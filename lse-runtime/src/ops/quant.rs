//! Weights that stay in a ggml block format in memory (a GGUF checkpoint's quantized tensors,
//! read where the file is mapped): the formats the quantized kernels read
//! (`kernels-src/src/gemm_quant.rs`, `embedding.gather_q`), and a view of such a weight.

use super::OpError;
use crate::device::DevSlice;

/// A ggml block format that LOOM kernels read in place.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QuantFormat {
    /// 18-byte blocks of 32: f16 scale, 4-bit quants offset by 8.
    Q4_0,
    /// 20-byte blocks of 32: f16 scale and minimum, 4-bit quants.
    Q4_1,
    /// 22-byte blocks of 32: f16 scale, 32 fifth bits, 4-bit quants; offset by 16.
    Q5_0,
    /// 24-byte blocks of 32: f16 scale and minimum, 32 fifth bits, 4-bit quants.
    Q5_1,
    /// 34-byte blocks of 32: f16 scale, 32 signed 8-bit quants.
    Q8_0,
    /// 144-byte blocks of 256: 4-bit quants, 6-bit scales and minimums.
    Q4_K,
    /// 176-byte blocks of 256: 5-bit quants, 6-bit scales and minimums.
    Q5_K,
    /// 210-byte blocks of 256: 6-bit quants, 8-bit scales.
    Q6_K,
}

impl QuantFormat {
    /// Elements per block.
    pub fn block_elems(self) -> usize {
        match self {
            QuantFormat::Q4_0
            | QuantFormat::Q4_1
            | QuantFormat::Q5_0
            | QuantFormat::Q5_1
            | QuantFormat::Q8_0 => 32,
            QuantFormat::Q4_K | QuantFormat::Q5_K | QuantFormat::Q6_K => 256,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        match self {
            QuantFormat::Q4_0 => 18,
            QuantFormat::Q4_1 => 20,
            QuantFormat::Q5_0 => 22,
            QuantFormat::Q5_1 => 24,
            QuantFormat::Q8_0 => 34,
            QuantFormat::Q4_K => 144,
            QuantFormat::Q5_K => 176,
            QuantFormat::Q6_K => 210,
        }
    }

    /// ggml's name of the format.
    pub fn name(self) -> &'static str {
        match self {
            QuantFormat::Q4_0 => "Q4_0",
            QuantFormat::Q4_1 => "Q4_1",
            QuantFormat::Q5_0 => "Q5_0",
            QuantFormat::Q5_1 => "Q5_1",
            QuantFormat::Q8_0 => "Q8_0",
            QuantFormat::Q4_K => "Q4_K",
            QuantFormat::Q5_K => "Q5_K",
            QuantFormat::Q6_K => "Q6_K",
        }
    }

    /// The `format` argument of `embedding.gather_q`.
    pub(super) fn code(self) -> u32 {
        match self {
            QuantFormat::Q8_0 => 0,
            QuantFormat::Q4_K => 1,
            QuantFormat::Q5_K => 2,
            QuantFormat::Q6_K => 3,
            QuantFormat::Q4_0 => 4,
            QuantFormat::Q4_1 => 5,
            QuantFormat::Q5_0 => 6,
            QuantFormat::Q5_1 => 7,
        }
    }

    /// Words a block takes when interleaved ([`Interleaved`]): its bytes, zero-padded to a
    /// whole number of words.
    pub fn slot_words(self) -> usize {
        self.block_bytes().div_ceil(4)
    }

    /// Bytes of `elems` values (a whole number of blocks), or `None` when `elems` is not one.
    pub fn bytes_of(self, elems: usize) -> Option<usize> {
        elems
            .is_multiple_of(self.block_elems())
            .then(|| elems / self.block_elems() * self.block_bytes())
    }
}

/// A quantized weight as one launch reads it: its bytes as little-endian `u32` words (a
/// trailing partial word zero-padded), holding `len` values.
#[derive(Clone, Copy, Debug)]
pub struct QuantView<'a> {
    pub format: QuantFormat,
    pub words: DevSlice<'a, u32>,
    /// Values (elements) the bytes stand for.
    pub len: usize,
    /// The same values interleaved by 64 rows for the integer GEMM, when the weight was
    /// made so at load (a K-quant weight met by Q8_K activations).
    pub interleaved: Option<Interleaved<'a>>,
}

/// A K-quant weight interleaved by 64 rows, as the integer GEMM reads it
/// ([`super::gemm_int::interleave`]): one or more matrices of `rows` x `cols` values, each in
/// `rows.div_ceil(64)` groups of 64 rows.
#[derive(Clone, Copy, Debug)]
pub struct Interleaved<'a> {
    pub words: DevSlice<'a, u32>,
    /// Rows of each matrix.
    pub rows: usize,
    /// Columns (values per row).
    pub cols: usize,
}

impl<'a> Interleaved<'a> {
    /// Values `range` of the interleaved matrices, as one matrix of their rows, when the
    /// range is whole rows inside one matrix starting a group of 64 of them.
    fn sub(&self, format: QuantFormat, range: &std::ops::Range<usize>) -> Option<Self> {
        let (rows, cols) = (self.rows, self.cols);
        if rows == 0
            || cols == 0
            || !range.start.is_multiple_of(cols)
            || !range.end.is_multiple_of(cols)
        {
            return None;
        }
        let (first, end) = (range.start / cols, range.end / cols);
        let (matrix, row) = (first / rows, first % rows);
        if !row.is_multiple_of(64) || end <= first || end > (matrix + 1) * rows {
            return None;
        }
        let group = 64 * cols / format.block_elems() * format.slot_words();
        let start = (matrix * rows.div_ceil(64) + row / 64) * group;
        let words = (end - first).div_ceil(64) * group;
        Some(Interleaved {
            words: self.words.sub(start..start + words).ok()?,
            rows: end - first,
            cols,
        })
    }
}

impl<'a> QuantView<'a> {
    /// Checks the view as a matrix of rows of `cols` values for the kernels: `cols` a whole
    /// number of blocks, the bytes indexable in 32 bits, and enough words for all the values;
    /// the error names `op`, `what` and the format.
    pub(super) fn check_rows(
        &self,
        op: &'static str,
        what: &str,
        cols: usize,
    ) -> Result<(), OpError> {
        let f = self.format;
        let bytes = f
            .bytes_of(self.len)
            .filter(|_| cols.is_multiple_of(f.block_elems()));
        let Some(bytes) = bytes else {
            return Err(OpError::Invalid {
                op,
                message: format!(
                    "{what}: a {} weight needs rows of a multiple of {} values, got {cols}",
                    f.name(),
                    f.block_elems()
                ),
            });
        };
        super::to_u32(op, &format!("{what} bytes"), bytes)?;
        let need = bytes.div_ceil(4);
        if self.words.len() < need {
            return Err(OpError::Invalid {
                op,
                message: format!(
                    "{what}: {} values of {} need {need} words, got {}",
                    self.len,
                    f.name(),
                    self.words.len()
                ),
            });
        }
        Ok(())
    }

    /// Values `range` (flat index) of the weight: whole blocks starting at a word, as one
    /// expert's rows of a stacked expert tensor are.
    pub fn sub(&self, range: std::ops::Range<usize>) -> Result<QuantView<'a>, OpError> {
        let f = self.format;
        let bytes = |at: usize| f.bytes_of(at).filter(|b| b.is_multiple_of(4));
        let (Some(start), Some(end)) = (bytes(range.start), f.bytes_of(range.end)) else {
            return Err(OpError::Invalid {
                op: "quantized weight",
                message: format!(
                    "values {range:?} of a {} weight do not start at a 4-byte boundary of whole blocks",
                    f.name()
                ),
            });
        };
        if range.start > range.end || range.end > self.len {
            return Err(OpError::Invalid {
                op: "quantized weight",
                message: format!("values {range:?} of a weight of {} values", self.len),
            });
        }
        Ok(QuantView {
            format: f,
            words: self.words.sub(start / 4..end.div_ceil(4))?,
            len: range.end - range.start,
            interleaved: self.interleaved.and_then(|i| i.sub(f, &range)),
        })
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::device::{cpu_side_devices, test_values as values, Device, Pool};
    use crate::model::gguf::dequantize_row;
    use crate::ops::{embed_tokens, gemm, Activations, GemmOut, HeadWeight, WeightView};

    const FORMATS: [QuantFormat; 8] = [
        QuantFormat::Q4_0,
        QuantFormat::Q4_1,
        QuantFormat::Q5_0,
        QuantFormat::Q5_1,
        QuantFormat::Q8_0,
        QuantFormat::Q4_K,
        QuantFormat::Q5_K,
        QuantFormat::Q6_K,
    ];

    /// `rows` rows of `k` values in `format`: random bytes, with each block's f16 scales
    /// (`d`, and `m` or `dmin` for Q4_1/Q5_1/Q4_K/Q5_K) set to finite values of either sign.
    pub(in crate::ops) fn blocks(format: QuantFormat, rows: usize, k: usize, seed: u64) -> Vec<u8> {
        let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let bytes = format.bytes_of(rows * k).unwrap();
        let mut b: Vec<u8> = (0..bytes).map(|_| next() as u8).collect();
        let scale_at: &[usize] = match format {
            QuantFormat::Q4_0 | QuantFormat::Q5_0 | QuantFormat::Q8_0 => &[0],
            QuantFormat::Q4_1 | QuantFormat::Q5_1 | QuantFormat::Q4_K | QuantFormat::Q5_K => {
                &[0, 2]
            }
            QuantFormat::Q6_K => &[208],
        };
        for block in b.chunks_exact_mut(format.block_bytes()) {
            for &at in scale_at {
                let x = (next() % 2000) as f32 / 1000.0 - 1.0;
                block[at..at + 2].copy_from_slice(&half::f16::from_f32(x * 0.01).to_le_bytes());
            }
        }
        b
    }

    pub(in crate::ops) fn dequantized(format: QuantFormat, b: &[u8], k: usize) -> Vec<f32> {
        let row_bytes = format.bytes_of(k).unwrap();
        let mut out = vec![0.0f32; b.len() / row_bytes * k];
        for (row, bytes) in out.chunks_exact_mut(k).zip(b.chunks_exact(row_bytes)) {
            dequantize_row(format.into(), bytes, row);
        }
        out
    }

    pub(in crate::ops) fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    /// The GEMM on a weight kept in its block format gives the bits of the f32 GEMM on the
    /// weight dequantized as ggml does, on every device, for shapes the blocking does not
    /// divide (one row; rows past one 128-row block; columns past 64; several blocks per
    /// row, so Q4_0, Q5_0, Q8_0 and Q6_K blocks start at odd half-words, and rows of such
    /// blocks at half-words), overwriting and accumulating.
    #[test]
    fn quantized_gemm_equals_the_gemm_on_the_dequantized_weight() {
        for format in FORMATS {
            let be = format.block_elems();
            for (m, n, k) in [(1, 1, be), (3, 70, 3 * be), (2 * 128 + 5, 129, 2 * be)] {
                let b = blocks(format, n, k, (m * n + k) as u64);
                let w: Vec<u32> = bytemuck::pod_collect_to_vec(&b);
                let wf = dequantized(format, &b, k);
                let x = values(m * k, 3, 1.0);
                let init = values(m * n, 4, 1.0);
                let view = || {
                    WeightView::Quant(QuantView {
                        format,
                        words: DevSlice::from(&w[..]),
                        len: n * k,
                        interleaved: None,
                    })
                };
                for dev in cpu_side_devices() {
                    for out in [GemmOut::Overwrite, GemmOut::Accumulate] {
                        let at = format!("{} {m}x{n}x{k} {out:?} on {}", format.name(), dev.arch());
                        let (mut want, mut got) = (init.clone(), init.clone());
                        gemm(
                            &dev,
                            &x[..],
                            k,
                            HeadWeight::F32(&wf),
                            n,
                            &mut want[..],
                            out,
                            Activations::F32,
                        )
                        .unwrap();
                        gemm(
                            &dev,
                            &x[..],
                            k,
                            view(),
                            n,
                            &mut got[..],
                            out,
                            Activations::F32,
                        )
                        .unwrap();
                        assert_eq!(bits(&got), bits(&want), "{at}");
                    }
                }
            }
        }
    }

    /// The embedding of a table kept in its block format gives each token's row dequantized
    /// as ggml does, on every device (rows of three blocks, so the odd rows of Q4_0, Q5_0,
    /// Q8_0 and Q6_K start at half-words).
    #[test]
    fn quantized_embedding_rows_are_the_dequantized_rows() {
        for format in FORMATS {
            let (vocab, hidden) = (7, 3 * format.block_elems());
            let b = blocks(format, vocab, hidden, 11);
            let w: Vec<u32> = bytemuck::pod_collect_to_vec(&b);
            let table = dequantized(format, &b, hidden);
            let ids = [6u32, 0, 3, 3];
            let want: Vec<f32> = ids
                .iter()
                .flat_map(|&i| table[i as usize * hidden..(i as usize + 1) * hidden].to_vec())
                .collect();
            for dev in cpu_side_devices() {
                let view = WeightView::Quant(QuantView {
                    format,
                    words: DevSlice::from(&w[..]),
                    len: vocab * hidden,
                    interleaved: None,
                });
                let mut got = vec![0.0f32; ids.len() * hidden];
                embed_tokens(&dev, view, hidden, &ids, &mut got[..]).unwrap();
                assert_eq!(
                    bits(&got),
                    bits(&want),
                    "{} on {}",
                    format.name(),
                    dev.arch()
                );
            }
        }
    }

    /// Rows whose length is not a whole number of blocks, and slices that do not start at a
    /// word of whole blocks, are refused with the format named.
    #[test]
    fn misfitting_shapes_and_slices_are_refused() {
        let dev = Device::open(Pool::Host).unwrap();
        let b = blocks(QuantFormat::Q6_K, 3, 256, 1);
        let w: Vec<u32> = bytemuck::pod_collect_to_vec(&b);
        let view = QuantView {
            format: QuantFormat::Q6_K,
            words: DevSlice::from(&w[..]),
            len: 3 * 256,
            interleaved: None,
        };
        let x = vec![0.0f32; 2 * 384];
        let mut y = [0.0f32; 2 * 2];
        let e = gemm(
            &dev,
            &x[..],
            384,
            WeightView::Quant(view),
            2,
            &mut y[..],
            GemmOut::Overwrite,
            Activations::F32,
        )
        .unwrap_err();
        assert!(e.to_string().contains("Q6_K"), "{e}");
        // Row 1 of Q6_K rows of 256 starts at byte 210, inside a word.
        let e = view.sub(256..512).unwrap_err();
        assert!(e.to_string().contains("4-byte boundary"), "{e}");
        assert!(view.sub(100..256).is_err(), "not a whole block");
        assert!(view.sub(512..1024).is_err(), "past the end");
        let two = view.sub(512..768).unwrap();
        assert_eq!(two.len, 256);
        // Q4_0's second block of 32 starts at byte 18, a half-word.
        let q4_0 = QuantView {
            format: QuantFormat::Q4_0,
            len: 64,
            ..view
        };
        let e = q4_0.sub(32..64).unwrap_err();
        assert!(e.to_string().contains("Q4_0"), "{e}");
        assert_eq!(q4_0.sub(0..32).unwrap().words.len(), 5);
        // Fewer words than the values need.
        let short = QuantView {
            words: DevSlice::from(&w[..w.len() - 1]),
            ..view
        };
        let mut y2 = [0.0f32; 3];
        let x2 = vec![0.0f32; 256];
        let e = gemm(
            &dev,
            &x2[..],
            256,
            WeightView::Quant(short),
            3,
            &mut y2[..],
            GemmOut::Overwrite,
            Activations::F32,
        )
        .unwrap_err();
        assert!(e.to_string().contains("words"), "{e}");
        let e = embed_tokens(
            &dev,
            WeightView::Quant(short),
            256,
            &[0],
            &mut x2.clone()[..],
        );
        assert!(e.unwrap_err().to_string().contains("words"));
        let mut table = vec![0.0f32; 200];
        let e = embed_tokens(&dev, WeightView::Quant(view), 200, &[0], &mut table[..]);
        assert!(e.unwrap_err().to_string().contains("Q6_K"));
    }
}
