//! LOOM procedures (`lse-dsl/LOOM.md`, "Functions") for a workgroup that owns four row
//! blocks of `y = x · wᵀ` sharing each weight block it prepares (`gemm_quant`, `gemm_mlx`:
//! four 64 x 32 accumulators, rows `row0 ..`, `row0 + rows ..`, ...). Each reads, multiplies
//! or writes the four blocks, one block at a time; a block from row `m` on (past the last
//! row of `y`) is left alone.

use loom::function;

/// `acc` = rows `row ..` of `y` (`[m, n]`) from column `col0`: the product is added to `y`.
#[function]
fn load_rows(acc: Tile, y: &[f32], row: u32, col0: u32, m: u32, n: u32) {
    if row < m {
        tile_load(acc, y, row * n + col0, n, m - row, n - col0);
    }
}

/// `acc += x[row .., k0 ..] · b` (`x`: `[m, k]`), the block of `x` read into `a`.
#[function]
fn dot_rows(acc: Tile, a: Tile, b: Tile, x: &[f32], row: u32, k0: u32, m: u32, k: u32) {
    if row < m {
        tile_load(a, x, row * k + k0, k, m - row, k - k0);
        tile_dot(acc, a, b);
    }
}

/// Rows `row ..` of `y` (`[m, n]`) from column `col0` = `acc`.
#[function]
fn store_rows(acc: Tile, y: &mut [f32], row: u32, col0: u32, m: u32, n: u32) {
    if row < m {
        tile_store(acc, y, row * n + col0, n, m - row, n - col0);
    }
}

/// `load_rows` for the four row blocks of `rows` rows from `row0` on.
#[function]
fn load_rows4(
    acc0: Tile,
    acc1: Tile,
    acc2: Tile,
    acc3: Tile,
    y: &[f32],
    row0: u32,
    rows: u32,
    col0: u32,
    m: u32,
    n: u32,
) {
    load_rows(acc0, y, row0, col0, m, n);
    load_rows(acc1, y, row0 + rows, col0, m, n);
    load_rows(acc2, y, row0 + 2 * rows, col0, m, n);
    load_rows(acc3, y, row0 + 3 * rows, col0, m, n);
}

/// `dot_rows` for the four row blocks of `rows` rows from `row0` on: one K step's block `b`
/// of the weight serves them all.
#[function]
fn dot_rows4(
    acc0: Tile,
    acc1: Tile,
    acc2: Tile,
    acc3: Tile,
    a: Tile,
    b: Tile,
    x: &[f32],
    row0: u32,
    rows: u32,
    k0: u32,
    m: u32,
    k: u32,
) {
    dot_rows(acc0, a, b, x, row0, k0, m, k);
    dot_rows(acc1, a, b, x, row0 + rows, k0, m, k);
    dot_rows(acc2, a, b, x, row0 + 2 * rows, k0, m, k);
    dot_rows(acc3, a, b, x, row0 + 3 * rows, k0, m, k);
}

/// `store_rows` for the four row blocks of `rows` rows from `row0` on.
#[function]
fn store_rows4(
    acc0: Tile,
    acc1: Tile,
    acc2: Tile,
    acc3: Tile,
    y: &mut [f32],
    row0: u32,
    rows: u32,
    col0: u32,
    m: u32,
    n: u32,
) {
    store_rows(acc0, y, row0, col0, m, n);
    store_rows(acc1, y, row0 + rows, col0, m, n);
    store_rows(acc2, y, row0 + 2 * rows, col0, m, n);
    store_rows(acc3, y, row0 + 3 * rows, col0, m, n);
}
