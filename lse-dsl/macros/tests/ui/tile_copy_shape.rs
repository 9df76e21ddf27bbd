use loom::kernel;

#[kernel(name = "ui.test", version = 1, workgroup = 64)]
fn k(x: &[f32], out: &mut [f32]) {
    let s = tile::<f32, 16, 16>();
    let p = tile::<bf16, 16, 8>();
    tile_load(s, x, 0, 16, 16, 16);
    tile_copy(p, s);
    tile_store(p, out, 0, 8, 16, 8);
}

fn main() {}
