#!/usr/bin/env bash
# FlashPrefill V2's quality report: sparse prefill attention against a dense base, per context
# length and pass size, for several alphas, with the default forced blocks and with them reduced.
#
#   scripts/flashprefill-quality.sh [MODEL_DIR] [TEXT]
#
# MODEL_DIR: the model to score; by default a Qwen3.5-0.8B-shaped random model written to
# target/q08 (random weights give flat attention, so use a trained model such as the one
# tests/goldens/train_long_context.py writes). TEXT: the text to score; by default
# MODEL_DIR/heldout.txt when the model has one (the trained model's held-out 20% of
# wiki.test.raw), else wikitext-2's wiki.test.raw.
#
# For each context length and pass size, one dense run records the base
# (--perplexity-kld-base-out); every sparse run is compared with it. Columns: the key-block
# density FlashPrefill V2 kept, mean KLD, KLD p99, same top, PPL ratio, and the run's wall time
# against the dense run's (the whole run: model, head and statistics included).
#
# Environment: CTXS (default "4096 8192"), PASSES (tokens per prefill pass; "whole" is one pass
# per chunk; default "1024 whole"), ALPHAS (default "0.05 0.1 0.2 0.5 0.9"), TOKENS (score the
# first TOKENS / ctx chunks of the text; default every chunk), REDUCED (the reduced forced-block
# options, default one sink block, the diagonal block only and no dense tail).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
model=${1:-target/q08}
text=${2:-}
if [ -z "$text" ]; then
    if [ -f "$model/heldout.txt" ]; then text=$model/heldout.txt; else text=data/wikitext-2-raw/wiki.test.raw; fi
fi
reduced=${REDUCED:---flashprefill-sink-blocks 1 --flashprefill-window-blocks 1 --flashprefill-last-full-blocks 0}
cargo build --release --locked -p lse-cli
lse=target/release/lse
if [ ! -f "$model/config.json" ]; then
    "$lse" synthetic-model --shape qwen35-0.8b --out "$model" --tokenizer data/qwen35-tokenizer
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "model $model, text $text; reduced forced blocks: $reduced"
echo
echo "| ctx | pass | forced blocks | alpha | key-block density | mean KLD | KLD p99 | same top | PPL ratio | time vs dense |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for ctx in ${CTXS:-4096 8192}; do
    for pass in ${PASSES:-1024 whole}; do
        batch=$pass
        if [ "$pass" = whole ]; then batch=$ctx; fi
        chunk_opts=()
        if [ -n "${TOKENS:-}" ]; then chunk_opts=(--perplexity-chunks "$((TOKENS / ctx))"); fi
        common=(--model "$model" --perplexity "$text" --perplexity-ctx "$ctx" "${chunk_opts[@]}"
            --batch-size "$batch" --ubatch-size "$batch" --kv-len "$ctx")
        "$lse" perplexity "${common[@]}" --quiet --FlashPrefillV2=off \
            --perplexity-kld-base-out "$work/dense.kld" --perplexity-output "$work/dense.json"
        dense_seconds=$(jq .elapsed_seconds "$work/dense.json")
        jq -r --arg ctx "$ctx" --arg pass "$pass" \
            '"| \($ctx) | \($pass) | dense | - | 100% | - | - | - | - | 1.00 (\(.elapsed_seconds * 10 | round / 10) s, PPL \(.perplexity * 1000 | round / 1000)) |"' \
            "$work/dense.json"
        for forced in default reduced; do
            opts=()
            if [ "$forced" = reduced ]; then read -ra opts <<<"$reduced"; fi
            for alpha in ${ALPHAS:-0.05 0.1 0.2 0.5 0.9}; do
                # The key-block density is not a JSON field: the CLI prints it on stderr.
                density=$("$lse" perplexity "${common[@]}" --FlashPrefillV2=on \
                    --prefill-attention-scale "$alpha" "${opts[@]}" --perplexity-kld "$work/dense.kld" \
                    --perplexity-output "$work/fp2.json" 2>&1 >/dev/null |
                    sed -n 's/.*key-block density \(.*\)$/\1/p' | tail -1)
                read -r kld p99 same ratio seconds < <(jq -r \
                    '"\(.kld.mean_kld) \(.kld.kld_p99) \(.kld.same_top) \(.kld.perplexity_ratio) \(.elapsed_seconds)"' \
                    "$work/fp2.json")
                printf '| %s | %s | %s | %s | %s | %.2e | %.2e | %.4f | %.5f | %.2f |\n' "$ctx" "$pass" \
                    "$forced" "$alpha" "$density" "$kld" "$p99" "$same" "$ratio" \
                    "$(echo "$seconds / $dense_seconds" | bc -l)"
            done
        done
    done
done
