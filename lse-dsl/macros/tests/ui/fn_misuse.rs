use loom::kernel;

#[kernel(name = "ui.fn_misuse", version = 1, workgroup = 64)]
fn halves(w: &[u32], out: &mut [f32]) {
    fn half_at(w: &[u32], o: u32) -> f32 {
        f16_to_f32(f16_from_bits(w[o / 4] >> (o % 4 * 8)))
    }
    fn twice(v: f32) -> f32 {
        v * 2
    }
    out[local_id()] = twice(half_at(w, 2 * local_id()));
}

fn main() {}
