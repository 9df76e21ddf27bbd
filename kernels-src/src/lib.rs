//! LSE's kernels in LOOM.
//!
//! Each `#[loom::kernel]` fn becomes a module with a `KERNEL` description
//! ([`lse_dsl::rt::KernelDef`]); [`ALL`] lists them so the runtime and `lse kernels` can find
//! a kernel by name or id.

use lse_dsl::rt::KernelDef;

pub mod act_quant;
pub mod attention;
mod bf16x3;
pub mod deltanet;
pub mod embedding;
pub mod ffn;
pub mod gemm;
pub mod gemm_int;
pub mod gemm_mlx;
pub mod gemm_narrow;
pub mod gemm_quant;
pub mod gemm_swiglu;
mod ggml_words;
mod group_order;
mod k_loops;
pub mod lm_head;
pub mod lse_pick;
pub mod norm;
mod row_blocks;
pub mod topk_pairs;

/// Lists every kernel module once: [`ALL`] gets their `KERNEL`s and [`BUILD_IR_HASHES`] the
/// hashes of the IR the build script lowered, in the same order.
macro_rules! kernels {
    ($($($seg:ident)::+),* $(,)?) => {
        /// Every kernel of this crate.
        pub static ALL: &[&KernelDef] = &[$(&$($seg)::+::KERNEL),*];
        /// `BUILD_IR_HASHES[i]` is the hash of the IR the build script lowered for `ALL[i]`; it
        /// must equal `ALL[i].ir_hash`, the macro's.
        pub static BUILD_IR_HASHES: &[&str] = &[$($($seg)::+::BUILD_IR_HASH),*];
    };
}

kernels!(
    act_quant::q8_0,
    act_quant::q8_0_int,
    act_quant::q8_k,
    act_quant::q8_k_int,
    act_quant::gather_rows,
    lse_pick::lse_pick,
    topk_pairs::topk_pairs,
    lm_head::lm_head_matvec_bf16,
    lm_head::lm_head_matvec_f16,
    lm_head::lm_head_matvec_f32,
    attention::key_blocks::key_block_mean_bf16,
    attention::key_blocks::key_block_mean_f16,
    attention::key_blocks::key_block_mean_f32,
    attention::block_score::block_score,
    attention::block_select::block_select,
    attention::prefill::prefill_bf16,
    attention::prefill::prefill_f16,
    attention::prefill::prefill_f32,
    gemm::gemm_xwt_bf16,
    gemm::gemm_xwt_f16,
    gemm::gemm_xwt_exact_bf16,
    gemm::gemm_xwt_exact_f16,
    gemm::gemm_xwt_exact_f32,
    gemm::transpose_x_bf16,
    gemm::transpose_x_f16,
    gemm::transpose_x_f32,
    gemm::transpose_x_bf16x3_bf16,
    gemm::gemm_xwt_bf16x3_bf16,
    gemm_narrow::gemm_xwt_narrow_bf16,
    gemm_narrow::gemm_xwt_narrow_f16,
    gemm_narrow::gemm_xwt_exact_narrow_bf16,
    gemm_narrow::gemm_xwt_exact_narrow_f16,
    gemm_narrow::gemm_xwt_exact_narrow_f32,
    gemm_swiglu::gemm_xwt_swiglu_bf16,
    gemm_swiglu::gemm_xwt_swiglu_f16,
    gemm_swiglu::gemm_xwt_exact_swiglu_bf16,
    gemm_swiglu::gemm_xwt_exact_swiglu_f16,
    gemm_swiglu::gemm_xwt_exact_swiglu_f32,
    gemm_swiglu::gemm_xwt_bf16x3_swiglu_bf16,
    gemm_int::gemm_xwt_q4_k_q8_k_bm64,
    gemm_int::gemm_xwt_q4_k_q8_k_bm16,
    gemm_int::gemm_xwt_q5_k_q8_k_bm64,
    gemm_int::gemm_xwt_q5_k_q8_k_bm16,
    gemm_int::gemm_xwt_q6_k_q8_k_bm64,
    gemm_int::gemm_xwt_q6_k_q8_k_bm16,
    gemm_int::gemm_xwt_q4_0_q8_0_bm64,
    gemm_int::gemm_xwt_q4_0_q8_0_bm16,
    gemm_int::gemm_xwt_q5_0_q8_0_bm64,
    gemm_int::gemm_xwt_q5_0_q8_0_bm16,
    gemm_int::gemm_xwt_q8_0_q8_0_bm64,
    gemm_int::gemm_xwt_q8_0_q8_0_bm16,
    gemm_quant::gemm_xwt_q8_0,
    gemm_quant::gemm_xwt_q4_0,
    gemm_quant::gemm_xwt_q4_1,
    gemm_quant::gemm_xwt_q5_0,
    gemm_quant::gemm_xwt_q5_1,
    gemm_quant::gemm_xwt_q4_k,
    gemm_quant::gemm_xwt_q5_k,
    gemm_quant::gemm_xwt_q6_k,
    gemm_mlx::gemm_xwt_mlx4_bf16,
    gemm_mlx::gemm_xwt_mlx4_f16,
    gemm_mlx::gemm_xwt_mlx4_f32,
    gemm_mlx::gemm_xwt_mlx8_bf16,
    gemm_mlx::gemm_xwt_mlx8_f16,
    gemm_mlx::gemm_xwt_mlx8_f32,
    embedding::embed_tokens_bf16,
    embedding::embed_tokens_f16,
    embedding::embed_tokens_f32,
    embedding::embed_tokens_q,
    embedding::embed_tokens_mlx_bf16,
    embedding::embed_tokens_mlx_f16,
    embedding::embed_tokens_mlx_f32,
    norm::rmsnorm,
    norm::add_rmsnorm,
    attention::qk_norm_rope::qk_norm_rope,
    attention::output_gate::output_gate,
    attention::kv_write::kv_write_bf16,
    attention::kv_write::kv_write_f16,
    attention::kv_write::kv_write_f32,
    ffn::swiglu::swiglu,
    ffn::router::moe_router,
    ffn::gather::moe_gather,
    ffn::combine::moe_combine,
    deltanet::conv::conv,
    deltanet::gates::gates,
    deltanet::delta_prep::delta_prep,
    deltanet::delta_rule::delta_rule,
    deltanet::gated_norm::gated_norm,
);

/// Finds a kernel by id (`logits.lse_pick.v1`), by Rust fn name (`lse_pick`), or by stable
/// name (`logits.lse_pick`, which picks the highest version).
pub fn find(name_or_id: &str) -> Option<&'static KernelDef> {
    if let Some(k) = ALL
        .iter()
        .find(|k| k.id == name_or_id || k.fn_name == name_or_id)
    {
        return Some(*k);
    }
    ALL.iter()
        .filter_map(|k| {
            let (name, version) = split_id(k.id)?;
            (name == name_or_id).then_some((version, *k))
        })
        .max_by_key(|(version, _)| *version)
        .map(|(_, k)| k)
}

/// Splits `name.vN` into `(name, N)`.
fn split_id(id: &str) -> Option<(&str, u32)> {
    let (name, v) = id.rsplit_once(".v")?;
    Some((name, v.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn find_by_id_fn_name_and_name() {
        assert_eq!(
            find("logits.lse_pick.v1").map(|k| k.fn_name),
            Some("lse_pick")
        );
        assert_eq!(find("topk_pairs").map(|k| k.id), Some("topk_pairs.v1"));
        assert_eq!(
            find("logits.lse_pick").map(|k| k.id),
            Some("logits.lse_pick.v1")
        );
        assert!(find("logits.nope").is_none());
        assert!(find("logits.lse_pick.v2").is_none());
    }

    #[test]
    fn ids_are_unique() {
        for (i, a) in ALL.iter().enumerate() {
            for b in &ALL[i + 1..] {
                assert_ne!(a.id, b.id);
                assert_ne!(
                    a.fn_name, b.fn_name,
                    "fn names are symbol bases and must differ"
                );
            }
        }
    }

    #[test]
    fn split_id_parses_versions() {
        assert_eq!(split_id("a.b.v12"), Some(("a.b", 12)));
        assert_eq!(split_id("a.b"), None);
    }
}
