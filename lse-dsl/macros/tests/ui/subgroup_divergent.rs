use loom::kernel;

#[kernel(name = "ui.test", version = 1, workgroup = 32, subgroup = 8)]
fn k(x: &[f32], out: &mut [f32]) {
    let i = local_id();
    if i < 4 {
        out[i] = subgroup_max(x[i]);
    }
}

fn main() {}
