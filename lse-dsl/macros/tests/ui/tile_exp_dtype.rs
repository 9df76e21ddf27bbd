use loom::kernel;

#[kernel(name = "ui.test", version = 1, workgroup = 64)]
fn k(x: &[f32], out: &mut [f32]) {
    let p = tile::<bf16, 16, 16>();
    tile_load(p, x, 0, 16, 16, 16);
    tile_exp(p);
    tile_store(p, out, 0, 16, 16, 16);
}

fn main() {}
