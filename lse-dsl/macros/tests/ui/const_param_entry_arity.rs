use loom::kernel;

#[kernel(
    name = "ui.blocks",
    version = 1,
    workgroup = 64,
    consts = [q8_0 = (32, 34), q4_k = (256, 144, 8)]
)]
fn blocks<const QK: u32, const BYTES: u32>(out: &mut [u32; QK * BYTES]) {
    out[local_id()] = QK;
}

fn main() {}
