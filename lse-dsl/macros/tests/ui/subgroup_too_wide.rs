use loom::kernel;

#[kernel(name = "ui.test", version = 1, workgroup = 32, subgroup = 64)]
fn k(x: &[f32], out: &mut [f32]) {
    let i = local_id();
    out[i] = subgroup_sum(x[i]);
}

fn main() {}
