use loom::kernel;

#[kernel(name = "ui.test", version = 1, workgroup = 64)]
fn k(x: &[f32], out: &mut [f32]) {
    let t = tile::<bf16, 16, 16>();
    let f = tile::<f32, 16, 16>();
    tile_load_pairs(t, x, 0, 32, 16, 16);
    tile_copy(f, t);
    tile_store(f, out, 0, 16, 16, 16);
}

fn main() {}
