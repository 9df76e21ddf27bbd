//! `attention.kv_write_<ty>`: stores one pass's keys and values into the KV cache at its
//! position, rounded to the cache dtype (round to nearest even; a copy for f32). The rows go
//! through a one-row f32 tile, whose store converts to the buffer's type.

use loom::kernel;

/// `k`, `v`: `[t, row]` f32; `k_cache`, `v_cache`: `[capacity, row]`, written at rows
/// `pos0..pos0 + t`. Grid: x = t.
#[kernel(name = "attention.kv_write", version = 1, workgroup = 64, elem = [bf16, f16, f32])]
fn kv_write<C>(
    k: &[f32; num_groups() * row],
    v: &[f32; num_groups() * row],
    k_cache: &mut [C; (pos0 + num_groups()) * row],
    v_cache: &mut [C; (pos0 + num_groups()) * row],
    row: u32,
    pos0: u32,
) {
    const COLS: u32 = 256;
    let line = tile::<f32, 1, COLS>();
    for c0 in (0..row).step_by(COLS) {
        tile_load(line, k, group_id() * row + c0, row, 1, row - c0);
        tile_store(
            line,
            k_cache,
            (pos0 + group_id()) * row + c0,
            row,
            1,
            row - c0,
        );
        tile_load(line, v, group_id() * row + c0, row, 1, row - c0);
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
