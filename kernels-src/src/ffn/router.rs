//! `ffn.moe_router.v1`: the Qwen3.5 mixture-of-experts router of each token, from its router
//! logits: `p = softmax(logits)` in f32 over all experts, the `k` largest `p` (ties to the
//! lower expert id), and their weights renormalised to sum to 1 (transformers' Qwen3.5-MoE
//! always renormalises, whatever `norm_topk_prob` says).
//!
//! One workgroup per token; work-item `lid` takes experts `lid, lid + 64, ...`.
//! 1. Softmax as torch computes it: the row maximum `m` (`reduce_max`), `s = Σ exp(l - m)`
//!    (each work-item sums its experts in increasing id, then `reduce_sum`'s tree), and
//!    `p_e = exp(l_e - m) / s`.
//! 2. Top-k: `k` rounds of a workgroup `argmax`; a round's candidates are the experts ranked
//!    after the previous winner (lower `p`, or equal `p` and higher id), which excludes every
//!    earlier winner without marks (as `attention.block_select` does). `p` is recomputed from
//!    the logits each round (the same operations, so the same value). A NaN `p` never wins.
//! 3. `w_j = p_j / Σ_{i<k} p_i`, the sum taken in selection order (largest first).
//!
//! A token whose probabilities are all NaN (a NaN or infinite logit) finds no candidate: its
//! round writes id `num_experts` (no expert) and weight 0, and the launcher's caller refuses
//! such ids before using them.

use loom::kernel;

/// `logits`: `[tokens, num_experts]`; `ids`, `weights`: `[tokens, k]`, best first. `k` from 1
/// to `num_experts` (the launcher checks). Grid: x = tokens.
#[kernel(name = "ffn.moe_router", version = 1, workgroup = 64)]
fn moe_router(
    logits: &[f32; num_groups() * num_experts],
    ids: &mut [u32; num_groups() * k],
    weights: &mut [f32; num_groups() * k],
    num_experts: u32,
    k: u32,
) {
    const WG: u32 = 64;
    let lid = local_id();
    let row = group_id() * num_experts;
    let out = group_id() * k;
    let n_chunks = (num_experts + WG - 1) / WG;

    // 1. Softmax pieces.
    let mut my_max = f32::NEG_INFINITY;
    for c in 0..n_chunks {
        let e = c * WG + lid;
        if e < num_experts {
            my_max = max(my_max, logits[row + e]);
        }
    }
    let m = reduce_max(my_max);
    let mut my_sum = 0.0;
    for c in 0..n_chunks {
        let e = c * WG + lid;
        if e < num_experts {
            my_sum += exp(logits[row + e] - m);
        }
    }
    let s = reduce_sum(my_sum);

    // 2. Top-k, best first; `top` sums the winners' probabilities in that order.
    let mut cut_p = f32::INFINITY;
    let mut cut_e: u32 = 0;
    let mut top = 0.0;
    for j in 0..k {
        let mut best_p = f32::NEG_INFINITY;
        let mut best_e = u32::MAX;
        for c in 0..n_chunks {
            let e = c * WG + lid;
            if e < num_experts {
                let p = exp(logits[row + e] - m) / s;
                // Ranked after the previous winner (the first round takes every expert: no
                // probability is infinite), and better than what this work-item found so far
                // (ascending ids, so a tie keeps the lower id).
                let after = p < cut_p || (p == cut_p && e > cut_e);
                if after && p > best_p {
                    best_p = p;
                    best_e = e;
                }
            }
        }
        let (win_p, win_e) = argmax(best_p, best_e);
        cut_p = win_p;
        cut_e = win_e;
        // Probabilities are at least 0, so a round found a winner exactly when `win_p >= 0`.
        let found = win_p >= 0.0;
        if found {
            top += win_p;
        }
        if lid == 0 {
            ids[out + j] = if found { win_e } else { num_experts };
            weights[out + j] = if found { win_p } else { 0.0 };
        }
    }

    // 3. Renormalised weights (work-item 0 rereads what it wrote).
    if lid == 0 {
        for j in 0..k {
            weights[out + j] = weights[out + j] / top;
        }
    }
}
