//! `logits.lse_pick.v1`: per-row log-sum-exp pieces and picked logits.
//!
//! Scoring never copies a vocabulary-sized row off the device. For each row of logits this
//! kernel returns the row's maximum `m`, the sum of `exp(logit - m)`, and the logits at a
//! list of requested ids (the next token, plus a KL-divergence base's top-k ids). The host
//! then forms `log p(id) = logit(id) - m - ln(sum)` in double precision.
//!
//! One workgroup per row, one read of the row from memory. Each work-item strides over the
//! row in blocks of `BLOCK` chunks of `group_size()` logits (16 KiB at 256 work-items, so a
//! block stays in L1 between its two visits): with the block's maximum in hand it rescales
//! its running sum to the new running maximum (one `exp` per block), then adds the block's
//! `exp(logit - max)` while it takes the next block's maximum, so the next block's loads
//! from memory overlap this block's `exp`s (a pass for the maximum alone waited on memory).
//! Two workgroup reductions combine the work-items: the row maximum, then the sum of each
//! work-item's sum rescaled to it. A row whose every logit is -inf has `m = -inf` and sum 0.

use loom::kernel;

/// `logits`: `[rows, vocab]`; `ids`: `[rows, n_ids]`, every id `< vocab` (the launcher checks);
/// `stats`: `[rows, 2]` = (max, sum of exp(logit - max)); `picked`: `[rows, n_ids]`. Grid:
/// x = rows (`num_groups()` in the declared lengths).
#[kernel(name = "logits.lse_pick", version = 1, workgroup = 256)]
fn lse_pick(
    logits: &[f32; num_groups() * vocab],
    ids: &[u32; num_groups() * n_ids],
    stats: &mut [f32; num_groups() * 2],
    picked: &mut [f32; num_groups() * n_ids],
    vocab: u32,
    n_ids: u32,
) {
    // Chunks per block.
    const BLOCK: u32 = 16;
    let row = group_id();
    let lid = local_id();
    let base = row * vocab;

    // Work-item `lid` visits `lid, lid + WG, ...` in increasing order; the loops run over
    // uniform block and chunk counts, so the host code runs the work-items of a chunk side by
    // side (contiguous, vectorised loads) instead of one strided walk per work-item. Bounds,
    // the row's start and the element index are written out in each loop (a `let` used by
    // two regions would live per work-item: a bound would no longer count as uniform, and the
    // loads would become gathers).
    let mut m = f32::NEG_INFINITY;
    let mut s = 0.0;
    // The first block's maximum; each block's pass then takes the next one's.
    let mut block_max = f32::NEG_INFINITY;
    for c in 0..BLOCK.min((vocab + group_size() - 1) / group_size()) {
        if c * group_size() + local_id() < vocab {
            block_max = block_max.max(logits[group_id() * vocab + c * group_size() + local_id()]);
        }
    }
    for b in 0..((vocab + group_size() - 1) / group_size() + BLOCK - 1) / BLOCK {
        let new_max = m.max(block_max);
        // While every logit seen is -inf, exponents are taken relative to 0 (all terms 0).
        let shift = if new_max > f32::NEG_INFINITY {
            new_max
        } else {
            0.0
        };
        s *= (m - shift).exp();
        // This block's terms (its logits in L1) and the next block's maximum (its logits
        // from memory): the loads overlap the `exp`s. Every block but the last is whole, so
        // chunk `c + BLOCK` runs over the whole next block.
        let mut next_max = f32::NEG_INFINITY;
        for c in b * BLOCK..((b + 1) * BLOCK).min((vocab + group_size() - 1) / group_size()) {
            if c * group_size() + local_id() < vocab {
                s += (logits[group_id() * vocab + c * group_size() + local_id()] - shift).exp();
            }
            if (c + BLOCK) * group_size() + local_id() < vocab {
                next_max = next_max
                    .max(logits[group_id() * vocab + (c + BLOCK) * group_size() + local_id()]);
            }
        }
        m = new_max;
        block_max = next_max;
    }
    let row_max = reduce_max(m);

    let mut part = 0.0;
    if m > f32::NEG_INFINITY {
        part = s * (m - row_max).exp();
    }
    let total = reduce_sum(part);

    if lid == 0 {
        stats[row * 2] = row_max;
        stats[row * 2 + 1] = total;
    }
    for j in (lid..n_ids).step_by(group_size()) {
        let at = row * n_ids + j;
        picked[at] = logits[base + ids[at]];
    }
}
