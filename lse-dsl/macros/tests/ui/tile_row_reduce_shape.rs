use loom::kernel;

#[kernel(name = "ui.test", version = 1, workgroup = 64)]
fn k(x: &[f32], out: &mut [f32]) {
    let t = tile::<f32, 16, 32>();
    let m = tile::<f32, 16, 2>();
    tile_load(t, x, 0, 32, 16, 32);
    tile_row_max(m, t);
    tile_store(m, out, 0, 2, 16, 2);
}

fn main() {}
