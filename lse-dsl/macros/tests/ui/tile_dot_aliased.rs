use loom::kernel;

#[kernel(name = "ui.test", version = 1, workgroup = 64)]
fn k(x: &[f32], out: &mut [f32]) {
    let acc = tile::<f32, 16, 16>();
    tile_load(acc, x, 0, 16, 16, 16);
    tile_dot(acc, acc, acc);
    tile_store(acc, out, 0, 16, 16, 16);
}

fn main() {}
