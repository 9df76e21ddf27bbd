"""MLX quantized test checkpoints made by mlx-lm's own converter, and mlx-lm's log-probabilities
on them.

Writes under tests/data/mlx/:

* `wide-q4/`: `mlx_lm convert -q --q-bits 4 --q-group-size 64` (every Linear and the embedding
  4-bit, groups of 64);
* `wide-q8/`: `--q-bits 8 --q-group-size 32`;
* `wide-mixed/`: 4-bit groups of 64 by default, with per-module overrides written by mlx-lm
  into config.json's `quantization` (through convert's `quant_predicate`): the embedding 3-bit
  groups of 32, layer 0's `in_proj_qkv` 5-bit groups of 128, `in_proj_z` 2-bit groups of 32,
  `mlp.gate_proj` 8-bit groups of 32, layer 1's `mlp.down_proj` 6-bit groups of 64, the head
  6-bit groups of 128, and layer 1's `self_attn.v_proj` left unquantized (bf16).

Each directory holds config.json, model.safetensors, the tokenizer files and `golden.json`:
`token_ids` (the tokenizer's ids for the start of data/wikitext-2-raw/wiki.test.raw, the first
TOKENS of them), `logprobs` (mlx-lm's log-probability of token i+1 after tokens 0..=i, from
one forward pass over all of them; mlx-lm computes in the checkpoint's dtype, bf16, and the
log-softmax here is taken in f32 over its bf16 logits), `perplexity` (exp of their negated
mean), and `dequant`: one quantized matrix's first rows as `mx.dequantize` gives them (bf16,
widened to f32), stored little-endian in `dequant.f32`.

The source is the 2-layer, 256-wide Qwen3.5 model (one Gated DeltaNet layer, one attention
layer, a 512-token tokenizer) that make_gguf_models.py's `make_wide` writes as a Hugging Face
directory (`wide/` under its GGUF_WORK). mlx-lm reads it as model_type `qwen3_5` with the text
fields at the top level and picks the attention layers by `full_attention_interval`, so the
copy converted here gets those two fields (checked against `layer_types`).

Run (seconds, CPU):

    /path/to/mlx-venv/bin/python tests/goldens/make_mlx_models.py /path/to/GGUF_WORK/wide

Versions used for the committed files: Python 3.11, mlx 0.32.4, mlx-lm 0.32.2.
"""

import json
import math
import shutil
import sys
import tempfile
from pathlib import Path

import mlx.core as mx
import numpy as np
from mlx_lm import load
from mlx_lm.convert import convert

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "data" / "mlx"
TEXT = ROOT / "data" / "wikitext-2-raw" / "wiki.test.raw"
TOKENS = 100
DEQUANT_ROWS = 16

MIXED = {
    "language_model.model.embed_tokens": {"group_size": 32, "bits": 3, "mode": "affine"},
    "language_model.model.layers.0.linear_attn.in_proj_qkv": {"group_size": 128, "bits": 5, "mode": "affine"},
    "language_model.model.layers.0.linear_attn.in_proj_z": {"group_size": 32, "bits": 2, "mode": "affine"},
    "language_model.model.layers.0.mlp.gate_proj": {"group_size": 32, "bits": 8, "mode": "affine"},
    "language_model.model.layers.1.mlp.down_proj": {"group_size": 64, "bits": 6, "mode": "affine"},
    "language_model.lm_head": {"group_size": 128, "bits": 6, "mode": "affine"},
    "language_model.model.layers.1.self_attn.v_proj": False,
}


def mixed_predicate(path, _module):
    return MIXED.get(path, True)


# name, bits, group size, predicate, the tensor whose dequantization is stored
MODELS = [
    ("wide-q4", 4, 64, None, "language_model.model.layers.0.mlp.down_proj"),
    ("wide-q8", 8, 32, None, "language_model.model.layers.1.self_attn.q_proj"),
    ("wide-mixed", 4, 64, mixed_predicate, "language_model.model.layers.0.linear_attn.in_proj_qkv"),
]


def mlx_source(src: Path, work: Path) -> Path:
    """A copy of the Hugging Face directory as mlx-lm's qwen3_5 reads it."""
    d = work / "src"
    shutil.copytree(src, d)
    cfg = json.loads((d / "config.json").read_text())
    types = cfg["layer_types"]
    interval = types.index("full_attention") + 1
    expect = ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(len(types))]
    assert types == expect, f"layer_types {types} are not every {interval}th layer full"
    cfg["model_type"] = "qwen3_5"
    cfg["full_attention_interval"] = interval
    (d / "config.json").write_text(json.dumps(cfg, indent=1) + "\n")
    return d


def golden(d: Path, tensor: str) -> None:
    model, tokenizer = load(str(d))
    ids = tokenizer.encode(TEXT.read_text(encoding="utf-8")[:2000])[:TOKENS]
    assert len(ids) == TOKENS, len(ids)
    logits = model(mx.array(ids)[None])[0]
    lp = logits.astype(mx.float32)
    lp = lp - mx.logsumexp(lp, axis=-1, keepdims=True)
    lp = np.array(lp)
    logprobs = [float(lp[i, ids[i + 1]]) for i in range(TOKENS - 1)]
    ppl = math.exp(-sum(logprobs) / len(logprobs))
    w = mx.load(str(d / "model.safetensors"))
    cfg = json.loads((d / "config.json").read_text())
    q = cfg["quantization"].get(tensor) or cfg["quantization"]
    deq = mx.dequantize(
        w[f"{tensor}.weight"], w[f"{tensor}.scales"], w[f"{tensor}.biases"],
        group_size=q["group_size"], bits=q["bits"],
    )[:DEQUANT_ROWS].astype(mx.float32)
    deq = np.array(deq)
    (d / "dequant.f32").write_bytes(deq.astype("<f4").tobytes())
    out = {
        "mlx": mx.__version__,
        "logits_dtype": str(logits.dtype),
        "token_ids": ids,
        "logprobs": logprobs,
        "perplexity": ppl,
        "dequant": {"tensor": f"{tensor}.weight", "rows": deq.shape[0], "cols": deq.shape[1],
                    "bits": q["bits"], "group_size": q["group_size"], "file": "dequant.f32"},
    }
    (d / "golden.json").write_text(json.dumps(out, indent=1) + "\n")
    print(f"{d.name}: ppl {ppl:.4f}, model.safetensors {(d / 'model.safetensors').stat().st_size} bytes",
          file=sys.stderr)


def main() -> None:
    src = Path(sys.argv[1])
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        s = mlx_source(src, Path(tmp))
        for name, bits, group, predicate, tensor in MODELS:
            d = OUT / name
            if d.exists():
                shutil.rmtree(d)
            convert(str(s), str(d), quantize=True, q_bits=bits, q_group_size=group,
                    quant_predicate=predicate)
            for extra in ["README.md", "model.safetensors.index.json"]:
                (d / extra).unlink(missing_ok=True)
            golden(d, tensor)


if __name__ == "__main__":
    main()
