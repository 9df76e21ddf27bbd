//! `logits.lse_pick.v1`: per-row log-sum-exp pieces and picked logits.
//!
//! Scoring never copies a vocabulary-sized row off the device. For each row of logits this
//! kernel returns the row's maximum `m`, the sum of `exp(logit - m)`, and the logits at a
//! list of requested ids (the next token, plus a KL-divergence base's top-k ids). The host
//! then forms `log p(id) = logit(id) - m - ln(sum)` in double precision.
//!
//! One workgroup per row. Each work-item strides over the row; two workgroup reductions
//! (max, then sum) combine the partial results. A row whose every logit is -inf has
//! `m = -inf` and sum 0.

use loom::kernel;

/// `logits`: `[rows, vocab]`; `ids`: `[rows, n_ids]`, every id `< vocab` (the launcher checks);
/// `stats`: `[rows, 2]` = (max, sum of exp(logit - max)); `picked`: `[rows, n_ids]`.
#[kernel(name = "logits.lse_pick", version = 1, workgroup = 256)]
fn lse_pick(
    logits: &[f32],
    ids: &[u32],
    stats: &mut [f32],
    picked: &mut [f32],
    vocab: u32,
    n_ids: u32,
) {
    let row = group_id();
    let lid = local_id();
    let base = row * vocab;

    // Work-item `lid` visits `lid, lid + WG, ...` in increasing order; the loops run over
    // uniform chunk counts, so the host code runs the work-items of a chunk side by side
    // (contiguous, vectorised loads) instead of one strided walk per work-item. The chunk
    // count, the row's start and the element index are written out in each loop (a `let` used by two regions
    // would live per work-item: the bound would no longer count as uniform, and the loads
    // would become gathers).
    let mut m = f32::NEG_INFINITY;
    for c in 0..(vocab + group_size() - 1) / group_size() {
        if c * group_size() + local_id() < vocab {
            m = m.max(logits[group_id() * vocab + c * group_size() + local_id()]);
        }
    }
    let row_max = reduce_max(m);

    let mut s = 0.0;
    if row_max > f32::NEG_INFINITY {
        for c in 0..(vocab + group_size() - 1) / group_size() {
            if c * group_size() + local_id() < vocab {
                s += (logits[group_id() * vocab + c * group_size() + local_id()] - row_max).exp();
            }
        }
    }
    let total = reduce_sum(s);

    if lid == 0 {
        stats[row * 2] = row_max;
        stats[row * 2 + 1] = total;
    }
    for j in (lid..n_ids).step_by(group_size()) {
        let at = row * n_ids + j;
        picked[at] = logits[base + ids[at]];
    }
}
