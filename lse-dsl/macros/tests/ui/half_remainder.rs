use loom::kernel;

#[kernel(name = "ui.test", version = 1, workgroup = 64)]
fn k(a: &[bf16], b: &[bf16], out: &mut [bf16]) {
    let i = local_id();
    out[i] = a[i] % b[i];
}

fn main() {}
