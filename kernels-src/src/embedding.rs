//! `embedding.gather_<ty>`: the token embedding, the first operation of the prefill. Each
//! token's row of the table is read in its stored dtype and widened to f32 exactly.

use loom::kernel;

/// `ids`: `[t]`, each below the table's row count (the op checks); `table`: `[vocab, hidden]`;
/// `x`: `[t, hidden]` f32. Grid: x = t.
#[kernel(name = "embedding.gather", version = 1, workgroup = 256, elem = [bf16, f16, f32])]
fn embed_tokens<E>(
    ids: &[u32; num_groups()],
    table: &[E],
    x: &mut [f32; num_groups() * hidden],
    hidden: u32,
) {
    for c in 0..(hidden + group_size() - 1) / group_size() {
        if c * group_size() + local_id() < hidden {
            x[group_id() * hidden + c * group_size() + local_id()] =
                to_f32(table[ids[group_id()] * hidden + c * group_size() + local_id()]);
        }
    }
}
