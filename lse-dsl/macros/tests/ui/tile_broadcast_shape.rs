use loom::kernel;

#[kernel(name = "ui.test", version = 1, workgroup = 64)]
fn k(x: &[f32], out: &mut [f32]) {
    let t = tile::<f32, 16, 32>();
    let bias = tile::<f32, 2, 32>();
    tile_load(t, x, 0, 32, 16, 32);
    tile_load(bias, x, 0, 32, 2, 32);
    tile_add(t, bias);
    tile_store(t, out, 0, 32, 16, 32);
}

fn main() {}
