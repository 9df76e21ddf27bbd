use loom::kernel;

#[kernel(name = "ui.test", version = 1, workgroup = 64)]
fn k(q: &[u32], out: &mut [f32]) {
    let codes = shared::<u32>(256);
    let t = tile::<f32, 16, 16>();
    codes[local_id()] = q[local_id()];
    tile_load(t, codes, 0, 16, 16, 16);
    tile_store(t, out, 0, 16, 16, 16);
}

fn main() {}
