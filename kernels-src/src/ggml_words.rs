//! LOOM functions (`lse-dsl/LOOM.md`, "Functions") that read a ggml block tensor held as
//! little-endian `u32` words (`w`, the file's bytes, the first one 4-aligned) at byte offset
//! `o`: the kernels reading quantized weights where they lie (`gemm_quant`, `embedding`) call
//! them. Blocks of 18, 22, 34 or 210 bytes need not start at a word, so their 16- and 32-bit
//! fields may stand at a half-word.

use loom::function;

/// The f16 at even byte `o`, as f32.
#[function]
fn f16_at(w: &[u32], o: u32) -> f32 {
    f16_to_f32(f16_from_bits(w[o / 4] >> (o % 4 * 8)))
}

/// The signed byte at byte `o`.
#[function]
fn i8_at(w: &[u32], o: u32) -> i32 {
    (((w[o / 4] >> (o % 4 * 8)) << 24) as i32) >> 24
}

/// The 32 bits at even byte `o`: one word, or the halves of two.
#[function]
fn word_at(w: &[u32], o: u32) -> u32 {
    if o % 4 == 0 {
        w[o / 4]
    } else {
        (w[o / 4] >> 16) | (w[o / 4 + 1] << 16)
    }
}
