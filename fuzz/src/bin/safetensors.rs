//! AFL++ target: `lse_runtime::fuzz_targets::safetensors` on each input.

fn main() {
    afl::fuzz!(|data: &[u8]| {
        lse_runtime::fuzz_targets::safetensors(data);
    });
}
