//! AFL++ target: `lse_runtime::fuzz_targets::config_json` on each input.

fn main() {
    afl::fuzz!(|data: &[u8]| {
        lse_runtime::fuzz_targets::config_json(data);
    });
}
