use loom::kernel;

#[kernel(name = "ui.test", version = 1, workgroup = 64)]
fn k(q: &[i32], s: &[f32], out: &mut [f32]) {
    let a = tile::<i8, 16, 32>();
    let b = tile::<u8, 32, 16>();
    let offset = tile::<f32, 16, 1>();
    let dx = tile::<f32, 16, 1>();
    let dw = tile::<f32, 16, 1>();
    let acc = tile::<f32, 16, 16>();
    tile_load(a, q, 0, 32, 16, 32);
    tile_load(b, q, 0, 16, 32, 16);
    tile_load(offset, s, 0, 1, 16, 1);
    tile_load(dx, s, 0, 1, 16, 1);
    tile_load(dw, s, 0, 1, 16, 1);
    tile_dot_dequant(acc, a, b, offset, dx, dw);
    tile_store(acc, out, 0, 16, 16, 16);
}

fn main() {}
