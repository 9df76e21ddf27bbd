//! FlashPrefill stage A: the mean key of every key block, per KV head
//! (`attention.key_block_mean_<ty>` for the cache dtypes bf16, f16, f32).
//!
//! Block `J` covers cache rows `J * block .. min((J + 1) * block, kv_len)`; a partial last
//! block divides by its own row count, so padding never enters a mean. The result is f32,
//! laid out `[n_kv_heads, head_dim, n_kblocks]` so that the scoring kernel's work-items, one
//! key block each, read consecutive addresses for every dimension.

use loom::kernel;

/// `k`: the key cache `[>= kv_len, n_kv_heads, head_dim]` in the instance's element type;
/// `pooled`: `[n_kv_heads, head_dim, n_kblocks]` f32 with `n_kblocks = ceil(kv_len / block)`.
/// Grid: x = n_kblocks, y = n_kv_heads.
///
/// Work-items stride over the head dimension (64 at a time), so each cache row is read
/// contiguously across the workgroup; dimensions past `head_dim` re-read the last one (the
/// `min`) and store nothing. Each mean sums its rows in increasing order in f32, then divides
/// once by the row count.
#[kernel(name = "attention.key_block_mean", version = 1, workgroup = 64, elem = [bf16, f16, f32])]
fn key_block_mean<W>(
    k: &[W; kv_len * n_kv_heads * head_dim],
    pooled: &mut [f32; num_groups_y() * head_dim * num_groups()],
    kv_len: u32,
    n_kv_heads: u32,
    head_dim: u32,
    block: u32,
) {
    const WG: u32 = 64;
    let lid = local_id();
    let jb = group_id();
    let n_kblocks = num_groups();
    let kvh = group_id_y();
    let row = n_kv_heads * head_dim;
    let t0 = jb * block;
    let t1 = min(t0 + block, kv_len);
    let count = (t1 - t0) as f32;
    let head = kvh * head_dim;
    for dc in 0..((head_dim + WG - 1) >> 6) {
        let d = dc * WG + lid;
        let dd = min(d, head_dim - 1);
        let mut acc = 0.0;
        for tok in t0..t1 {
            acc += to_f32(k[tok * row + head + dd]);
        }
        if d < head_dim {
            pooled[(head + d) * n_kblocks + jb] = acc / count;
        }
    }
}
