//! Weights that stay in mlx's affine quantization in memory (an MLX checkpoint's 4- and 8-bit
//! modules, read where the safetensors file is mapped): the format the kernels read
//! (`kernels-src/src/gemm_mlx.rs`, `embedding.gather_mlx`), and a view of such a weight with
//! its scales and biases.

use half::{bf16, f16};

use super::lm_head::WeightView;
use super::OpError;
use crate::device::DevSlice;

/// mlx's affine quantization (`mlx_lm convert -q`, mode `affine`) in a form LOOM kernels read
/// in place: 4- or 8-bit values packed little-endian into `u32` words (a row's values one bit
/// stream, value `j` in bits `j · bits ..`), each group of `group` values of a row sharing a
/// scale and a bias ([`AffineParams`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AffineFormat {
    bits: u32,
    group: usize,
}

impl AffineFormat {
    /// `bits`-bit values in groups of `group`, if the kernels read them: 4 or 8 bits, groups
    /// of a positive multiple of 32 values (a K step of the GEMM lies in one group).
    pub fn new(bits: u32, group: usize) -> Option<Self> {
        (matches!(bits, 4 | 8) && group > 0 && group.is_multiple_of(32))
            .then_some(AffineFormat { bits, group })
    }

    /// Bits per value.
    pub fn bits(self) -> u32 {
        self.bits
    }

    /// Values per group (one scale and one bias).
    pub fn group(self) -> usize {
        self.group
    }

    /// Values per `u32` word.
    pub fn per_word(self) -> usize {
        32 / self.bits as usize
    }

    /// The format's name in messages.
    pub fn name(self) -> &'static str {
        match self.bits {
            4 => "MLX 4-bit",
            _ => "MLX 8-bit",
        }
    }
}

/// The scales and biases of an affine-quantized weight (`[rows, cols / group]` each) in the
/// checkpoint's float dtype, which `mx.dequantize` rounds each value to.
#[derive(Clone, Copy, Debug)]
pub enum AffineParams<'a> {
    Bf16 {
        scales: DevSlice<'a, bf16>,
        biases: DevSlice<'a, bf16>,
    },
    F16 {
        scales: DevSlice<'a, f16>,
        biases: DevSlice<'a, f16>,
    },
    F32 {
        scales: DevSlice<'a, f32>,
        biases: DevSlice<'a, f32>,
    },
}

impl<'a> AffineParams<'a> {
    /// The scales and biases from their views: `None` unless both have one float dtype.
    pub fn of(scales: WeightView<'a>, biases: WeightView<'a>) -> Option<Self> {
        Some(match (scales, biases) {
            (WeightView::Bf16(scales), WeightView::Bf16(biases)) => {
                AffineParams::Bf16 { scales, biases }
            }
            (WeightView::F16(scales), WeightView::F16(biases)) => {
                AffineParams::F16 { scales, biases }
            }
            (WeightView::F32(scales), WeightView::F32(biases)) => {
                AffineParams::F32 { scales, biases }
            }
            _ => return None,
        })
    }

    /// Groups both the scales and the biases cover.
    fn len(&self) -> usize {
        match self {
            AffineParams::Bf16 { scales, biases } => scales.len().min(biases.len()),
            AffineParams::F16 { scales, biases } => scales.len().min(biases.len()),
            AffineParams::F32 { scales, biases } => scales.len().min(biases.len()),
        }
    }

    /// Groups `range` of the scales and the biases.
    fn sub(&self, range: std::ops::Range<usize>) -> Result<Self, OpError> {
        let r = || range.clone();
        Ok(match self {
            AffineParams::Bf16 { scales, biases } => AffineParams::Bf16 {
                scales: scales.sub(r())?,
                biases: biases.sub(r())?,
            },
            AffineParams::F16 { scales, biases } => AffineParams::F16 {
                scales: scales.sub(r())?,
                biases: biases.sub(r())?,
            },
            AffineParams::F32 { scales, biases } => AffineParams::F32 {
                scales: scales.sub(r())?,
                biases: biases.sub(r())?,
            },
        })
    }
}

/// An affine-quantized weight as one launch reads it: its packed words, its scales and biases,
/// holding `len` values.
#[derive(Clone, Copy, Debug)]
pub struct AffineView<'a> {
    pub format: AffineFormat,
    pub words: DevSlice<'a, u32>,
    pub params: AffineParams<'a>,
    /// Values (elements) the words stand for.
    pub len: usize,
}

impl<'a> AffineView<'a> {
    /// Checks the view as a matrix of rows of `cols` values for the kernels: `cols` a whole
    /// number of groups, the words indexable in 32 bits, and enough words, scales and biases
    /// for all the values; the error names `op`, `what` and the format.
    pub(super) fn check_rows(
        &self,
        op: &'static str,
        what: &str,
        cols: usize,
    ) -> Result<(), OpError> {
        let f = self.format;
        let invalid = |message: String| OpError::Invalid { op, message };
        if !cols.is_multiple_of(f.group) || !self.len.is_multiple_of(f.group) {
            return Err(invalid(format!(
                "{what}: a {} weight in groups of {} needs rows of a multiple of {} values, \
                 got {cols}",
                f.name(),
                f.group,
                f.group
            )));
        }
        let (words, groups) = (self.len / f.per_word(), self.len / f.group);
        super::to_u32(op, &format!("{what} words"), words)?;
        if self.words.len() < words || self.params.len() < groups {
            return Err(invalid(format!(
                "{what}: {} values of {} in groups of {} need {words} words and {groups} \
                 scales and biases, got {} and {}",
                self.len,
                f.name(),
                f.group,
                self.words.len(),
                self.params.len()
            )));
        }
        Ok(())
    }

    /// Values `range` (flat index) of the weight: whole groups, as one expert's rows of a
    /// stacked expert tensor are.
    pub fn sub(&self, range: std::ops::Range<usize>) -> Result<AffineView<'a>, OpError> {
        let f = self.format;
        let whole = range.start.is_multiple_of(f.group) && range.end.is_multiple_of(f.group);
        if !whole || range.start > range.end || range.end > self.len {
            return Err(OpError::Invalid {
                op: "quantized weight",
                message: format!(
                    "values {range:?} of a {} weight of {} values in groups of {}",
                    f.name(),
                    self.len,
                    f.group
                ),
            });
        }
        Ok(AffineView {
            format: f,
            words: self
                .words
                .sub(range.start / f.per_word()..range.end / f.per_word())?,
            params: self
                .params
                .sub(range.start / f.group..range.end / f.group)?,
            len: range.end - range.start,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::{cpu_side_devices, test_values as values, Device, Pool};
    use crate::model::mlx::dequantize_row;
    use crate::model::DType;
    use crate::ops::{embed_tokens, gemm, Activations, GemmOut, HeadWeight};

    /// Scales and biases stored in one float dtype.
    enum Stored {
        Bf16(Vec<bf16>, Vec<bf16>),
        F16(Vec<f16>, Vec<f16>),
        F32(Vec<f32>, Vec<f32>),
    }

    /// An affine-quantized weight of random words, with scales in [-0.05, 0.05) and biases in
    /// [-1, 1) of `dtype` (so `s · q` and its sum with the bias need rounding to it).
    struct Weight {
        format: AffineFormat,
        words: Vec<u32>,
        stored: Stored,
        /// The scales and biases as f32 (exactly their stored values).
        scales: Vec<f32>,
        biases: Vec<f32>,
    }

    impl Weight {
        fn new(format: AffineFormat, dtype: DType, rows: usize, k: usize, seed: u64) -> Self {
            let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            let words = (0..rows * k / format.per_word())
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    state as u32
                })
                .collect();
            let groups = rows * k / format.group();
            let (s, b) = (
                values(groups, seed + 1, 0.05),
                values(groups, seed + 2, 1.0),
            );
            let stored = match dtype {
                DType::BF16 => {
                    let v = |x: &[f32]| x.iter().map(|&x| bf16::from_f32(x)).collect();
                    Stored::Bf16(v(&s), v(&b))
                }
                DType::F16 => {
                    let v = |x: &[f32]| x.iter().map(|&x| f16::from_f32(x)).collect();
                    Stored::F16(v(&s), v(&b))
                }
                DType::F32 => Stored::F32(s, b),
            };
            let (scales, biases) = match &stored {
                Stored::Bf16(s, b) => (s.iter().map(|x| x.to_f32()).collect(), {
                    b.iter().map(|x| x.to_f32()).collect()
                }),
                Stored::F16(s, b) => (s.iter().map(|x| x.to_f32()).collect(), {
                    b.iter().map(|x| x.to_f32()).collect()
                }),
                Stored::F32(s, b) => (s.clone(), b.clone()),
            };
            Weight {
                format,
                words,
                stored,
                scales,
                biases,
            }
        }

        /// The whole weight as the kernels read it.
        fn view(&self) -> WeightView<'_> {
            let params = match &self.stored {
                Stored::Bf16(s, b) => AffineParams::Bf16 {
                    scales: s.into(),
                    biases: b.into(),
                },
                Stored::F16(s, b) => AffineParams::F16 {
                    scales: s.into(),
                    biases: b.into(),
                },
                Stored::F32(s, b) => AffineParams::F32 {
                    scales: s.into(),
                    biases: b.into(),
                },
            };
            WeightView::Affine(AffineView {
                format: self.format,
                words: (&self.words).into(),
                params,
                len: self.words.len() * self.format.per_word(),
            })
        }

        /// Rows of `k` values dequantized at load as `mx.dequantize` does, rounding to
        /// `dtype`.
        fn dequantized(&self, k: usize, dtype: DType) -> Vec<f32> {
            let f = self.format;
            let (groups, words) = (k / f.group(), k / f.per_word());
            let mut out = vec![0.0f32; self.words.len() / words * k];
            for (r, row) in out.chunks_exact_mut(k).enumerate() {
                let bytes: Vec<u8> = self.words[r * words..(r + 1) * words]
                    .iter()
                    .flat_map(|w| w.to_le_bytes())
                    .collect();
                let g = r * groups..(r + 1) * groups;
                let (s, b) = (&self.scales[g.clone()], &self.biases[g]);
                dequantize_row(&bytes, s, b, f.bits(), f.group(), dtype, row);
            }
            out
        }
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    const DTYPES: [DType; 3] = [DType::BF16, DType::F16, DType::F32];

    /// The GEMM on a weight kept packed gives the bits of the f32 GEMM on the weight
    /// dequantized at load as `mx.dequantize` does (both roundings to the scales' dtype), on
    /// every device, for 4 and 8 bits, bf16, f16 and f32 scales, groups of 32, 64 and 128, and
    /// shapes the blocking does not divide (one row; rows past one 256-row block; columns past
    /// 32 and 128), overwriting and accumulating.
    #[test]
    fn affine_gemm_equals_the_gemm_on_the_dequantized_weight() {
        for width in [4, 8] {
            for dtype in DTYPES {
                for (m, n, k, group) in [(1, 1, 32, 32), (3, 70, 192, 64), (261, 129, 256, 128)] {
                    let format = AffineFormat::new(width, group).unwrap();
                    let w = Weight::new(format, dtype, n, k, (m + n + width as usize) as u64);
                    let wf = w.dequantized(k, dtype);
                    let x = values(m * k, 3, 1.0);
                    let init = values(m * n, 4, 1.0);
                    for dev in cpu_side_devices() {
                        for out in [GemmOut::Overwrite, GemmOut::Accumulate] {
                            let at = format!(
                                "{} {dtype:?} {m}x{n}x{k} group {group} {out:?} on {}",
                                format.name(),
                                dev.arch()
                            );
                            let (mut want, mut got) = (init.clone(), init.clone());
                            let f32_w = HeadWeight::F32(&wf);
                            gemm(
                                &dev,
                                &x[..],
                                k,
                                f32_w,
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
                                w.view(),
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
    }

    /// The embedding of a packed table gives each token's row dequantized as `mx.dequantize`
    /// does, on every device (rows of 384 values: a whole chunk of 256 and a ragged one); with
    /// bf16 scales that differs from `s · q + b` rounded once.
    #[test]
    fn affine_embedding_rows_are_the_dequantized_rows() {
        let (vocab, hidden) = (7, 384);
        let ids = [6u32, 0, 3, 3];
        for width in [4, 8] {
            for dtype in DTYPES {
                for group in [32, 64, 128] {
                    let format = AffineFormat::new(width, group).unwrap();
                    let w = Weight::new(format, dtype, vocab, hidden, 11 + group as u64);
                    let table = w.dequantized(hidden, dtype);
                    if dtype == DType::BF16 {
                        let once = w.dequantized(hidden, DType::F32);
                        let once = once.iter().map(|&v| bf16::from_f32(v).to_f32());
                        assert!(once.zip(&table).any(|(a, &b)| a != b), "two roundings");
                    }
                    let want: Vec<f32> = ids
                        .iter()
                        .flat_map(|&i| {
                            table[i as usize * hidden..(i as usize + 1) * hidden].to_vec()
                        })
                        .collect();
                    for dev in cpu_side_devices() {
                        let mut got = vec![0.0f32; ids.len() * hidden];
                        embed_tokens(&dev, w.view(), hidden, &ids, &mut got[..]).unwrap();
                        let at = format!(
                            "{} {dtype:?} group {group} on {}",
                            format.name(),
                            dev.arch()
                        );
                        assert_eq!(bits(&got), bits(&want), "{at}");
                    }
                }
            }
        }
    }

    /// Rows that are not whole groups, slices that do not start and end at a group, and too
    /// few words or scales are refused, naming the format; only 4 and 8 bits in groups of a
    /// multiple of 32 are a format the kernels read.
    #[test]
    fn misfitting_shapes_slices_and_formats_are_refused() {
        assert!(AffineFormat::new(4, 64).is_some() && AffineFormat::new(8, 128).is_some());
        for (bits, group) in [(2, 64), (3, 32), (5, 32), (6, 64), (4, 16), (8, 48), (4, 0)] {
            assert!(
                AffineFormat::new(bits, group).is_none(),
                "{bits} bits, group {group}"
            );
        }
        let dev = Device::open(Pool::Host).unwrap();
        let format = AffineFormat::new(4, 64).unwrap();
        let w = Weight::new(format, DType::BF16, 2, 128, 1);
        let WeightView::Affine(view) = w.view() else {
            unreachable!("an affine view")
        };
        // Two rows of 96 values are three whole groups of 64, but a row is not.
        let x = vec![0.0f32; 96];
        let mut y = [0.0f32; 2];
        let e = gemm(
            &dev,
            &x[..],
            96,
            WeightView::Affine(AffineView { len: 192, ..view }),
            2,
            &mut y[..],
            GemmOut::Overwrite,
            Activations::F32,
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("MLX 4-bit") && e.to_string().contains("64"),
            "{e}"
        );
        let e = view.sub(32..128).unwrap_err();
        assert!(e.to_string().contains("groups of 64"), "{e}");
        assert!(view.sub(0..96).is_err(), "not a whole group");
        assert!(view.sub(128..320).is_err(), "past the end");
        let row = view.sub(128..256).unwrap();
        assert_eq!((row.len, row.words.len(), row.params.len()), (128, 16, 2));
        // Fewer words, or fewer scales, than the values need.
        let short_words = AffineView {
            words: (&w.words[..w.words.len() - 1]).into(),
            ..view
        };
        let short_scales = AffineView {
            params: view.params.sub(0..3).unwrap(),
            ..view
        };
        let x = vec![0.0f32; 128];
        for short in [short_words, short_scales] {
            let mut y = [0.0f32; 2];
            let e = gemm(
                &dev,
                &x[..],
                128,
                WeightView::Affine(short),
                2,
                &mut y[..],
                GemmOut::Overwrite,
                Activations::F32,
            )
            .unwrap_err();
            assert!(e.to_string().contains("scales and biases"), "{e}");
            let e = embed_tokens(
                &dev,
                WeightView::Affine(short),
                128,
                &[0],
                &mut y.to_vec()[..],
            );
            assert!(e.is_err());
        }
    }
}
