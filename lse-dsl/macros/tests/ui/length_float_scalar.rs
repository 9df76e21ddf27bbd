// A declared buffer length uses only u32 scalar parameters: not an f32 one.
use loom::kernel;

#[kernel(name = "ui.test", version = 1, workgroup = 64)]
fn k(x: &[f32; n * s], out: &mut [f32; n], n: u32, s: f32) {
    let i = local_id();
    if i < n {
        out[i] = x[i] * s;
    }
}

fn main() {}
