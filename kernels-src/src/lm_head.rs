//! The LM head's matrix-vector form: logits = hidden · Wᵀ for one hidden row (serving's
//! decode step), with W `[vocab, hidden]` in its stored dtype and f32 accumulation. Many rows
//! at once (scoring's `head_rows`) go through the LOOM GEMM's f32-activation instances
//! (`gemm.xwt_exact_<ty>`; `lse_runtime::ops::lm_head`), which add the same
//! products in the same order.
//!
//! Generic over the weight's element type `W` and instantiated for bf16, f16 and f32
//! (`lm_head.matvec_bf16`, `lm_head.matvec_f16`, `lm_head.matvec_f32`); `to_f32` widens a
//! weight element whatever its type. Each work-item owns one column, reads its weight row
//! contiguously, and `fma` keeps one rounding per multiply-add, as the plain-Rust reference
//! does.

use loom::kernel;

/// `hidden`: `[dim]` f32; `w`: `[vocab, dim]` in the instance's element type; `out`: `[vocab]`
/// f32. Grid: x = ceil(vocab / 256).
#[kernel(name = "lm_head.matvec", version = 1, workgroup = 256, elem = [bf16, f16, f32])]
fn lm_head_matvec<W>(
    hidden: &[f32; dim],
    w: &[W; vocab * dim],
    out: &mut [f32; vocab],
    vocab: u32,
    dim: u32,
) {
    let col = group_id() * group_size() + local_id();
    if col < vocab {
        let wrow = col * dim;
        let mut acc = 0.0;
        for k in 0..dim {
            acc = fma(hidden[k], to_f32(w[wrow + k]), acc);
        }
        out[col] = acc;
    }
}
