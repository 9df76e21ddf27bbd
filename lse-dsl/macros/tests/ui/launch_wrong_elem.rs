// A typed launcher refuses a buffer of the wrong element type.
use loom::kernel;

#[kernel(name = "ui.test", version = 1, workgroup = 64)]
fn k(x: &[f32], out: &mut [f32], n: u32, s: f32) {
    let i = local_id();
    if i < n {
        out[i] = x[i] * s;
    }
}

fn main() {
    let x = vec![0u32; 4];
    let mut out = vec![0.0f32; 4];
    let _ = k::Args {
        x: &x,
        out: &mut out,
        n: 4,
        s: 2.0,
    };
}
