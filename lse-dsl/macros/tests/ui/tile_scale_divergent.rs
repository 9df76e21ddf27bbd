use loom::kernel;

#[kernel(name = "ui.test", version = 1, workgroup = 64)]
fn k(x: &[f32], out: &mut [f32]) {
    let t = tile::<f32, 16, 16>();
    tile_load(t, x, 0, 16, 16, 16);
    tile_scale(t, x[local_id()]);
    tile_store(t, out, 0, 16, 16, 16);
}

fn main() {}
