//! AFL++ target: `lse_runtime::fuzz_targets::token_ids` on each input.

fn main() {
    afl::fuzz!(|data: &[u8]| {
        lse_runtime::fuzz_targets::token_ids(data);
    });
}
