use loom::kernel;

#[kernel(name = "ui.test", version = 1, workgroup = 64)]
fn k(q: &[i32], out: &mut [i32]) {
    let a = tile::<i8, 16, 32>();
    let b = tile::<u8, 32, 16>();
    let sc = tile::<i32, 16, 16>();
    let acc = tile::<i32, 16, 16>();
    tile_load(a, q, 0, 32, 16, 32);
    tile_load(b, q, 0, 16, 32, 16);
    tile_load(sc, q, 0, 16, 16, 16);
    tile_dot_scaled(acc, a, b, sc);
    tile_store(acc, out, 0, 16, 16, 16);
}

fn main() {}
