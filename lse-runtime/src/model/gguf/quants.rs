//! ggml tensor types: their numbering and block layout (the whole ggml table, so that a file
//! holding types LSE does not read still validates), and dequantization of the types LSE
//! reads, bit-identical to ggml's reference `dequantize_row_*` (`ggml-quants.c`): the same f32
//! operations in the same order, never fused.

use half::f16;

use crate::model::weights::{DType, Storage};
use crate::ops::QuantFormat;

/// Elements in a K-quant super-block.
const QK_K: usize = 256;

/// A ggml tensor type LSE can dequantize.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GgmlType {
    /// IEEE binary32.
    F32,
    /// IEEE binary16.
    F16,
    /// bfloat16.
    BF16,
    /// 32 elements: f16 scale, 4-bit quants (`x = d * (q - 8)`).
    Q4_0,
    /// 32 elements: f16 scale and minimum, 4-bit quants (`x = d * q + m`).
    Q4_1,
    /// 32 elements: f16 scale, 5-bit quants (`x = d * (q - 16)`).
    Q5_0,
    /// 32 elements: f16 scale and minimum, 5-bit quants (`x = d * q + m`).
    Q5_1,
    /// 32 elements: f16 scale, 8-bit signed quants (`x = d * q`).
    Q8_0,
    /// 256 elements: 8 sub-blocks with 6-bit scales and minimums, 4-bit quants.
    Q4_K,
    /// 256 elements: 8 sub-blocks with 6-bit scales and minimums, 5-bit quants.
    Q5_K,
    /// 256 elements: 16 sub-blocks with 8-bit scales, 6-bit quants.
    Q6_K,
}

/// What ggml knows about a type id: a name and, unless support was removed, its block layout
/// (elements per block, bytes per block).
pub(crate) struct TypeLayout {
    pub name: &'static str,
    pub block: Option<(usize, usize)>,
}

/// ggml's type table (`ggml.c`, `type_traits`), names spelt as gguf-py spells them.
pub(crate) fn type_layout(id: u32) -> Option<TypeLayout> {
    let (name, block) = match id {
        0 => ("F32", Some((1, 4))),
        1 => ("F16", Some((1, 2))),
        2 => ("Q4_0", Some((32, 18))),
        3 => ("Q4_1", Some((32, 20))),
        4 => ("Q4_2", None),
        5 => ("Q4_3", None),
        6 => ("Q5_0", Some((32, 22))),
        7 => ("Q5_1", Some((32, 24))),
        8 => ("Q8_0", Some((32, 34))),
        9 => ("Q8_1", Some((32, 36))),
        10 => ("Q2_K", Some((QK_K, 84))),
        11 => ("Q3_K", Some((QK_K, 110))),
        12 => ("Q4_K", Some((QK_K, 144))),
        13 => ("Q5_K", Some((QK_K, 176))),
        14 => ("Q6_K", Some((QK_K, 210))),
        15 => ("Q8_K", Some((QK_K, 292))),
        16 => ("IQ2_XXS", Some((QK_K, 66))),
        17 => ("IQ2_XS", Some((QK_K, 74))),
        18 => ("IQ3_XXS", Some((QK_K, 98))),
        19 => ("IQ1_S", Some((QK_K, 50))),
        20 => ("IQ4_NL", Some((32, 18))),
        21 => ("IQ3_S", Some((QK_K, 110))),
        22 => ("IQ2_S", Some((QK_K, 82))),
        23 => ("IQ4_XS", Some((QK_K, 136))),
        24 => ("I8", Some((1, 1))),
        25 => ("I16", Some((1, 2))),
        26 => ("I32", Some((1, 4))),
        27 => ("I64", Some((1, 8))),
        28 => ("F64", Some((1, 8))),
        29 => ("IQ1_M", Some((QK_K, 56))),
        30 => ("BF16", Some((1, 2))),
        31 => ("Q4_0_4_4", None),
        32 => ("Q4_0_4_8", None),
        33 => ("Q4_0_8_8", None),
        34 => ("TQ1_0", Some((QK_K, 54))),
        35 => ("TQ2_0", Some((QK_K, 66))),
        36 => ("IQ4_NL_4_4", None),
        37 => ("IQ4_NL_4_8", None),
        38 => ("IQ4_NL_8_8", None),
        39 => ("MXFP4", Some((32, 17))),
        40 => ("NVFP4", Some((64, 36))),
        41 => ("Q1_0", Some((128, 18))),
        42 => ("Q2_0", Some((64, 18))),
        _ => return None,
    };
    Some(TypeLayout { name, block })
}

impl GgmlType {
    /// Every type LSE reads.
    pub const ALL: [GgmlType; 11] = [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
    ];

    /// The type with ggml id `id`; for a type LSE does not read, its ggml name (or
    /// `type id N` when ggml has none).
    pub fn from_id(id: u32) -> std::result::Result<GgmlType, String> {
        Self::ALL
            .into_iter()
            .find(|t| t.id() == id)
            .ok_or_else(|| match type_layout(id) {
                Some(l) => l.name.to_string(),
                None => format!("type id {id}"),
            })
    }

    /// ggml's id for the type (`enum ggml_type`).
    pub fn id(self) -> u32 {
        match self {
            GgmlType::F32 => 0,
            GgmlType::F16 => 1,
            GgmlType::Q4_0 => 2,
            GgmlType::Q4_1 => 3,
            GgmlType::Q5_0 => 6,
            GgmlType::Q5_1 => 7,
            GgmlType::Q8_0 => 8,
            GgmlType::Q4_K => 12,
            GgmlType::Q5_K => 13,
            GgmlType::Q6_K => 14,
            GgmlType::BF16 => 30,
        }
    }

    /// The type's name as gguf-py spells it (`Q4_K`, `BF16`, ...).
    pub fn name(self) -> &'static str {
        match self {
            GgmlType::F32 => "F32",
            GgmlType::F16 => "F16",
            GgmlType::BF16 => "BF16",
            GgmlType::Q4_0 => "Q4_0",
            GgmlType::Q4_1 => "Q4_1",
            GgmlType::Q5_0 => "Q5_0",
            GgmlType::Q5_1 => "Q5_1",
            GgmlType::Q8_0 => "Q8_0",
            GgmlType::Q4_K => "Q4_K",
            GgmlType::Q5_K => "Q5_K",
            GgmlType::Q6_K => "Q6_K",
        }
    }

    /// Elements per block: 1 for the float types, 32 or 256 for the quantized ones.
    pub fn block_elems(self) -> usize {
        match self {
            GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => 1,
            GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q5_0 | GgmlType::Q5_1 | GgmlType::Q8_0 => {
                32
            }
            GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K => QK_K,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        match self {
            GgmlType::F32 => 4,
            GgmlType::F16 | GgmlType::BF16 => 2,
            GgmlType::Q4_0 => 18,
            GgmlType::Q4_1 => 20,
            GgmlType::Q5_0 => 22,
            GgmlType::Q5_1 => 24,
            GgmlType::Q8_0 => 34,
            GgmlType::Q4_K => 144,
            GgmlType::Q5_K => 176,
            GgmlType::Q6_K => 210,
        }
    }

    /// Bytes of a row of `ne0` elements; `None` when `ne0` is not a whole number of blocks
    /// (or the size overflows).
    pub fn row_bytes(self, ne0: usize) -> Option<usize> {
        if !ne0.is_multiple_of(self.block_elems()) {
            return None;
        }
        (ne0 / self.block_elems()).checked_mul(self.block_bytes())
    }
}

impl From<QuantFormat> for GgmlType {
    fn from(q: QuantFormat) -> Self {
        match q {
            QuantFormat::Q4_0 => GgmlType::Q4_0,
            QuantFormat::Q4_1 => GgmlType::Q4_1,
            QuantFormat::Q5_0 => GgmlType::Q5_0,
            QuantFormat::Q5_1 => GgmlType::Q5_1,
            QuantFormat::Q8_0 => GgmlType::Q8_0,
            QuantFormat::Q4_K => GgmlType::Q4_K,
            QuantFormat::Q5_K => GgmlType::Q5_K,
            QuantFormat::Q6_K => GgmlType::Q6_K,
        }
    }
}

impl GgmlType {
    /// How a tensor of this type is held, read where it is mapped: a float dtype, or the block
    /// format LOOM kernels read in place (every quantized type LSE reads).
    pub fn storage(self) -> Storage {
        Storage::Quant(match self {
            GgmlType::F32 => return DType::F32.into(),
            GgmlType::F16 => return DType::F16.into(),
            GgmlType::BF16 => return DType::BF16.into(),
            GgmlType::Q4_0 => QuantFormat::Q4_0,
            GgmlType::Q4_1 => QuantFormat::Q4_1,
            GgmlType::Q5_0 => QuantFormat::Q5_0,
            GgmlType::Q5_1 => QuantFormat::Q5_1,
            GgmlType::Q8_0 => QuantFormat::Q8_0,
            GgmlType::Q4_K => QuantFormat::Q4_K,
            GgmlType::Q5_K => QuantFormat::Q5_K,
            GgmlType::Q6_K => QuantFormat::Q6_K,
        })
    }
}

impl std::fmt::Display for GgmlType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

fn half_at(b: &[u8], i: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[i], b[i + 1]])).to_f32()
}

/// Scale and minimum `j` (0..8) of a Q4_K/Q5_K block's 12 packed 6-bit values.
fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// Dequantizes one row: `out.len()` elements (a whole number of blocks) from `bytes`, which
/// must be exactly [`GgmlType::row_bytes`]`(out.len())` long.
///
/// # Panics
///
/// When the lengths do not match `ty`'s layout.
pub fn dequantize_row(ty: GgmlType, bytes: &[u8], out: &mut [f32]) {
    let (be, bb) = (ty.block_elems(), ty.block_bytes());
    assert!(
        ty.row_bytes(out.len()) == Some(bytes.len()),
        "dequantize_row: {} row of {} elements needs {:?} bytes, got {}",
        ty,
        out.len(),
        ty.row_bytes(out.len()),
        bytes.len()
    );
    let blocks = bytes.chunks_exact(bb).zip(out.chunks_exact_mut(be));
    match ty {
        GgmlType::F32 => {
            blocks.for_each(|(b, y)| y[0] = f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        }
        GgmlType::F16 => blocks.for_each(|(b, y)| y[0] = half_at(b, 0)),
        GgmlType::BF16 => blocks.for_each(|(b, y)| {
            y[0] = f32::from_bits((u16::from_le_bytes([b[0], b[1]]) as u32) << 16)
        }),
        GgmlType::Q4_0 => blocks.for_each(|(b, y)| q4_0(b, y)),
        GgmlType::Q4_1 => blocks.for_each(|(b, y)| q4_1(b, y)),
        GgmlType::Q5_0 => blocks.for_each(|(b, y)| q5_0(b, y)),
        GgmlType::Q5_1 => blocks.for_each(|(b, y)| q5_1(b, y)),
        GgmlType::Q8_0 => blocks.for_each(|(b, y)| q8_0(b, y)),
        GgmlType::Q4_K => blocks.for_each(|(b, y)| q4_k(b, y)),
        GgmlType::Q5_K => blocks.for_each(|(b, y)| q5_k(b, y)),
        GgmlType::Q6_K => blocks.for_each(|(b, y)| q6_k(b, y)),
    }
}

/// `block_q4_0`: d (f16), qs[16]. Element j is the low nibble of qs[j], j + 16 the high one.
fn q4_0(b: &[u8], y: &mut [f32]) {
    let d = half_at(b, 0);
    let (lo, hi) = y.split_at_mut(16);
    for ((&q, y0), y1) in b[2..18].iter().zip(lo).zip(hi) {
        *y0 = ((q & 0xF) as i32 - 8) as f32 * d;
        *y1 = ((q >> 4) as i32 - 8) as f32 * d;
    }
}

/// `block_q4_1`: d, m (f16), qs[16].
fn q4_1(b: &[u8], y: &mut [f32]) {
    let (d, m) = (half_at(b, 0), half_at(b, 2));
    let (lo, hi) = y.split_at_mut(16);
    for ((&q, y0), y1) in b[4..20].iter().zip(lo).zip(hi) {
        *y0 = (q & 0xF) as f32 * d + m;
        *y1 = (q >> 4) as f32 * d + m;
    }
}

/// The fifth bits of a Q5 block's elements j and j + 16, as 0 or 0x10.
fn q5_high(qh: u32, j: usize) -> (u8, u8) {
    (((qh >> j) << 4) as u8 & 0x10, (qh >> (j + 12)) as u8 & 0x10)
}

/// `block_q5_0`: d (f16), qh (u32, bit j is element j's fifth bit), qs[16].
fn q5_0(b: &[u8], y: &mut [f32]) {
    let d = half_at(b, 0);
    let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
    let (lo, hi) = y.split_at_mut(16);
    for (j, ((&q, y0), y1)) in b[6..22].iter().zip(lo).zip(hi).enumerate() {
        let (h0, h1) = q5_high(qh, j);
        *y0 = (((q & 0xF) | h0) as i32 - 16) as f32 * d;
        *y1 = (((q >> 4) | h1) as i32 - 16) as f32 * d;
    }
}

/// `block_q5_1`: d, m (f16), qh (u32), qs[16].
fn q5_1(b: &[u8], y: &mut [f32]) {
    let (d, m) = (half_at(b, 0), half_at(b, 2));
    let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
    let (lo, hi) = y.split_at_mut(16);
    for (j, ((&q, y0), y1)) in b[8..24].iter().zip(lo).zip(hi).enumerate() {
        let (h0, h1) = q5_high(qh, j);
        *y0 = ((q & 0xF) | h0) as f32 * d + m;
        *y1 = ((q >> 4) | h1) as f32 * d + m;
    }
}

/// `block_q8_0`: d (f16), qs[32] (i8).
fn q8_0(b: &[u8], y: &mut [f32]) {
    let d = half_at(b, 0);
    for (&q, y) in b[2..34].iter().zip(y) {
        *y = q as i8 as f32 * d;
    }
}

/// `block_q4_K`: d, dmin (f16), scales[12], qs[128]. Each 64 elements share 32 bytes of qs:
/// the low nibbles make the first 32 (scale pair 2i), the high nibbles the next 32 (2i + 1).
fn q4_k(b: &[u8], y: &mut [f32]) {
    let (d, min) = (half_at(b, 0), half_at(b, 2));
    let scales = &b[4..16];
    for (i, (qs, y)) in b[16..144]
        .chunks_exact(32)
        .zip(y.chunks_exact_mut(64))
        .enumerate()
    {
        let [(d1, m1), (d2, m2)] = [2 * i, 2 * i + 1].map(|j| {
            let (sc, m) = scale_min_k4(j, scales);
            (d * sc as f32, min * m as f32)
        });
        let (lo, hi) = y.split_at_mut(32);
        for ((&q, y0), y1) in qs.iter().zip(lo).zip(hi) {
            *y0 = d1 * (q & 0xF) as f32 - m1;
            *y1 = d2 * (q >> 4) as f32 - m2;
        }
    }
}

/// `block_q5_K`: d, dmin (f16), scales[12], qh[32], qs[128]. As Q4_K, with the fifth bit of
/// element l of the i-th 64 in bit 2i (first 32) or 2i + 1 (next 32) of qh[l].
fn q5_k(b: &[u8], y: &mut [f32]) {
    let (d, min) = (half_at(b, 0), half_at(b, 2));
    let scales = &b[4..16];
    let qh = &b[16..48];
    for (i, (qs, y)) in b[48..176]
        .chunks_exact(32)
        .zip(y.chunks_exact_mut(64))
        .enumerate()
    {
        let [(d1, m1), (d2, m2)] = [2 * i, 2 * i + 1].map(|j| {
            let (sc, m) = scale_min_k4(j, scales);
            (d * sc as f32, min * m as f32)
        });
        let (u1, u2) = (1u8 << (2 * i), 2u8 << (2 * i));
        let (lo, hi) = y.split_at_mut(32);
        for (((&q, &h), y0), y1) in qs.iter().zip(qh).zip(lo).zip(hi) {
            let h0 = if h & u1 != 0 { 16 } else { 0 };
            let h1 = if h & u2 != 0 { 16 } else { 0 };
            *y0 = d1 * ((q & 0xF) + h0) as f32 - m1;
            *y1 = d2 * ((q >> 4) + h1) as f32 - m2;
        }
    }
}

/// `block_q6_K`: ql[128], qh[64], scales[16] (i8), d (f16). Each 128 elements take 64 bytes
/// of ql, 32 of qh and 8 scales; element l + 32k (l < 32, k < 4) has its low nibble in
/// ql[l + 32 (k % 2)] (low half for k < 2), its top two bits in qh[l] bits 2k..2k+2, and
/// scale 2k + l / 16. `x = (d * scale) * (q - 32)`.
fn q6_k(b: &[u8], y: &mut [f32]) {
    let d = half_at(b, 208);
    for (n, y) in y.chunks_exact_mut(128).enumerate() {
        let ql = &b[64 * n..64 * n + 64];
        let qh = &b[128 + 32 * n..128 + 32 * n + 32];
        let sc = &b[192 + 8 * n..192 + 8 * n + 8];
        for l in 0..32 {
            let is = l / 16;
            let h = qh[l];
            let q = [
                ((ql[l] & 0xF) | ((h & 3) << 4)) as i8 - 32,
                ((ql[l + 32] & 0xF) | (((h >> 2) & 3) << 4)) as i8 - 32,
                ((ql[l] >> 4) | (((h >> 4) & 3) << 4)) as i8 - 32,
                ((ql[l + 32] >> 4) | (((h >> 6) & 3) << 4)) as i8 - 32,
            ];
            for (k, q) in q.into_iter().enumerate() {
                y[l + 32 * k] = d * sc[is + 2 * k] as i8 as f32 * q as f32;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f16_bytes(x: f32) -> [u8; 2] {
        f16::from_f32(x).to_bits().to_le_bytes()
    }

    fn deq(ty: GgmlType, bytes: &[u8]) -> Vec<f32> {
        let n = bytes.len() / ty.block_bytes() * ty.block_elems();
        let mut out = vec![f32::NAN; n];
        dequantize_row(ty, bytes, &mut out);
        out
    }

    #[test]
    fn ids_names_and_sizes_follow_ggml() {
        for ty in GgmlType::ALL {
            assert_eq!(GgmlType::from_id(ty.id()), Ok(ty));
            let l = type_layout(ty.id()).unwrap();
            assert_eq!(l.name, ty.name());
            assert_eq!(l.block, Some((ty.block_elems(), ty.block_bytes())));
        }
        assert_eq!(GgmlType::from_id(10), Err("Q2_K".to_string()));
        assert_eq!(GgmlType::from_id(15), Err("Q8_K".to_string()));
        assert_eq!(GgmlType::from_id(16), Err("IQ2_XXS".to_string()));
        assert_eq!(GgmlType::from_id(4), Err("Q4_2".to_string()));
        assert_eq!(GgmlType::from_id(999), Err("type id 999".to_string()));
        assert_eq!(GgmlType::Q4_K.row_bytes(512), Some(288));
        assert_eq!(GgmlType::Q4_K.row_bytes(500), None);
        assert_eq!(GgmlType::Q8_0.row_bytes(64), Some(68));
        assert_eq!(GgmlType::BF16.row_bytes(3), Some(6));
        assert_eq!(GgmlType::Q8_0.row_bytes(usize::MAX / 32 * 32), None);
    }

    #[test]
    fn floats() {
        let v = [1.5f32, -0.0, f32::INFINITY, 3.25e-3];
        let b: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        assert_eq!(deq(GgmlType::F32, &b), v);
        let b: Vec<u8> = v.iter().flat_map(|&x| f16_bytes(x)).collect();
        let want: Vec<f32> = v.iter().map(|&x| f16::from_f32(x).to_f32()).collect();
        assert_eq!(deq(GgmlType::F16, &b), want);
        // bf16 is the top half of the f32.
        let b = [0x80, 0x3f, 0x20, 0xc1, 0x80, 0x7f];
        assert_eq!(deq(GgmlType::BF16, &b), [1.0, -10.0, f32::INFINITY]);
    }

    #[test]
    fn q8_0_block() {
        let mut b = f16_bytes(0.5).to_vec();
        b.extend((0..32).map(|i| (i * 8 - 128) as i8 as u8));
        let want: Vec<f32> = (0..32).map(|i| (i * 8 - 128) as f32 * 0.5).collect();
        assert_eq!(deq(GgmlType::Q8_0, &b), want);
        assert_eq!(deq(GgmlType::Q8_0, &b)[31], 60.0);
    }

    #[test]
    fn q4_0_and_q4_1_blocks() {
        // qs[j] = j (low nibble) | (15 - j) << 4 (high nibble).
        let qs: Vec<u8> = (0..16u8).map(|j| j | ((15 - j) << 4)).collect();
        let mut b = f16_bytes(2.0).to_vec();
        b.extend(&qs);
        let y = deq(GgmlType::Q4_0, &b);
        for j in 0..16 {
            assert_eq!(y[j], (j as f32 - 8.0) * 2.0);
            assert_eq!(y[j + 16], (7.0 - j as f32) * 2.0);
        }
        let mut b = f16_bytes(0.25).to_vec();
        b.extend(f16_bytes(-1.0));
        b.extend(&qs);
        let y = deq(GgmlType::Q4_1, &b);
        for j in 0..16 {
            assert_eq!(y[j], j as f32 * 0.25 - 1.0);
            assert_eq!(y[j + 16], (15 - j) as f32 * 0.25 - 1.0);
        }
    }

    #[test]
    fn q5_0_and_q5_1_blocks() {
        // Element e has the value e (0..32): low nibble e & 15, fifth bit e >> 4.
        let qs: Vec<u8> = (0..16u8).map(|j| j | (j << 4)).collect();
        let qh: u32 = 0xFFFF_0000; // elements 16..32 have the fifth bit
        let mut b = f16_bytes(1.0).to_vec();
        b.extend(qh.to_le_bytes());
        b.extend(&qs);
        let y = deq(GgmlType::Q5_0, &b);
        let want: Vec<f32> = (0..32).map(|e| e as f32 - 16.0).collect();
        assert_eq!(y, want);
        let mut b = f16_bytes(0.5).to_vec();
        b.extend(f16_bytes(3.0));
        b.extend(qh.to_le_bytes());
        b.extend(&qs);
        let y = deq(GgmlType::Q5_1, &b);
        let want: Vec<f32> = (0..32).map(|e| e as f32 * 0.5 + 3.0).collect();
        assert_eq!(y, want);
        // One bit: element 3's fifth bit only.
        let mut b = f16_bytes(1.0).to_vec();
        b.extend(8u32.to_le_bytes());
        b.extend([0u8; 16]);
        let y = deq(GgmlType::Q5_0, &b);
        for (e, &v) in y.iter().enumerate() {
            assert_eq!(v, if e == 3 { 0.0 } else { -16.0 }, "element {e}");
        }
    }

    /// Packs eight 6-bit scales and mins the way `get_scale_min_k4` reads them.
    fn pack_k4(sc: [u8; 8], m: [u8; 8]) -> [u8; 12] {
        let mut q = [0u8; 12];
        for j in 0..4 {
            q[j] = sc[j] | ((sc[j + 4] >> 4) << 6);
            q[j + 4] = m[j] | ((m[j + 4] >> 4) << 6);
            q[j + 8] = (sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4);
        }
        q
    }

    #[test]
    fn k4_scales_unpack() {
        let sc = [1, 2, 63, 0, 17, 33, 48, 63];
        let m = [5, 0, 62, 31, 16, 47, 1, 60];
        let q = pack_k4(sc, m);
        for j in 0..8 {
            assert_eq!(scale_min_k4(j, &q), (sc[j], m[j]), "j={j}");
        }
    }

    #[test]
    fn q4_k_and_q5_k_blocks() {
        let sc = [1, 2, 3, 4, 5, 6, 7, 63];
        let m = [0, 1, 2, 3, 4, 5, 6, 63];
        let (d, dmin) = (0.5f32, 0.25f32);
        // Sub-block s, element l: nibble (l + s) % 16.
        let mut qs = [0u8; 128];
        for i in 0..4 {
            for l in 0..32 {
                let lo = ((l + 2 * i) % 16) as u8;
                let hi = ((l + 2 * i + 1) % 16) as u8;
                qs[32 * i + l] = lo | (hi << 4);
            }
        }
        let mut b = f16_bytes(d).to_vec();
        b.extend(f16_bytes(dmin));
        b.extend(pack_k4(sc, m));
        let mut b5 = b.clone();
        b.extend(qs);
        let y = deq(GgmlType::Q4_K, &b);
        for s in 0..8 {
            for l in 0..32 {
                let q = ((l + s) % 16) as f32;
                let want = d * sc[s] as f32 * q - dmin * m[s] as f32;
                assert_eq!(y[32 * s + l], want, "sub-block {s} element {l}");
            }
        }
        // Q5_K: the fifth bit set for odd l in every sub-block.
        let qh: Vec<u8> = (0..32).map(|l| if l % 2 == 1 { 0xFF } else { 0 }).collect();
        b5.extend(&qh);
        b5.extend(qs);
        let y = deq(GgmlType::Q5_K, &b5);
        for s in 0..8 {
            for l in 0..32 {
                let q = ((l + s) % 16 + 16 * (l % 2)) as f32;
                let want = d * sc[s] as f32 * q - dmin * m[s] as f32;
                assert_eq!(y[32 * s + l], want, "sub-block {s} element {l}");
            }
        }
        assert_eq!(y[32 * 7 + 1], 0.5 * 63.0 * 24.0 - 0.25 * 63.0);
    }

    #[test]
    fn q6_k_block() {
        // Element e has quant (e % 64) (stored q = e % 64, value q - 32) and scale
        // e / 16 - 8 (i8).
        let mut ql = [0u8; 128];
        let mut qh = [0u8; 64];
        let q_of = |e: usize| (e % 64) as u8;
        for n in 0..2 {
            for l in 0..32 {
                let e = |k: usize| 128 * n + l + 32 * k;
                let (q0, q1, q2, q3) = (q_of(e(0)), q_of(e(1)), q_of(e(2)), q_of(e(3)));
                ql[64 * n + l] = (q0 & 0xF) | ((q2 & 0xF) << 4);
                ql[64 * n + l + 32] = (q1 & 0xF) | ((q3 & 0xF) << 4);
                qh[32 * n + l] = (q0 >> 4) | ((q1 >> 4) << 2) | ((q2 >> 4) << 4) | ((q3 >> 4) << 6);
            }
        }
        let scales: Vec<u8> = (0..16).map(|s| (s as i8 - 8) as u8).collect();
        let mut b = ql.to_vec();
        b.extend(qh);
        b.extend(&scales);
        b.extend(f16_bytes(0.125));
        let y = deq(GgmlType::Q6_K, &b);
        for (e, &v) in y.iter().enumerate() {
            let want = 0.125 * ((e / 16) as f32 - 8.0) * (q_of(e) as f32 - 32.0);
            assert_eq!(v, want, "element {e}");
        }
    }

    #[test]
    #[should_panic(expected = "dequantize_row")]
    fn wrong_length_panics() {
        dequantize_row(GgmlType::Q8_0, &[0; 33], &mut [0.0; 32]);
    }
}
