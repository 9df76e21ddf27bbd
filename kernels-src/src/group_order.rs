//! LOOM functions (`lse-dsl/LOOM.md`, "Functions") for the order in which the GEMMs (`gemm.xwt`,
//! `gemm.xwt_exact`, `gemm.xwt_bf16x3` and the `gemm_swiglu` kernels) take their workgroups: grid x
//! counts row blocks of `y`, grid y column blocks, and the workgroups run in groups of 8 row
//! blocks, each group running all its workgroups of one column block before the next, row blocks
//! fastest inside a group. So a column block's weight rows serve up to 8 row blocks from cache
//! while the group's activations stay in L3 (rows fastest through the whole matrix streamed all of
//! `x` from memory once per column block at M = 8192; up to 8 row blocks, as at M = 512, it is the
//! grid's own order). The `_in(g)` forms take groups of `g` row blocks: `gemm.xwt_bf16x3`, whose
//! activations are three times as large, takes groups of one, so that a block's activations stay in
//! L2 instead.

use loom::function;

/// The workgroup's place in the launch order: `group_id()` fastest, then `group_id_y()`.
#[function]
fn launch_index() -> u32 {
    group_id() + num_groups() * group_id_y()
}

/// The group of `g` row blocks the workgroup's row block lies in.
#[function]
fn row_group(g: u32) -> u32 {
    launch_index() / (g * num_groups_y())
}

/// The workgroup's place in its group of `g` row blocks, row blocks fastest.
#[function]
fn in_row_group(g: u32) -> u32 {
    launch_index() - row_group(g) * (g * num_groups_y())
}

/// The row blocks of the workgroup's group: `g`, or fewer in the last group.
#[function]
fn row_group_len(g: u32) -> u32 {
    min(g, num_groups() - row_group(g) * g)
}

/// The row block of `y` the workgroup owns, in groups of `g` row blocks.
#[function]
fn grouped_row_block_in(g: u32) -> u32 {
    row_group(g) * g + in_row_group(g) % row_group_len(g)
}

/// The column block of `y` the workgroup owns, in groups of `g` row blocks.
#[function]
fn grouped_col_block_in(g: u32) -> u32 {
    in_row_group(g) / row_group_len(g)
}

/// The row block of `y` the workgroup owns (groups of 8).
#[function]
fn grouped_row_block() -> u32 {
    grouped_row_block_in(8)
}

/// The column block of `y` the workgroup owns (groups of 8).
#[function]
fn grouped_col_block() -> u32 {
    grouped_col_block_in(8)
}
