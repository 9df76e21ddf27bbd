use loom::kernel;

#[kernel(name = "ui.test", version = 1, workgroup = 64)]
fn k(x: &[f32], out: &mut [f32]) {
    let a = tile::<bf16, 16, 32>();
    let b = tile::<f16, 32, 16>();
    let acc = tile::<f32, 16, 16>();
    tile_load(a, x, 0, 32, 16, 32);
    tile_dot(acc, a, b);
    tile_store(acc, out, 0, 16, 16, 16);
}

fn main() {}
