//! `attention.output_gate`: Qwen3.5's sigmoid output gate, `o *= sigmoid(gate)`, applied to
//! the attention output before the o projection. The gate is the second half of each head's
//! `[q | gate]` pair in the q projection's rows, read in place.

use loom::kernel;

/// `p`: the q projection `[t, heads, 2, head_dim]`; `o`: `[t, heads, head_dim]`.
/// Grid: x = heads, y = t.
#[kernel(name = "attention.output_gate", version = 1, workgroup = 64)]
fn output_gate(
    p: &[f32; num_groups_y() * num_groups() * 2 * head_dim],
    o: &mut [f32; num_groups_y() * num_groups() * head_dim],
    head_dim: u32,
) {
    for c in 0..(head_dim + group_size() - 1) / group_size() {
        if c * group_size() + local_id() < head_dim {
            let at = (group_id_y() * num_groups() + group_id()) * head_dim
                + c * group_size()
                + local_id();
            o[at] = o[at]
                * sigmoid(
                    p[(group_id_y() * num_groups() + group_id()) * 2 * head_dim
                        + head_dim
                        + c * group_size()
                        + local_id()],
                );
        }
    }
}
