use loom::kernel;

#[kernel(name = "ui.test", version = 1, workgroup = 64)]
fn k(a: &[f16], out: &mut [f32]) {
    let i = local_id();
    out[i] = exp(a[i]);
}

fn main() {}
