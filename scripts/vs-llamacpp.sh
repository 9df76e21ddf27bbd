#!/usr/bin/env bash
# `lse perplexity` against llama.cpp's `llama-perplexity` on the same GGUF files, text, windows
# and threads: perplexity (and the relative gap) and prefill tokens/s, one line per file.
#
#   LLAMA_CPP=/path/to/llama.cpp scripts/vs-llamacpp.sh FILE.gguf [FILE.gguf ...]
#
# LLAMA_CPP is a llama.cpp source tree built outside this repo (build/bin/llama-perplexity),
# e.g. the one the llama-cpp-python 0.3.36 sdist vendors, configured with -DGGML_NATIVE=OFF,
# the GGML_AVX512*/AVX2/FMA/F16C options on and the GGML_AMX_* options off (README,
# "GGUF checkpoints"). Settings: CTX (512), CHUNKS (8), THREADS (2), TEXT (wiki.test.raw),
# KV (f16, llama.cpp's default cache type; both tools get it), UBATCH (CTX: the rows of each
# forward pass, `--ubatch-size` / `-ub`; the batch is CTX), ROUNDS (1: each file's pair of runs;
# with more, the pairs repeat, LSE and llama.cpp alternating, a line per round and then one with
# both medians and the ratio of medians, for machines whose speed moves between runs). Both
# tools score ctx/2 tokens per chunk.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
source "$here/scripts/env.sh"
: "${LLAMA_CPP:?set LLAMA_CPP to a built llama.cpp source tree}"
CTX="${CTX:-512}"
CHUNKS="${CHUNKS:-8}"
THREADS="${THREADS:-2}"
TEXT="${TEXT:-$here/data/wikitext-2-raw/wiki.test.raw}"
KV="${KV:-f16}"
UBATCH="${UBATCH:-$CTX}"
ROUNDS="${ROUNDS:-1}"
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || { echo "ROUNDS: expected a positive integer, got '$ROUNDS'" >&2; exit 1; }
bin="$LLAMA_CPP/build/bin"
[ -x "$bin/llama-perplexity" ] || { echo "no $bin/llama-perplexity: build llama.cpp first" >&2; exit 1; }
cargo build --release --locked -p lse-cli >&2
lse="$here/target/release/lse"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
printf '%-28s %14s %14s %10s %12s %12s %7s\n' file lse_ppl llama_ppl rel_gap lse_tok/s llama_tok/s ratio
for f in "$@"; do
    : > "$out/rates"
    for _ in $(seq "$ROUNDS"); do
        RAYON_NUM_THREADS="$THREADS" "$lse" perplexity --model "$f" --perplexity "$TEXT" \
            --perplexity-ctx "$CTX" --perplexity-chunks "$CHUNKS" --batch-size "$CTX" \
            --ubatch-size "$UBATCH" --kv-len "$CTX" --kv-cache-dtype "$KV" --quiet \
            --perplexity-output "$out/lse.json"
        lse_ppl=$(jq .perplexity "$out/lse.json")
        lse_tps=$(jq .prefill_tokens_per_second "$out/lse.json")
        LD_LIBRARY_PATH="$bin" "$bin/llama-perplexity" -m "$f" -f "$TEXT" -c "$CTX" \
            --chunks "$CHUNKS" -b "$CTX" -ub "$UBATCH" -t "$THREADS" -tb "$THREADS" \
            -ctk "$KV" -ctv "$KV" > "$out/llama.log" 2>&1
        llama_ppl=$(sed -n 's/.*Final estimate: PPL = \([0-9.]*\).*/\1/p' "$out/llama.log")
        # llama-perplexity prints no throughput; its log lines carry timestamps (M.SS.mmm.uuu):
        # tokens over the time from "calculating perplexity" to "Final estimate", as LSE counts
        # prefill tokens over its whole scoring run.
        python3 - "$f" "$lse_ppl" "$llama_ppl" "$lse_tps" "$out/llama.log" "$((CTX * CHUNKS))" \
            "$out/rates" <<'EOF'
import os, sys
f, lp, cp, lt, log, n, rates = sys.argv[1:]
stamp = {}
for line in open(log, errors="replace"):
    for key in ("calculating perplexity", "Final estimate"):
        if key in line:
            m, s, ms, us = (int(x) for x in line.split()[0].split("."))
            stamp[key] = 60 * m + s + ms / 1e3 + us / 1e6
lp, cp, lt = float(lp), float(cp), float(lt)
ct = int(n) / (stamp["Final estimate"] - stamp["calculating perplexity"])
print(f"{os.path.basename(f):<28} {lp:14.6f} {cp:14.4f} {abs(lp - cp) / cp:10.2e} "
      f"{lt:12.1f} {ct:12.1f} {lt / ct:7.2f}")
with open(rates, "a") as out:
    print(lt, ct, file=out)
EOF
    done
    if [ "$ROUNDS" -gt 1 ]; then
        python3 - "$f" "$out/rates" <<'EOF'
import os, statistics, sys
f, rates = sys.argv[1:]
pairs = [tuple(map(float, line.split())) for line in open(rates)]
lt = statistics.median(p[0] for p in pairs)
ct = statistics.median(p[1] for p in pairs)
print(f"  {len(pairs)} rounds of {os.path.basename(f)}: lse median {lt:.1f} tok/s, "
      f"llama.cpp median {ct:.1f}, ratio of medians {lt / ct:.2f}")
EOF
    fi
done
