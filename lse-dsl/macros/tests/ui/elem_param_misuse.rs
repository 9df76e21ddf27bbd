use loom::kernel;

#[kernel(name = "ui.scale", version = 1, workgroup = 64, elem = [bf16, f32])]
fn scale<W>(w: &[W], out: &mut [f32], factor: W) {
    let i = local_id();
    out[i] = to_f32(w[i]);
}

fn main() {}
