//! `ffn.moe_gather.v2`: copies token rows into the expert-sorted buffer the routed experts'
//! GEMMs read, `xs[r, :] = x[rows[r], :]`. Each expert's rows are one contiguous segment of
//! `xs`, so an expert's projections are one GEMM over that segment.
//!
//! v2 reads the slot's token once, before the row loop: v1 read `rows[r]` inside the bounds
//! check `i < h`, where the host code loaded it per work-item (a gather of one address) and
//! then read the row through a gather.

use loom::kernel;

/// `x`: `[tokens, h]`; `rows`: `[n_slots]`, each `< tokens` (the launcher checks);
/// `xs`: `[n_slots, h]`. One workgroup per slot; work-items stride over the row.
/// Grid: x = n_slots.
#[kernel(name = "ffn.moe_gather", version = 2, workgroup = 256)]
fn moe_gather(x: &[f32], rows: &[u32; num_groups()], xs: &mut [f32; num_groups() * h], h: u32) {
    const WG: u32 = 256;
    let r = group_id();
    let src = rows[r] * h;
    for c in 0..(h + WG - 1) / WG {
        let i = c * WG + local_id();
        if i < h {
            xs[r * h + i] = x[src + i];
        }
    }
}
