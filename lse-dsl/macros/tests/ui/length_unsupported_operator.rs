// A declared buffer length is written with `+ - * /`, `min` and `max` only.
use loom::kernel;

#[kernel(name = "ui.test", version = 1, workgroup = 64)]
fn k(out: &mut [f32; n << 2], n: u32) {
    let i = local_id();
    if i < n {
        out[i] = 1.0;
    }
}

fn main() {}
