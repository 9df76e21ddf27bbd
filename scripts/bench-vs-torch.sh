#!/usr/bin/env bash
# `lse perplexity` against a PyTorch/transformers bf16 forward over the same tokens and
# chunks, in one run on one machine: tokens/s of each, their ratio, both peak RSS and both
# perplexities. By default on the Qwen3.5-0.8B-shaped random model (made once with
# `lse synthetic-model --shape qwen35-0.8b` when the default directory has none),
# wiki.test.raw, 2 threads: ctx 512 with 4 chunks, then ctx 8192 in one pass. A MODEL_DIR
# given must hold a model (e.g. `lse synthetic-model --shape qwen35-35b-a3b-4l --out DIR
# --tokenizer data/qwen35-tokenizer`).
#
#   scripts/bench-vs-torch.sh [MODEL_DIR]
#
# Environment: PYTHON (a Python outside the repository with torch and transformers; default
# /work/torchvenv/bin/python, else python3), THREADS (2), TEXT (data/wikitext-2-raw/wiki.test.raw),
# RUNS ("512:4 8192:1", ctx:chunks pairs), ROUNDS (1: with R > 1 each run is repeated R times,
# lse and PyTorch alternating, and a line after its rows gives both medians and the ratio of
# medians, for machines whose speed changes between runs), LSE_ARGS (more `lse perplexity`
# options, split on spaces, e.g. "--gemm-activations weight-dtype"). Without torch the PyTorch
# column says so.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
THREADS="${THREADS:-2}"
TEXT="${TEXT:-data/wikitext-2-raw/wiki.test.raw}"
RUNS="${RUNS:-512:4 8192:1}"
ROUNDS="${ROUNDS:-1}"
read -r -a lse_args <<< "${LSE_ARGS:-}"
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || { echo "bench-vs-torch: ROUNDS must be a positive integer, not '$ROUNDS'" >&2; exit 1; }
PYTHON="${PYTHON:-/work/torchvenv/bin/python}"
[ -x "$PYTHON" ] || PYTHON=python3
MODEL="${1:-${TMPDIR:-/tmp}/lse-bench-qwen35-0.8b}"
for tool in jq /usr/bin/time; do
    command -v "$tool" > /dev/null || { echo "bench-vs-torch: needs $tool" >&2; exit 1; }
done

cargo build --release --locked -p lse-cli >&2
LSE=target/release/lse
if [ ! -f "$MODEL/config.json" ]; then
    if [ $# -gt 0 ]; then
        echo "bench-vs-torch: $MODEL has no config.json; make a model there first (lse synthetic-model --shape ... --out $MODEL --tokenizer data/qwen35-tokenizer)" >&2
        exit 1
    fi
    echo "making the 0.8B-shaped model in $MODEL" >&2
    "$LSE" synthetic-model --shape qwen35-0.8b --out "$MODEL" --tokenizer data/qwen35-tokenizer >&2
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# Peak RSS in MB from `/usr/bin/time -v` output.
peak_mb() { awk '/Maximum resident set size/ {printf "%.0f", $NF / 1024}' "$1"; }
# The median of the numbers given as arguments.
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

printf '%-6s %-6s | %-12s %-9s %-12s | %-12s %-9s %-12s | %s\n' ctx chunks \
    "lse tok/s" "lse MB" "lse PPL" "torch tok/s" "torch MB" "torch PPL" "lse / torch"
for run in $RUNS; do
    ctx="${run%%:*}"
    chunks="${run##*:}"
    lse_all=(); torch_all=()
    for _ in $(seq "$ROUNDS"); do
        RAYON_NUM_THREADS="$THREADS" /usr/bin/time -v -o "$work/lse.time" "$LSE" perplexity \
            --model "$MODEL" --perplexity "$TEXT" --perplexity-ctx "$ctx" \
            --perplexity-chunks "$chunks" --batch-size "$ctx" --ubatch-size "$ctx" \
            --kv-len "$ctx" "${lse_args[@]}" --perplexity-output "$work/lse.json" > /dev/null 2> "$work/lse.err" \
            || { cat "$work/lse.err" >&2; exit 1; }
        lse_tps="$(jq -r '.prefill_tokens_per_second' "$work/lse.json")"
        lse_ppl="$(jq -r '.perplexity' "$work/lse.json")"
        lse_mb="$(peak_mb "$work/lse.time")"
        if /usr/bin/time -v -o "$work/torch.time" "$PYTHON" scripts/torch-perplexity.py \
            --model "$MODEL" --text "$TEXT" --ctx "$ctx" --chunks "$chunks" --threads "$THREADS" \
            > "$work/torch.json" 2> "$work/torch.err"; then
            torch_tps="$(jq -r '.prefill_tokens_per_second * 10 | round / 10' "$work/torch.json")"
            torch_ppl="$(jq -r '.perplexity * 10000 | round / 10000' "$work/torch.json")"
            torch_mb="$(peak_mb "$work/torch.time")"
            ratio="$(jq -rn --argjson a "$lse_tps" --argjson b "$torch_tps" '$a / $b * 100 | round / 100')"
        else
            torch_tps="-"; torch_ppl="-"; torch_mb="-"
            ratio="no torch: $(jq -r '.error // empty' "$work/torch.json" 2>/dev/null || true)$(tail -1 "$work/torch.err")"
        fi
        printf '%-6s %-6s | %-12.1f %-9s %-12.4f | %-12s %-9s %-12s | %s\n' "$ctx" "$chunks" \
            "$lse_tps" "$lse_mb" "$lse_ppl" "$torch_tps" "$torch_mb" "$torch_ppl" "$ratio"
        lse_all+=("$lse_tps")
        [ "$torch_tps" = - ] || torch_all+=("$torch_tps")
    done
    if [ "$ROUNDS" -gt 1 ]; then
        lse_med="$(median "${lse_all[@]}")"
        line="  $ROUNDS rounds of ctx $ctx: lse median $(printf '%.1f' "$lse_med") tok/s"
        if [ "${#torch_all[@]}" -eq "$ROUNDS" ]; then
            torch_med="$(median "${torch_all[@]}")"
            line+=", PyTorch median $(printf '%.1f' "$torch_med"), ratio of medians"
            line+=" $(jq -rn --argjson a "$lse_med" --argjson b "$torch_med" '$a / $b * 100 | round / 100')"
        fi
        echo "$line"
    fi
done
