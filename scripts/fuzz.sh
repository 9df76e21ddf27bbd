#!/usr/bin/env bash
# Coverage-guided fuzzing of every parser of untrusted bytes (lse_runtime::fuzz_targets) with
# AFL++ on stable Rust, through the afl crate: one AFL++ process per target, in parallel.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]     default: 1800 seconds, every target
#
# Targets: kld_base, config_json, token_ids, safetensors, shard_index, gguf. Seeds:
# fuzz/corpus/<target>.
# Findings land in fuzz/out/<target>/default/{crashes,hangs}; copy each into the corpus (the
# test suite replays it, tests/fuzz_parsers.rs) once fixed. Needs `cargo install cargo-afl`
# (done here when missing; it builds AFL++ on first use).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
secs="${1:-1800}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(kld_base config_json token_ids safetensors shard_index gguf)
fi
command -v cargo-afl >/dev/null || cargo install cargo-afl --locked
export CARGO_TARGET_DIR="${LSE_FUZZ_TARGET_DIR:-$PWD/fuzz/target}"
(cd fuzz && cargo afl build --release --locked)
out="${LSE_FUZZ_OUT:-$PWD/fuzz/out}"
mkdir -p "$out"
# No status screen, no CPU pinning (the machine is shared), no core_pattern demands.
export AFL_NO_UI=1 AFL_NO_AFFINITY=1 AFL_SKIP_CPUFREQ=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1
for t in "${targets[@]}"; do
    # The log keeps AFL++'s messages, not its line per test case.
    cargo afl fuzz -i "fuzz/corpus/$t" -o "$out/$t" -m 4096 -V "$secs" \
        "$CARGO_TARGET_DIR/release/$t" 2>&1 | grep --line-buffered -v 'Fuzzing test case' \
        >"$out/$t.log" &
done
wait
status=0
for t in "${targets[@]}"; do
    stats="$out/$t/default/fuzzer_stats"
    execs=$(awk -F' *: *' '$1=="execs_done"{print $2}' "$stats")
    crashes=$(awk -F' *: *' '$1=="saved_crashes"{print $2}' "$stats")
    hangs=$(awk -F' *: *' '$1=="saved_hangs"{print $2}' "$stats")
    runtime=$(awk -F' *: *' '$1=="run_time"{print $2}' "$stats")
    echo "$t: ${runtime}s, $execs executions, $crashes crashes, $hangs hangs"
    if [ "$crashes" != 0 ] || [ "$hangs" != 0 ]; then
        status=1
    fi
done
exit $status
