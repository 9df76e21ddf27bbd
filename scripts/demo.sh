#!/usr/bin/env bash
# The built-in default: score the start of wikitext-2's test set on the shipped tiny
# Qwen3.5-architecture model, then compare a second configuration against the first by
# KL divergence. Uses nothing outside this repository.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
source scripts/env.sh
cargo build --release --locked -p lse-cli
lse=target/release/lse
model=tests/data/models/big_vocab_bf16
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
head -c 20000 data/wikitext-2-raw/wiki.test.raw > "$work/sample.txt"
common=(--model "$model" --perplexity "$work/sample.txt" --perplexity-ctx 128 --perplexity-chunks 8 --quiet)

echo "== base: f32 KV cache on the cpu device (generated Rust kernels)"
"$lse" perplexity "${common[@]}" --pool cpu --kv-cache-dtype f32 \
    --perplexity-kld-base-out "$work/base.kld" --perplexity-output "$work/base.json"
cat "$work/base.json"

echo "== comparison: bf16 KV cache on the host device (LLVM-compiled kernels), against the base"
"$lse" perplexity "${common[@]}" --pool host --kv-cache-dtype bf16 --perplexity-kld "$work/base.kld"
