#!/usr/bin/env bash
# FlashPrefill V2's quality report: KL divergence of sparse prefill attention against a dense
# base on wikitext-2, at ctx 4096 (one pass per chunk), for alpha 0.05, 0.1 and 0.2.
#
#   scripts/flashprefill-quality.sh [MODEL_DIR] [CHUNKS] [CTX]
#
# MODEL_DIR defaults to a Qwen3.5-0.8B-shaped random model written to target/q08 (seed 0,
# Qwen3.5 tokenizer); CHUNKS defaults to 2, CTX to 4096. Prints one table row per alpha.
# ALPHAS (environment) replaces the alphas; FP2_OPTS adds options to the sparse runs, e.g.
# FP2_OPTS="--flashprefill-sink-blocks 0 --flashprefill-window-blocks 1" to drop forced blocks.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
model=${1:-target/q08}
chunks=${2:-2}
ctx=${3:-4096}
cargo build --release --locked -p lse-cli
lse=target/release/lse
if [ ! -f "$model/config.json" ]; then
    "$lse" synthetic-model --shape qwen35-0.8b --out "$model" --tokenizer data/qwen35-tokenizer
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common=(--model "$model" --perplexity data/wikitext-2-raw/wiki.test.raw --perplexity-ctx "$ctx"
    --perplexity-chunks "$chunks" --batch-size "$ctx" --ubatch-size "$ctx" --kv-len "$ctx")

"$lse" perplexity "${common[@]}" --quiet --FlashPrefillV2=off \
    --perplexity-kld-base-out "$work/dense.kld" --perplexity-output "$work/dense.json"
field() { sed -n "s/.*\"$2\": *\\([^,}]*\\).*/\\1/p" "$1" | head -1; }
echo "model $model, ctx $ctx, $chunks chunks, sparse options: ${FP2_OPTS:-defaults}; dense: PPL $(field "$work/dense.json" perplexity), $(field "$work/dense.json" prefill_tokens_per_second) prefill tokens/s"
echo
echo "| alpha | block density | mean KLD | same top | PPL ratio | prefill tokens/s |"
echo "|---|---|---|---|---|---|"
for alpha in ${ALPHAS:-0.05 0.1 0.2}; do
    density=$("$lse" perplexity "${common[@]}" --FlashPrefillV2=on \
        --prefill-attention-scale "$alpha" ${FP2_OPTS:-} --perplexity-kld "$work/dense.kld" \
        --perplexity-output "$work/fp2.json" 2>&1 >/dev/null |
        sed -n 's/.*key-block density \(.*\)$/\1/p' | tail -1)
    echo "| $alpha | $density | $(field "$work/fp2.json" mean_kld) | $(field "$work/fp2.json" same_top) | $(field "$work/fp2.json" perplexity_ratio) | $(field "$work/fp2.json" prefill_tokens_per_second) |"
done
