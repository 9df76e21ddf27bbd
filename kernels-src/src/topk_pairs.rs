//! `topk_pairs.v1`: the k largest (id, logit) pairs of each row, k from 1 to 32.
//!
//! Order: larger logit first; equal logits by the lower id; a NaN logit ranks below every
//! number. One workgroup per row. Each work-item keeps its own best `k` of the ids it visits
//! (`lid, lid + wg, lid + 2 wg, ...`, increasing) in a sorted list in shared memory, and the
//! lists are merged at the end by `k` rounds of a workgroup `argmax` over their heads (the
//! work-item whose head won advances; ids are unique across work-items, so the winner is
//! unambiguous and the tie rule of `argmax`, lower index, is exactly the tie rule of the
//! output).
//!
//! The row is read once, in blocks of `BLOCK` chunks of `group_size()` logits, against a
//! workgroup threshold `t`: the k-th best logit of the row so far, taken by the same merge
//! (without consuming the lists) after blocks 1, 2, 4, 8, ... A logit below `t` has `k`
//! logits of the row at or above `t` ranking before it, so it cannot be in the output nor
//! change the later thresholds; each block first tests its logits against `t` side by side
//! (vectorised on the host), and only a work-item with a logit at or above it walks its
//! share of the block and inserts. After the first blocks that is rare, so the kernel runs at
//! the speed of that one test per logit. While `t` is -inf (fewer than `k` logits seen, or
//! the k-th best is -inf or NaN) every logit is inserted.
//!
//! Any vocabulary size works, including one not a multiple of the workgroup, and one smaller
//! than `k` (the missing entries come out as `(u32::MAX, -inf)`; the launcher refuses k > vocab).

use loom::kernel;

/// `logits`: `[rows, vocab]`; `out_ids`, `out_vals`: `[rows, k]`, best first. `k` in 1..=32.
/// Grid: x = rows (`num_groups()` in the declared lengths).
#[kernel(name = "topk_pairs", version = 1, workgroup = 128)]
fn topk_pairs(
    logits: &[f32; num_groups() * vocab],
    out_ids: &mut [u32; num_groups() * k],
    out_vals: &mut [f32; num_groups() * k],
    vocab: u32,
    k: u32,
) {
    const MAX_K: u32 = 32;
    // Chunks per block.
    const BLOCK: u32 = 16;
    let list_vals = shared::<f32>(128 * MAX_K);
    let list_ids = shared::<u32>(128 * MAX_K);

    let row = group_id();
    let lid = local_id();
    let base = row * vocab;
    let first = lid * MAX_K;

    let mut count: u32 = 0;
    let mut t = f32::NEG_INFINITY;
    // Bounds and element indices are written out in each loop (see `lse_pick`): uniform
    // block and chunk counts let the host run the work-items of a chunk side by side.
    for b in 0..((vocab + group_size() - 1) / group_size() + BLOCK - 1) / BLOCK {
        // Does this work-item have a logit at or above `t` in the block? (A `u32`, not a
        // `bool`: the host stores it under a vector mask.)
        let mut hit: u32 = 0;
        for c in b * BLOCK..((b + 1) * BLOCK).min((vocab + group_size() - 1) / group_size()) {
            if c * group_size() + local_id() < vocab {
                let x = logits[group_id() * vocab + c * group_size() + local_id()];
                if x >= t || t == f32::NEG_INFINITY {
                    hit = 1;
                }
            }
        }
        if hit == 1 {
            let mut c = b * BLOCK;
            while c < ((b + 1) * BLOCK).min((vocab + group_size() - 1) / group_size()) {
                let v = c * group_size() + lid;
                if v < vocab {
                    let x = logits[base + v];
                    // Ids arrive in increasing order, so a new element beats a listed one
                    // only when its value is larger, or it is a number and the listed one is
                    // NaN (`y != y`).
                    let full = count == k;
                    let last = if full { list_vals[first + k - 1] } else { 0.0 };
                    if (x >= t || t == f32::NEG_INFINITY)
                        && (!full || x > last || (last != last && x == x))
                    {
                        let mut pos = if full { k - 1 } else { count };
                        while pos > 0
                            && (x > list_vals[first + pos - 1]
                                || (list_vals[first + pos - 1] != list_vals[first + pos - 1]
                                    && x == x))
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
                c += 1;
            }
        }
        // After blocks 1, 2, 4, 8, ...: `t` = the k-th best so far (the lists hold every
        // logit of the row's best k so far), found by a merge that leaves the lists as
        // they are. A NaN k-th best (fewer than k numbers) keeps the old `t`.
        if ((b + 1) & b) == 0 {
            let mut head: u32 = 0;
            let mut kth = f32::NEG_INFINITY;
            for _r in 0..k {
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
                kth = best_val;
                if live && cand_id == best_id {
                    head += 1;
                }
            }
            if kth == kth {
                t = kth;
            }
        }
    }

    // The output: the same merge, written out.
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
