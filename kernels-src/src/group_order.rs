//! LOOM functions (`lse-dsl/LOOM.md`, "Functions") for the order in which the GEMMs
//! (`gemm.xwt`, `gemm.xwt_exact` and the two `gemm_swiglu` kernels) take their workgroups:
//! grid x counts row blocks of `y`, grid y column blocks, and the workgroups run in groups of
//! 8 row blocks, each group running all its workgroups of one column block before the next,
//! row blocks fastest inside a group. So a column block's weight rows serve up to 8 row
//! blocks from cache while the group's activations stay in L3 (rows fastest through the
//! whole matrix streamed all of `x` from memory once per column block at M = 8192; up to 8
//! row blocks, as at M = 512, it is the grid's own order).

use loom::function;

/// The workgroup's place in the launch order: `group_id()` fastest, then `group_id_y()`.
#[function]
fn launch_index() -> u32 {
    group_id() + num_groups() * group_id_y()
}

/// The group of 8 row blocks the workgroup's row block lies in.
#[function]
fn row_group() -> u32 {
    launch_index() / (8 * num_groups_y())
}

/// The workgroup's place in its group, row blocks fastest.
#[function]
fn in_row_group() -> u32 {
    launch_index() - row_group() * (8 * num_groups_y())
}

/// The row blocks of the workgroup's group: 8, or fewer in the last group.
#[function]
fn row_group_len() -> u32 {
    min(8, num_groups() - row_group() * 8)
}

/// The row block of `y` the workgroup owns.
#[function]
fn grouped_row_block() -> u32 {
    row_group() * 8 + in_row_group() % row_group_len()
}

/// The column block of `y` the workgroup owns.
#[function]
fn grouped_col_block() -> u32 {
    in_row_group() / row_group_len()
}
