use loom::kernel;

#[kernel(name = "ui.rows", version = 1, workgroup = 64)]
fn rows<const BM: u32>(out: &mut [f32]) {
    out[local_id()] = 1.0;
}

fn main() {}
