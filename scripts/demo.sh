#!/usr/bin/env bash
# The built-in default: score the start of wikitext-2's test set on the shipped tiny
# Qwen3.5-architecture model, then compare two other configurations against the first by
# KL divergence, and make an HTML report of the three. Uses nothing outside this repository.
# Usage: scripts/demo.sh [OUTPUT_DIR]   (default: a new directory under /tmp, kept)
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
source scripts/env.sh
cargo build --release --locked -p lse-cli
lse=target/release/lse
model=tests/data/models/big_vocab_bf16
out=${1:-$(mktemp -d "${TMPDIR:-/tmp}/lse-demo.XXXXXX")}
mkdir -p "$out"
head -c 20000 data/wikitext-2-raw/wiki.test.raw > "$out/sample.txt"
common=(--model "$model" --perplexity "$out/sample.txt" --perplexity-ctx 512 --perplexity-chunks 4
    --perplexity-token-stats)

echo "== base: f32 KV cache, dense attention, on the cpu device (generated Rust kernels)"
"$lse" perplexity "${common[@]}" --pool cpu --kv-cache-dtype f32 --FlashPrefillV2=off \
    --perplexity-kld-base-out "$out/base.kld" --perplexity-output "$out/base.json"

echo
echo "== bf16 KV cache on the host device (LLVM-compiled kernels), against the base"
"$lse" perplexity "${common[@]}" --pool host --kv-cache-dtype bf16 --FlashPrefillV2=off \
    --perplexity-kld "$out/base.kld" --perplexity-output "$out/bf16.json"

echo
echo "== FlashPrefill V2 forced sparse (alpha 1, 64-token blocks, no forced blocks), against the base"
"$lse" perplexity "${common[@]}" --pool host --kv-cache-dtype bf16 --FlashPrefillV2=on \
    --prefill-attention-scale 1 --flashprefill-block-size 64 --flashprefill-sink-blocks 0 \
    --flashprefill-window-blocks 1 --flashprefill-last-full-blocks 0 \
    --perplexity-kld "$out/base.kld" --perplexity-output "$out/fp2.json"

echo
echo "== report"
"$lse" report "$out/base.json" "$out/bf16.json" "$out/fp2.json" --output "$out/report.html"
echo
echo "JSON reports: $out/base.json, $out/bf16.json, $out/fp2.json"
echo "HTML report:  $out/report.html (one self-contained file; open it in a browser)"
