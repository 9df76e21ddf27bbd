// A declared buffer length names parameters of the kernel only.
use loom::kernel;

#[kernel(name = "ui.test", version = 1, workgroup = 64)]
fn k(x: &[f32; rows * d], d: u32) {
    let i = local_id();
    if i < d {
        let v = x[i];
    }
}

fn main() {}
