//! `attention.kv_write_<ty>`: stores one pass's keys and values into the KV cache at its
//! position, rounded to the cache dtype (round to nearest even; a copy for f32). The rows go
//! through a one-row f32 tile, whose store converts to the buffer's type. With `through_f16`
//! (for an f32 cache) each value is rounded to f16 first and stored widened back: llama.cpp's
//! flash attention casts an f32 cache's keys and values to f16 before it reads them, so a
//! cache that holds them so gives its scores. v2 adds `through_f16`; without it, v1's values.

use loom::kernel;

/// `k`, `v`: `[t, row]` f32; `k_cache`, `v_cache`: `[capacity, row]`, written at rows
/// `pos0..pos0 + t`; `through_f16`: nonzero to round each value to f16 before the store.
/// Grid: x = t.
#[kernel(name = "attention.kv_write", version = 2, workgroup = 64, elem = [bf16, f16, f32])]
fn kv_write<C>(
    k: &[f32; num_groups() * row],
    v: &[f32; num_groups() * row],
    k_cache: &mut [C; (pos0 + num_groups()) * row],
    v_cache: &mut [C; (pos0 + num_groups()) * row],
    row: u32,
    pos0: u32,
    through_f16: u32,
) {
    const COLS: u32 = 256;
    let line = tile::<f32, 1, COLS>();
    let half = tile::<f16, 1, COLS>();
    for c0 in (0..row).step_by(COLS) {
        tile_load(line, k, group_id() * row + c0, row, 1, row - c0);
        if through_f16 != 0 {
            tile_copy(half, line);
            tile_copy(line, half);
        }
        tile_store(
            line,
            k_cache,
            (pos0 + group_id()) * row + c0,
            row,
            1,
            row - c0,
        );
        tile_load(line, v, group_id() * row + c0, row, 1, row - c0);
        if through_f16 != 0 {
            tile_copy(half, line);
            tile_copy(line, half);
        }
        tile_store(
            line,
            v_cache,
            (pos0 + group_id()) * row + c0,
            row,
            1,
            row - c0,
        );
    }
}
