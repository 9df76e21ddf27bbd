use loom::kernel;

#[kernel(name = "ui.test", version = 1, workgroup = 64)]
fn k(x: &[f32], out: &mut [f32], n: u32) {
    if local_id() < n {
        prefetch(x, 0, 64);
    }
    out[local_id()] = x[local_id()];
}

fn main() {}
