//! The model's weights on the engine's device, made available once at load: on a GPU each
//! tensor is uploaded once and stays in device memory for every pass; on the CPU-side devices
//! a tensor is read where it is mapped, or copied once when its bytes are not aligned for its
//! dtype (safetensors does not promise alignment). A weight in mlx's affine quantization brings
//! its scales and biases along, each made available the same way.

use half::{bf16, f16};

use super::error::Result;
use super::weights::{AffineParts, DType, Storage, Tensor};
use crate::device::{DevSlice, Device, DeviceBuf, Elem, Pool};
use crate::ops::{
    integer_gemm_activations, interleave, interleave_into, interleaved_len, Activations,
    AffineFormat, AffineParams, AffineView, Interleaved, OpError, QuantFormat, QuantView,
    WeightView,
};

/// A tensor in its stored dtype, available to one device's kernels, viewed as a row-major
/// matrix of its last dimension's columns.
pub struct DeviceWeight {
    mem: Mem,
    /// The scales and biases of a weight in mlx's affine quantization.
    affine: Option<Box<AffineParts<DeviceWeight>>>,
    /// A K-quant weight met by Q8_K activations, interleaved by 64 rows for the integer
    /// GEMM, and the rows of each of its matrices (the last two dimensions).
    interleaved: Option<Box<(DeviceBuf<u32>, usize)>>,
    /// Rows: the product of every dimension but the last.
    pub rows: usize,
    /// Columns: the last dimension.
    pub cols: usize,
    /// How activations meet the weight in a product ([`Tensor::act`]).
    pub act: Activations,
}

enum Mem {
    /// The tensor's bytes in the mapping, aligned for its dtype (CPU-side devices).
    Mapped(Box<Tensor>),
    /// A copy in the device's memory (a GPU, or unaligned bytes on the CPU-side devices).
    Bf16(DeviceBuf<bf16>),
    F16(DeviceBuf<f16>),
    F32(DeviceBuf<f32>),
    /// A block-format tensor's bytes as little-endian words, the last one zero-padded.
    Words(QuantFormat, DeviceBuf<u32>),
    /// An affine-quantized tensor's words.
    AffineWords(AffineFormat, DeviceBuf<u32>),
}

/// The tensor's bytes viewed as `T`, if aligned (and, for words, a whole number of them).
fn cast<T: bytemuck::Pod>(t: &Tensor) -> Option<&[T]> {
    bytemuck::try_cast_slice(t.bytes()).ok()
}

/// A copy of `t`'s elements as `T` in `dev`'s memory (bytes that do not fill the last `T`
/// zero-padded: a block-format tensor's trailing half word).
fn upload<T: bytemuck::Pod + Elem>(dev: &Device, t: &Tensor) -> Result<DeviceBuf<T>> {
    let owned;
    let data: &[T] = match cast(t) {
        Some(s) => s,
        None => {
            owned = bytemuck::pod_collect_to_vec(t.bytes());
            &owned
        }
    };
    Ok(dev.buffer_from(data).map_err(OpError::from)?)
}

/// `t`'s `matrices` matrices of `rows` x `cols` interleaved for the integer GEMM
/// ([`interleave`]) in `dev`'s memory: on the CPU-side devices written straight into the new
/// buffer, on a GPU built on the host and uploaded. `None` when `t`'s bytes are not those
/// matrices' blocks.
fn interleaved(
    dev: &Device,
    q: QuantFormat,
    t: &Tensor,
    matrices: usize,
    rows: usize,
    cols: usize,
) -> Result<Option<DeviceBuf<u32>>> {
    let Some(len) = interleaved_len(q, matrices, rows, cols) else {
        return Ok(None);
    };
    let mut buf = dev.alloc::<u32>(len).map_err(OpError::from)?;
    let filled = match buf.host_mut() {
        Some(words) => interleave_into(q, t.bytes(), matrices, rows, cols, words),
        None => interleave(q, t.bytes(), matrices, rows, cols)
            .map(|words| buf.upload(&words))
            .transpose()
            .map_err(OpError::from)?,
    };
    Ok(filled.map(|()| buf))
}

impl DeviceWeight {
    /// `t` made available to `dev`: mapped in place when `dev` is a CPU-side device and the
    /// bytes are aligned, else copied to `dev`'s memory once.
    pub fn new(dev: &Device, t: &Tensor) -> Result<Self> {
        let cpu_side = matches!(dev.pool(), Pool::Cpu | Pool::Host);
        let aligned = match t.dtype {
            Storage::Float(DType::BF16) => cast::<bf16>(t).is_some(),
            Storage::Float(DType::F16) => cast::<f16>(t).is_some(),
            Storage::Float(DType::F32) => cast::<f32>(t).is_some(),
            Storage::Quant(_) | Storage::Affine(..) => cast::<u32>(t).is_some(),
        };
        let mem = match t.dtype {
            _ if cpu_side && aligned => Mem::Mapped(Box::new(t.clone())),
            Storage::Float(DType::BF16) => Mem::Bf16(upload(dev, t)?),
            Storage::Float(DType::F16) => Mem::F16(upload(dev, t)?),
            Storage::Float(DType::F32) => Mem::F32(upload(dev, t)?),
            Storage::Quant(q) => Mem::Words(q, upload(dev, t)?),
            Storage::Affine(f, _) => Mem::AffineWords(f, upload(dev, t)?),
        };
        let affine = match t.affine() {
            Some(p) => Some(Box::new(AffineParts {
                scales: DeviceWeight::new(dev, &p.scales)?,
                biases: DeviceWeight::new(dev, &p.biases)?,
            })),
            None => None,
        };
        // Shapes are checked against config.json, whose sizes are at least 1.
        let cols = t.shape.last().copied().unwrap_or(1).max(1);
        let interleaved = match t.dtype {
            Storage::Quant(q) if integer_gemm_activations(q) == Some(t.act) => {
                let rows = match t.shape.len() {
                    0 | 1 => 1,
                    d => t.shape[d - 2].max(1),
                };
                let matrices = t.numel() / (rows * cols);
                let buf = interleaved(dev, q, t, matrices, rows, cols)?;
                // The GEMM reads the copy; the blocks as stored are read again only for a few
                // rows (a tied embedding's) or not at all.
                if buf.is_some() {
                    t.release();
                }
                buf.map(|b| Box::new((b, rows)))
            }
            _ => None,
        };
        Ok(DeviceWeight {
            mem,
            affine,
            interleaved,
            rows: t.numel() / cols,
            cols,
            act: t.act,
        })
    }

    /// The whole tensor as a launch reads it.
    pub fn view(&self) -> WeightView<'_> {
        let len = self.rows * self.cols;
        match &self.mem {
            Mem::Mapped(t) => {
                // `new` maps only tensors whose bytes are aligned for their dtype.
                let unaligned = "a mapped weight is aligned";
                match t.dtype {
                    Storage::Float(DType::BF16) => {
                        WeightView::Bf16(DevSlice::from(cast(t).expect(unaligned)))
                    }
                    Storage::Float(DType::F16) => {
                        WeightView::F16(DevSlice::from(cast(t).expect(unaligned)))
                    }
                    Storage::Float(DType::F32) => {
                        WeightView::F32(DevSlice::from(cast(t).expect(unaligned)))
                    }
                    Storage::Quant(format) => WeightView::Quant(QuantView {
                        format,
                        words: DevSlice::from(cast(t).expect(unaligned)),
                        len,
                        interleaved: self.interleaved(),
                    }),
                    Storage::Affine(format, _) => {
                        self.affine_view(format, DevSlice::from(cast(t).expect(unaligned)))
                    }
                }
            }
            Mem::Bf16(b) => WeightView::Bf16(b.view()),
            Mem::F16(b) => WeightView::F16(b.view()),
            Mem::F32(b) => WeightView::F32(b.view()),
            Mem::Words(format, b) => WeightView::Quant(QuantView {
                format: *format,
                words: b.view(),
                len,
                interleaved: self.interleaved(),
            }),
            Mem::AffineWords(format, b) => self.affine_view(*format, b.view()),
        }
    }

    /// The interleaved copy of a K-quant weight, if it has one.
    fn interleaved(&self) -> Option<Interleaved<'_>> {
        self.interleaved.as_deref().map(|(b, rows)| Interleaved {
            words: b.view(),
            rows: *rows,
            cols: self.cols,
        })
    }

    /// The whole affine-quantized tensor of `words`, with its scales and biases.
    fn affine_view<'a>(&'a self, format: AffineFormat, words: DevSlice<'a, u32>) -> WeightView<'a> {
        // `new` gives an affine tensor its scales and biases, which the loader checked are
        // of one float dtype.
        let parts = self
            .affine
            .as_deref()
            .expect("an affine weight has scales and biases");
        let params = AffineParams::of(parts.scales.view(), parts.biases.view())
            .expect("scales and biases of one float dtype");
        WeightView::Affine(AffineView {
            format,
            words,
            params,
            len: self.rows * self.cols,
        })
    }
}

/// A small f32 vector (a norm weight, a gate bias) in `dev`'s memory.
pub fn small(dev: &Device, data: &[f32]) -> Result<DeviceBuf<f32>> {
    Ok(dev.buffer_from(data).map_err(OpError::from)?)
}

#[cfg(test)]
mod tests {
    use super::super::synthetic::{write_safetensors, TensorDecl};
    use super::super::weights::WeightStore;
    use super::*;

    /// A bf16 `[3]` tensor, then an f32 `[2, 3]` one at byte 6 of the data (not 4-byte
    /// aligned), then a bf16 `[2, 2]` one at byte 30 (2-byte aligned).
    fn store(dir: &std::path::Path) -> WeightStore {
        let decl = |name: &str, dtype, shape: &[usize]| TensorDecl {
            name: name.into(),
            dtype,
            shape: shape.to_vec(),
        };
        let tensors = [
            decl("a", DType::BF16, &[3]),
            decl("w", DType::F32, &[2, 3]),
            decl("b", DType::BF16, &[2, 2]),
        ];
        write_safetensors(&dir.join("model.safetensors"), &tensors, |i, s, out| {
            for (j, o) in out.iter_mut().enumerate() {
                *o = (10 * i + s + j) as f32 + 0.5;
            }
        })
        .unwrap();
        WeightStore::open(dir).unwrap()
    }

    fn values(dev: &Device, w: &DeviceWeight) -> Vec<f32> {
        match w.view() {
            WeightView::F32(v) => {
                let mut out = vec![0.0; v.len()];
                dev.download(v, &mut out).unwrap();
                out
            }
            WeightView::Bf16(v) => {
                let mut out = vec![bf16::ZERO; v.len()];
                dev.download(v, &mut out).unwrap();
                out.iter().map(|x| x.to_f32()).collect()
            }
            WeightView::F16(_) | WeightView::Quant(_) | WeightView::Affine(_) => {
                unreachable!("no f16 or quantized tensor here")
            }
        }
    }

    #[test]
    fn aligned_weights_are_read_in_place_and_unaligned_ones_copied_once() {
        let dir = tempfile::tempdir().unwrap();
        let ws = store(dir.path());
        for pool in [Pool::Cpu, Pool::Host] {
            let dev = Device::open(pool).unwrap();
            let w = DeviceWeight::new(&dev, &ws.tensor("w").unwrap()).unwrap();
            assert!(matches!(w.mem, Mem::F32(_)), "unaligned f32 is copied");
            assert_eq!((w.rows, w.cols), (2, 3));
            assert_eq!(values(&dev, &w), [10.5, 11.5, 12.5, 13.5, 14.5, 15.5]);
            let b = DeviceWeight::new(&dev, &ws.tensor("b").unwrap()).unwrap();
            assert!(matches!(b.mem, Mem::Mapped(_)), "aligned bf16 is mapped");
            assert_eq!(values(&dev, &b), [20.5, 21.5, 22.5, 23.5]);
            let rows = b.view().sub(2..4).unwrap();
            let WeightView::Bf16(rows) = rows else {
                unreachable!("a bf16 view")
            };
            let mut out = [bf16::ZERO; 2];
            dev.download(rows, &mut out).unwrap();
            assert_eq!(out.map(|x| x.to_f32()), [22.5, 23.5]);
            assert!(b.view().sub(3..5).is_err());
        }
    }

    /// A block-format tensor is read in place when its bytes start at a word and fill whole
    /// words, and otherwise copied once into zero-padded words; both views read the same
    /// bytes.
    #[test]
    fn quantized_weights_are_read_in_place_when_word_aligned_else_copied_into_words() {
        use crate::model::weights::{Conventions, Entry, Storage, WeightStore};
        use crate::ops::QuantFormat;
        use std::sync::Arc;
        // One Q8_0 row (34 bytes) at byte 4 (aligned, but 34 is not a whole number of words)
        // and at byte 40 (aligned, the last 2 bytes of a padded 36), then at byte 2.
        let block: Vec<u8> = (0..34u8).map(|i| i.wrapping_mul(37)).collect();
        let mut bytes = vec![0u8; 80];
        bytes[4..38].copy_from_slice(&block);
        bytes[40..74].copy_from_slice(&block);
        let mut ws = WeightStore::empty(std::path::Path::new("q.gguf"), Conventions::LlamaCpp);
        let blob = ws.add_blob(std::path::Path::new("q.gguf"), Arc::new(bytes.clone()));
        let mut entry = |name: &str, start: usize, end: usize| {
            ws.insert(
                name.into(),
                Entry {
                    blob,
                    start,
                    end,
                    dtype: Ok(Storage::Quant(QuantFormat::Q8_0)),
                    shape: vec![1, 32],
                    act: Activations::Q8_0,
                    affine: None,
                },
            )
        };
        entry("padded", 40, 76);
        entry("ragged", 4, 38);
        entry("unaligned", 2, 36);
        let want: Vec<u32> = bytemuck::pod_collect_to_vec(&block);
        let dev = Device::open(Pool::Host).unwrap();
        for (name, mapped) in [("padded", true), ("ragged", false), ("unaligned", false)] {
            let w = DeviceWeight::new(&dev, &ws.tensor(name).unwrap()).unwrap();
            assert_eq!(matches!(w.mem, Mem::Mapped(_)), mapped, "{name}");
            let WeightView::Quant(q) = w.view() else {
                panic!("{name}: a quantized view")
            };
            assert_eq!((q.format, q.len), (QuantFormat::Q8_0, 32), "{name}");
            let mut got = vec![0u32; q.words.len()];
            dev.download(q.words, &mut got).unwrap();
            if name == "unaligned" {
                // Bytes 2..36 of the blob: two zero bytes, then the block's first 32.
                assert_eq!(got[0], u32::from_le_bytes([0, 0, block[0], block[1]]));
            } else {
                assert_eq!(got[..8], want[..8], "{name}");
                assert_eq!(got[8] & 0xffff, want[8] & 0xffff, "{name}");
            }
        }
    }

    /// A weight in mlx's affine quantization comes with its scales and biases: its words read
    /// in place when they start at a word, else copied once; its bf16 scales and biases each
    /// mapped or copied as a bf16 tensor is.
    #[test]
    fn affine_weights_bring_their_scales_and_biases() {
        use crate::model::weights::{AffineParts, Conventions, Entry, Storage, WeightStore};
        use crate::ops::{AffineFormat, AffineParams};
        use std::sync::Arc;
        // One row of 32 4-bit values (4 words) at byte 4 and at byte 22; its scale at byte 20
        // (aligned for bf16), its bias at byte 39 (not aligned).
        let words: Vec<u8> = (0..16u8).map(|i| i.wrapping_mul(37)).collect();
        let mut bytes = vec![0u8; 44];
        bytes[4..20].copy_from_slice(&words);
        bytes[22..38].copy_from_slice(&words);
        bytes[20..22].copy_from_slice(&bf16::from_f32(0.5).to_le_bytes());
        bytes[39..41].copy_from_slice(&bf16::from_f32(-1.0).to_le_bytes());
        let mut ws = WeightStore::empty(std::path::Path::new("m"), Conventions::Mlx);
        let blob = ws.add_blob(std::path::Path::new("m"), Arc::new(bytes));
        let entry = |start: usize, end: usize, dtype: Storage, shape: Vec<usize>| Entry {
            blob,
            start,
            end,
            dtype: Ok(dtype),
            shape,
            act: Activations::F32,
            affine: None,
        };
        let format = AffineFormat::new(4, 32).unwrap();
        for (name, start) in [("aligned.weight", 4), ("unaligned.weight", 22)] {
            let mut e = entry(
                start,
                start + 16,
                Storage::Affine(format, DType::BF16),
                vec![1, 32],
            );
            e.affine = Some(Box::new(AffineParts {
                scales: entry(20, 22, DType::BF16.into(), vec![1, 1]),
                biases: entry(39, 41, DType::BF16.into(), vec![1, 1]),
            }));
            ws.insert(name.into(), e);
        }
        let dev = Device::open(Pool::Host).unwrap();
        for (name, mapped) in [("aligned.weight", true), ("unaligned.weight", false)] {
            let t = ws.tensor(name).unwrap();
            assert_eq!(
                t.affine().unwrap().biases.name,
                name.replace("weight", "biases")
            );
            let w = DeviceWeight::new(&dev, &t).unwrap();
            assert_eq!(matches!(w.mem, Mem::Mapped(_)), mapped, "{name}");
            let parts = w.affine.as_deref().unwrap();
            assert!(matches!(parts.scales.mem, Mem::Mapped(_)), "aligned scale");
            assert!(matches!(parts.biases.mem, Mem::Bf16(_)), "unaligned bias");
            let WeightView::Affine(q) = w.view() else {
                panic!("{name}: an affine view")
            };
            assert_eq!((q.format, q.len), (format, 32), "{name}");
            let mut got = vec![0u32; q.words.len()];
            dev.download(q.words, &mut got).unwrap();
            assert_eq!(
                got,
                bytemuck::pod_collect_to_vec::<u8, u32>(&words),
                "{name}"
            );
            let AffineParams::Bf16 { scales, biases } = q.params else {
                panic!("{name}: bf16 scales and biases")
            };
            let mut sb = [bf16::ZERO; 2];
            dev.download(scales, &mut sb[..1]).unwrap();
            dev.download(biases, &mut sb[1..]).unwrap();
            assert_eq!(sb.map(|x| x.to_f32()), [0.5, -1.0], "{name}");
        }
        // Scales and biases belong to affine-quantized values only.
        let mut plain = entry(4, 20, DType::BF16.into(), vec![1, 8]);
        plain.affine = ws.remove("aligned.weight").unwrap().affine;
        ws.insert("plain.weight".into(), plain);
        let e = ws.tensor("plain.weight").unwrap_err().to_string();
        assert!(
            e.contains("plain.weight") && e.contains("scales and biases"),
            "{e}"
        );
    }
}
