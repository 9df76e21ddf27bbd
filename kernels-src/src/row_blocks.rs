//! LOOM procedures (`lse-dsl/LOOM.md`, "Functions") for a workgroup that owns several row
//! blocks of `y = x · wᵀ` sharing each weight block it prepares (`gemm_quant`, `gemm_mlx`:
//! four 64 x 32 accumulators). Each reads, multiplies or writes one row block starting at
//! row `row`, and does nothing for a block from row `m` on (past the last row of `y`).

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
