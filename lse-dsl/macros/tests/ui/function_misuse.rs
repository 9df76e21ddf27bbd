use loom::{function, kernel};

/// A function may not write memory.
#[function]
fn clear(w: &mut [f32], i: u32) -> f32 {
    0.0
}

#[loom::function]
fn scaled(v: f32, s: u32) -> f32 {
    v * s
}

#[kernel(name = "ui.function_misuse", version = 1, workgroup = 64)]
fn scale(x: &[f32], out: &mut [f32]) {
    out[local_id()] = scaled(x[local_id()], 2);
}

fn main() {}
