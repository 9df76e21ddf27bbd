//! AFL++ target: `lse_runtime::fuzz_targets::gguf` on each input.

fn main() {
    afl::fuzz!(|data: &[u8]| {
        lse_runtime::fuzz_targets::gguf(data);
    });
}
