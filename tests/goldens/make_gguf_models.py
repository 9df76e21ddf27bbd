"""GGUF test checkpoints made by llama.cpp's own converter and quantizer, and llama.cpp's
perplexities on them.

Writes under tests/data/gguf/:

* `<name>-f32.gguf` for the golden test models dense_tied_f32, dense_untied_bf16 and moe_fused
  (tests/data/models, made by make_goldens.py), and `dense_untied_bf16-bf16.gguf`: converted
  with `convert_hf_to_gguf.py --no-mtp --outtype f32|bf16`. These models have no tokenizer, so
  the converter's vocabulary step is skipped (the files carry no `tokenizer.ggml.*`). Their
  goldens are the transformers log-probabilities already in tests/data/models/<name>/golden.json:
  the GGUF must score the same, through llama.cpp's conventions (norms with the 1 added,
  ssm_a = -exp(A_log), tiled value heads, split experts).
* `moe_fused-q8_0.gguf`, `moe_fused-q4_0.gguf`, `moe_fused-q5_1.gguf`: `llama-quantize
  moe_fused-f32.gguf ... Q8_0|Q4_0|Q5_1`, whose stacked gate and up experts and embedding are
  in that type, the head in Q8_0 (the down experts, rows of 16 values, stay F16): the MoE model
  with quantized experts that the kernels read in place, one expert's rows at a time.
* `wide-q8_0.gguf`, `wide-q4_k_m.gguf`, `wide-q5_k_m.gguf`, `wide-q4_0.gguf`,
  `wide-q5_0.gguf`: a 2-layer Qwen3.5 model (one Gated DeltaNet layer, one attention layer)
  256 wide, so that every matrix has rows of a multiple of 256 values and llama-quantize uses
  its K-quants (Q4_0 and Q5_0: the projections in that type, the head in Q6_K), with a
  512-token byte-level BPE tokenizer trained here on wiki.test.raw with Qwen3.5's
  pre-tokenizer (the converter is told its pre-tokenizer is `qwen35`; its hash is not in the
  converter's list). `wide-f32.gguf` is written to the work directory only (too large to
  commit).
* `wide.llama-perplexity.json`: llama-perplexity's final estimate and per-chunk values on each
  wide file, wiki.test.raw, ctx 128, 8 chunks, batch 128, 2 threads.

Run (about a minute; llama.cpp built outside the repo from the source the llama-cpp-python
0.3.36 sdist vendors, with -DGGML_NATIVE=OFF and the AVX-512 options on, AMX off):

    LLAMA_CPP=/path/to/llama.cpp /path/to/venv/bin/python tests/goldens/make_gguf_models.py

Versions used for the committed files: Python 3.11.7, torch 2.15.0, transformers 5.24.0,
tokenizers 0.23.x, gguf-py 0.19.0 (from that llama.cpp), llama.cpp 0.5.0-dev commit 0c1e570.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_goldens as mg  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "tests" / "data" / "gguf"
MODELS = REPO / "tests" / "data" / "models"
WIKI = REPO / "data" / "wikitext-2-raw" / "wiki.test.raw"
QWEN_TOKENIZER = REPO / "data" / "qwen35-tokenizer" / "tokenizer.json"
LLAMA_CPP = Path(os.environ.get("LLAMA_CPP", "/tmp/llsrc/llama_cpp_python-0.3.36/vendor/llama.cpp"))
BIN = LLAMA_CPP / "build" / "bin"
WORK = Path(os.environ.get("GGUF_WORK", "/tmp/lse-gguf-goldens"))

PPL_CTX = 128
PPL_CHUNKS = 8
WIDE_QUANTS = ["Q8_0", "Q4_K_M", "Q5_K_M", "Q4_0", "Q5_0"]
MOE_QUANTS = ["Q8_0", "Q4_0", "Q5_1"]


def run(cmd: list[str], **kw) -> str:
    env = dict(os.environ, LD_LIBRARY_PATH=str(BIN))
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, **kw)
    if p.returncode != 0:
        sys.stderr.write(p.stdout + p.stderr)
        raise SystemExit(f"failed: {' '.join(cmd)}")
    return p.stdout + p.stderr


def convert(model_dir: Path, out: Path, outtype: str, pre: str | None) -> None:
    """llama.cpp's converter, in this process, with the vocabulary step skipped (pre None) or
    the pre-tokenizer named (its hash check bypassed)."""
    code = f"""
import sys
sys.argv = ["convert_hf_to_gguf.py", "--no-mtp", "--outtype", {outtype!r}, "--outfile", {str(out)!r}, {str(model_dir)!r}]
sys.path.insert(0, {str(LLAMA_CPP)!r})
import convert_hf_to_gguf as c
from conversion import base
pre = {pre!r}
if pre is None:
    base.TextModel.set_vocab = lambda self: None
else:
    base.TextModel.get_vocab_base_pre = lambda self, tokenizer: pre
c.main()
"""
    run([sys.executable, "-c", code], cwd=str(LLAMA_CPP))


def train_tokenizer(path: Path) -> None:
    """A 512-token byte-level BPE on wiki.test.raw with Qwen3.5's pre-tokenizer and decoder."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    qwen = json.loads(QWEN_TOKENIZER.read_text())
    spec = json.loads(Tokenizer(models.BPE()).to_str())
    spec["pre_tokenizer"] = qwen["pre_tokenizer"]
    spec["decoder"] = qwen["decoder"]
    spec["normalizer"] = qwen.get("normalizer")
    tok = Tokenizer.from_str(json.dumps(spec))
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<|endoftext|>"],
        show_progress=False,
    )
    text = WIKI.read_text(encoding="utf-8")
    tok.train_from_iterator(text.splitlines(keepends=True), trainer)
    tok.save(str(path))


def make_wide(d: Path) -> None:
    """The 2-layer, 256-wide model as a Hugging Face directory with the trained tokenizer."""
    fields = mg.text_fields(256, 512, False, 512)
    fields.update(
        num_hidden_layers=2,
        layer_types=["linear_attention", "full_attention"],
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=128,
        linear_key_head_dim=64,
        linear_value_head_dim=64,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
    )
    fields["rope_parameters"] = dict(fields["rope_parameters"], mrope_section=[11, 11, 10])
    cfg = mg.Qwen3_5TextConfig(**fields)
    torch.manual_seed(7000)
    model = mg.Qwen3_5ForCausalLM(cfg).eval()
    # Embedding and head std 0.15: logits of std about 2.4, so perplexities stay in the hundreds
    # (at the golden models' 0.5 a random 256-wide model is confidently wrong, PPL 1e10).
    mg.fill_weights(model, 7000, embed_std=0.15)
    mg.round_to_bf16(model)
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    mg.write_config(d, mg.config_dict(cfg, mg.REAL_EXTRA_TEXT_FIELDS, "bfloat16", ["Qwen3_5ForCausalLM"]))
    sd = mg.text_state(model, False)
    mg.write_single(d, {k: mg.storage_tensor(k, v, True) for k, v in sd.items()})
    train_tokenizer(d / "tokenizer.json")
    (d / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "PreTrainedTokenizerFast", "add_bos_token": False,
                    "eos_token": "<|endoftext|>"})
    )


def llama_perplexity(gguf: Path) -> dict:
    out = run([
        str(BIN / "llama-perplexity"), "-m", str(gguf), "-f", str(WIKI), "-c", str(PPL_CTX),
        "--chunks", str(PPL_CHUNKS), "-b", str(PPL_CTX), "-t", "2", "--no-warmup",
    ])
    chunks = [float(x) for x in re.findall(r"\[\d+\]([0-9.]+),?", out)]
    final = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", out)
    if not final or len(chunks) != PPL_CHUNKS:
        sys.stderr.write(out)
        raise SystemExit(f"could not read llama-perplexity's output for {gguf}")
    return {"ppl": float(final.group(1)), "ppl_std": float(final.group(2)), "chunk_ppl": chunks}


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    WORK.mkdir(parents=True, exist_ok=True)
    for name in ["dense_tied_f32", "dense_untied_bf16", "moe_fused"]:
        convert(MODELS / name, OUT / f"{name}-f32.gguf", "f32", None)
    convert(MODELS / "dense_untied_bf16", OUT / "dense_untied_bf16-bf16.gguf", "bf16", None)
    for q in MOE_QUANTS:
        run([str(BIN / "llama-quantize"), str(OUT / "moe_fused-f32.gguf"),
             str(OUT / f"moe_fused-{q.lower()}.gguf"), q, "2"])

    wide = WORK / "wide"
    make_wide(wide)
    f32 = WORK / "wide-f32.gguf"
    convert(wide, f32, "f32", "qwen35")
    results = {"ctx": PPL_CTX, "chunks": PPL_CHUNKS, "text": "data/wikitext-2-raw/wiki.test.raw",
               "files": {}}
    results["files"]["wide-f32.gguf (not committed)"] = llama_perplexity(f32)
    for q in WIDE_QUANTS:
        out = OUT / f"wide-{q.lower()}.gguf"
        run([str(BIN / "llama-quantize"), str(f32), str(out), q, "2"])
        results["files"][out.name] = llama_perplexity(out)
    (OUT / "wide.llama-perplexity.json").write_text(json.dumps(results, indent=1) + "\n")
    for p in sorted(OUT.glob("*.gguf")):
        print(f"{p.name}: {p.stat().st_size} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
