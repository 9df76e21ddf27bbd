use loom::kernel;

#[kernel(name = "ui.test", version = 1, workgroup = 64)]
fn k(x: &[f32], out: &mut [f32], n: u32) {
    for i in 0..n {
        let t = tile::<f32, 16, 16>();
        tile_load(t, x, i, 16, 16, 16);
        tile_store(t, out, i, 16, 16, 16);
    }
}

fn main() {}
