use loom::kernel;

#[kernel(name = "ui.test", version = 1, workgroup = 64)]
fn k(x: &[f32], out: &mut [f32], n: u32, s: f32) {
    let lid = local_id();
    let mut acc = 0.0;
    for j in (lid..n).step_by(group_size()) {
        acc += reduce_sum(x[j]);
    }
    out[lid] = acc;
}

fn main() {}
