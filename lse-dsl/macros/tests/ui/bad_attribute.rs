use loom::kernel;

#[kernel(name = "ui.test", version = 1, workgroup = 300)]
fn k(out: &mut [f32]) {
    out[local_id()] = 1.0;
}

fn main() {}
