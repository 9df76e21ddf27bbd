//! `topk_pairs.v1`: the k largest (id, logit) pairs of each row, k from 1 to 32.
//!
//! Order: larger logit first; equal logits by the lower id; a NaN logit ranks below every
//! number. One workgroup per row, in two steps:
//! 1. each work-item scans its strided share of the row in increasing id order and keeps its
//!    own best `k` in a sorted list in shared memory (insertion, rarely taken after the first
//!    few hundred elements of a row);
//! 2. `k` rounds of a workgroup `argmax` over the heads of those lists; the work-item whose
//!    head won advances. Ids are unique across work-items, so the winner is unambiguous and the
//!    tie rule of `argmax` (lower index) is exactly the tie rule of the output.
//!
//! Any vocabulary size works, including one not a multiple of the workgroup, and one smaller
//! than `k` (the missing entries come out as `(u32::MAX, -inf)`; the launcher refuses k > vocab).

use loom::kernel;

/// `logits`: `[rows, vocab]`; `out_ids`, `out_vals`: `[rows, k]`, best first. `k` in 1..=32.
#[kernel(name = "topk_pairs", version = 1, workgroup = 128)]
fn topk_pairs(logits: &[f32], out_ids: &mut [u32], out_vals: &mut [f32], vocab: u32, k: u32) {
    const MAX_K: u32 = 32;
    let list_vals = shared::<f32>(128 * MAX_K);
    let list_ids = shared::<u32>(128 * MAX_K);

    let row = group_id();
    let lid = local_id();
    let base = row * vocab;
    let first = lid * MAX_K;

    // Step 1: this work-item's sorted best-k of ids lid, lid + wg, lid + 2 wg, ...
    let mut count: u32 = 0;
    for v in (lid..vocab).step_by(group_size()) {
        let x = logits[base + v];
        // Ids arrive in increasing order, so a new element beats a listed one only when its
        // value is larger, or it is a number and the listed one is NaN (`y != y`).
        let full = count == k;
        let last = if full { list_vals[first + k - 1] } else { 0.0 };
        if !full || x > last || (last != last && x == x) {
            let mut pos = if full { k - 1 } else { count };
            while pos > 0
                && (x > list_vals[first + pos - 1]
                    || (list_vals[first + pos - 1] != list_vals[first + pos - 1] && x == x))
            {
                list_vals[first + pos] = list_vals[first + pos - 1];
                list_ids[first + pos] = list_ids[first + pos - 1];
                pos -= 1;
            }
            list_vals[first + pos] = x;
            list_ids[first + pos] = v;
            if !full {
                count += 1;
            }
        }
    }

    // Step 2: merge the per-work-item lists.
    let mut head: u32 = 0;
    for r in 0..k {
        let live = head < count;
        let cand_val = if live {
            list_vals[first + head]
        } else {
            f32::NEG_INFINITY
        };
        let cand_id = if live {
            list_ids[first + head]
        } else {
            u32::MAX
        };
        let (best_val, best_id) = argmax(cand_val, cand_id);
        if lid == 0 {
            out_ids[row * k + r] = best_id;
            out_vals[row * k + r] = best_val;
        }
        if live && cand_id == best_id {
            head += 1;
        }
    }
}
