use loom::kernel;

#[kernel(name = "ui.test", version = 1, workgroup = 64)]
fn k(x: &[f32], out: &mut [f32]) {
    let w = shared::<f32>(64);
    w[local_id()] = x[local_id()];
    prefetch(w, 0, 64);
    out[local_id()] = w[local_id()];
}

fn main() {}
