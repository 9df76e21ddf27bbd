#!/usr/bin/env python3
"""Build tiny deterministic Qwen3.5 test models and their transformers reference values.

Run by hand (not by CI), from anywhere:

    /tmp/gvenv/bin/python tests/goldens/make_goldens.py

Environment it was run with (pip from PyPI, CPU only):
    python3 -m venv /tmp/gvenv
    /tmp/gvenv/bin/pip install torch==2.15.0 transformers==5.24.0 safetensors==0.8.0 \
        numpy==2.4.6 tokenizers==0.23.3        (python 3.11.7; huggingface_hub==2.4.0)
    No flash-linear-attention / causal-conv1d / kernels package installed, so transformers uses
    its own torch fallbacks (torch_chunk_gated_delta_rule with chunk size 64, F.conv1d).

What it writes (everything under tests/data/models/, see tests/goldens/README.md):
    <model>/config.json, <model>/*.safetensors (+ index for the sharded one), <model>/golden.json,
    big_vocab_bf16/ppl_golden.json and the two tokenizer symlinks.

Determinism: fixed seeds, one CPU thread, deterministic torch algorithms, hand-formatted JSON
(float32 log-probs as %.9g, enough to round-trip float32; the float64 PPL values as repr).
Running it twice gives the same bytes.

Every model is written to disk first and then reloaded with transformers' own from_pretrained
(eager attention, float32); the goldens come from the reloaded model, and the script asserts
that the reloaded logits equal those of the in-memory model, so the on-disk names and layouts are
exactly what transformers reads.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import struct
import sys
from pathlib import Path

import numpy as np
import safetensors
import tokenizers
import torch
import transformers
from safetensors.torch import save_file
from transformers import (
    PreTrainedTokenizerFast,
    Qwen3_5Config,
    Qwen3_5ForCausalLM,
    Qwen3_5ForConditionalGeneration,
    Qwen3_5MoeForCausalLM,
    Qwen3_5MoeTextConfig,
    Qwen3_5TextConfig,
)

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "tests" / "data" / "models"
TOKENIZER_DIR = REPO / "data" / "qwen35-tokenizer"
SHARED_TOKENIZER_DIR = Path("/work/shared/data/qwen35-tokenizer")
WIKI = REPO / "data" / "wikitext-2-raw" / "wiki.test.raw"
SHARED_WIKI = Path("/work/shared/data/wikitext-2-raw/wiki.test.raw")

T_GOLDEN = 100  # tokens per golden: crosses the GDN chunk size 64, not a multiple of it
BIG_VOCAB = 248320
BIG_COLUMNS = 512
PPL_CHARS = 4000
PPL_CTX = 64
PPL_STRIDE = 32
LAYER_TYPES = ["linear_attention", "linear_attention", "linear_attention", "full_attention"]

# Tensors that real Qwen3.5 checkpoints keep in F32 even when everything else is BF16.
F32_ON_DISK_SUFFIXES = ("linear_attn.A_log", "linear_attn.norm.weight")


# --------------------------------------------------------------------------------------------
# Configs
# --------------------------------------------------------------------------------------------


def text_fields(hidden: int, vocab: int, tied: bool, intermediate: int) -> dict:
    """Text-model config fields shared by every test model (tiny dims, real-checkpoint layout)."""
    return dict(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        hidden_act="silu",
        max_position_embeddings=4096,
        rms_norm_eps=1e-6,
        tie_word_embeddings=tied,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 10000000.0,
            "partial_rotary_factor": 0.25,
            # rot = 16 * 0.25 = 4 dims -> 2 frequencies; the sections sum to rot / 2.
            "mrope_section": [1, 1, 0],
            "mrope_interleaved": True,
        },
        attention_bias=False,
        linear_conv_kernel_dim=4,
        linear_key_head_dim=8,
        linear_value_head_dim=8,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        layer_types=list(LAYER_TYPES),
    )


# Fields real checkpoints carry that transformers does not keep as attributes; written to
# config.json so that the Rust loader sees the same keys as in a real checkpoint.
REAL_EXTRA_TEXT_FIELDS = {"full_attention_interval": 4, "attn_output_gate": True}


# Generic PreTrainedConfig bookkeeping that real Qwen3.5 config.json files do not carry.
CONFIG_NOISE = (
    "_name_or_path",
    "id2label",
    "label2id",
    "chunk_size_feed_forward",
    "is_encoder_decoder",
    "output_attentions",
    "output_hidden_states",
    "problem_type",
    "return_dict",
)


def drop_noise(d: dict) -> dict:
    for k in CONFIG_NOISE:
        d.pop(k, None)
    for sub in ("text_config", "vision_config"):
        if isinstance(d.get(sub), dict):
            drop_noise(d[sub])
    return d


def config_dict(config, extra_text: dict, dtype: str, architectures: list[str]) -> dict:
    """Full (non-diff) config dict with the real-checkpoint extras and the storage dtype."""
    d = drop_noise(config.to_dict())
    d["architectures"] = architectures
    d["dtype"] = dtype
    d.pop("transformers_version", None)
    if "text_config" in d:
        d["text_config"].update(extra_text)
        d["text_config"]["dtype"] = dtype
        d["text_config"].pop("transformers_version", None)
    else:
        d.update(extra_text)
    d["transformers_version"] = transformers.__version__
    return d


# --------------------------------------------------------------------------------------------
# Deterministic weights
# --------------------------------------------------------------------------------------------


def fill_weights(model: torch.nn.Module, seed: int, embed_std: float = 0.5) -> None:
    """Overwrite every parameter with seeded values chosen to make the goldens discriminating.

    Zero-centred norms get small non-zero weights (so 1+w matters), the gated norm weight is
    near 1, decays span fast and slow heads (state carried across the chunk boundary), and
    linear layers use std 1/sqrt(fan_in). Parameters are visited in sorted name order.
    """
    gen = torch.Generator().manual_seed(seed)

    def normal(shape, std):
        return torch.randn(shape, generator=gen, dtype=torch.float32) * std

    def uniform(shape, lo, hi):
        return lo + (hi - lo) * torch.rand(shape, generator=gen, dtype=torch.float32)

    params = dict(model.named_parameters(remove_duplicate=False))
    seen = set()
    for name in sorted(params):
        p = params[name]
        if p.data_ptr() in seen:  # a tied head shares the embedding storage
            continue
        seen.add(p.data_ptr())
        shape = tuple(p.shape)
        if name.endswith("embed_tokens.weight") or name == "lm_head.weight":
            value = normal(shape, embed_std)
        elif name.endswith("linear_attn.norm.weight"):
            value = 1.0 + normal(shape, 0.1)
        elif name.endswith("norm.weight"):  # zero-centred: input/post-attn/final/q/k norms
            value = normal(shape, 0.1)
        elif name.endswith("linear_attn.A_log"):
            value = torch.log(uniform(shape, 0.02, 2.0))
        elif name.endswith("linear_attn.dt_bias"):
            value = uniform(shape, -6.0, 0.5)
        elif name.endswith("conv1d.weight"):
            value = normal(shape, 0.5)
        elif name.endswith("mlp.gate.weight"):  # router: larger spread, clear top-k choices
            value = normal(shape, 2.0 / math.sqrt(shape[-1]))
        elif len(shape) >= 2:  # linear [out, in] or fused experts [E, out, in]
            value = normal(shape, 1.0 / math.sqrt(shape[-1]))
        else:
            raise RuntimeError(f"no init rule for parameter {name} {shape}")
        with torch.no_grad():
            p.copy_(value)


def round_to_bf16(model: torch.nn.Module) -> None:
    """Round the parameters that a real checkpoint stores in BF16 (all but A_log and the gated norm)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not name.endswith(F32_ON_DISK_SUFFIXES):
                p.copy_(p.to(torch.bfloat16).to(torch.float32))


def storage_tensor(name: str, t: torch.Tensor, bf16: bool) -> torch.Tensor:
    """The tensor as it is written to disk (BF16 except the F32-on-disk kinds when bf16)."""
    t = t.detach().to(torch.float32).contiguous()
    if bf16 and not name.endswith(F32_ON_DISK_SUFFIXES):
        return t.to(torch.bfloat16)
    return t.clone()


def text_state(model: torch.nn.Module, tied: bool) -> dict[str, torch.Tensor]:
    """state_dict of a *ForCausalLM model in transformers naming, without a head when tied."""
    sd = {k: v for k, v in model.state_dict().items()}
    if tied:
        sd.pop("lm_head.weight", None)
    return sd


def fused_to_per_expert(sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Split fused expert tensors into the per-expert 2-D layout used by FP8 and re-saved checkpoints."""
    out = {}
    for name, t in sd.items():
        if name.endswith("mlp.experts.gate_up_proj"):
            base = name[: -len("gate_up_proj")]
            im = t.shape[1] // 2
            for e in range(t.shape[0]):
                out[f"{base}{e}.gate_proj.weight"] = t[e, :im, :].contiguous()
                out[f"{base}{e}.up_proj.weight"] = t[e, im:, :].contiguous()
        elif name.endswith("mlp.experts.down_proj"):
            base = name[: -len("down_proj")]
            for e in range(t.shape[0]):
                out[f"{base}{e}.down_proj.weight"] = t[e].contiguous()
        else:
            out[name] = t
    return out


# --------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------


def fmt_f32(x: float) -> str:
    """A float32 value as %.9g text (9 significant digits round-trip float32)."""
    if not math.isfinite(x):
        raise ValueError(f"non-finite value {x} in golden output")
    return "%.9g" % x


def fmt_f64(x: float) -> str:
    """A float64 value as Python's shortest round-trip repr."""
    if not math.isfinite(x):
        raise ValueError(f"non-finite value {x} in golden output")
    return repr(x)


def json_value(v, ffmt) -> str:
    """Serialise plain JSON values with floats through `ffmt` (nested lists one row per line)."""
    if isinstance(v, bool) or v is None or isinstance(v, (int, str)):
        return json.dumps(v, ensure_ascii=True)
    if isinstance(v, float):
        return ffmt(v)
    if isinstance(v, dict):
        items = [f"{json.dumps(k)}: {json_value(x, ffmt)}" for k, x in v.items()]
        return "{\n" + ",\n".join(items) + "\n}"
    if isinstance(v, (list, tuple)):
        if v and isinstance(v[0], (list, tuple, dict)):
            return "[\n" + ",\n".join(json_value(x, ffmt) for x in v) + "\n]"
        return "[" + ",".join(json_value(x, ffmt) for x in v) + "]"
    raise TypeError(f"cannot serialise {type(v)}")


def write_json(path: Path, obj: dict, ffmt=fmt_f32) -> None:
    path.write_text(json_value(obj, ffmt) + "\n", encoding="utf-8")


def write_config(model_dir: Path, cfg: dict) -> None:
    (model_dir / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def save_tensors(tensors: dict[str, torch.Tensor], path: Path) -> None:
    save_file(tensors, str(path), metadata={"format": "pt"})
    os.chmod(path, 0o644)  # safetensors creates the file private


def write_single(model_dir: Path, tensors: dict[str, torch.Tensor]) -> None:
    save_tensors(tensors, model_dir / "model.safetensors")


def write_sharded(model_dir: Path, shards: list[dict[str, torch.Tensor]]) -> None:
    """Write `model-0000i-of-0000n.safetensors` files and `model.safetensors.index.json`."""
    n = len(shards)
    weight_map = {}
    total = 0
    for i, tensors in enumerate(shards, start=1):
        fname = f"model-{i:05d}-of-{n:05d}.safetensors"
        save_tensors(tensors, model_dir / fname)
        for k, t in tensors.items():
            weight_map[k] = fname
            total += t.numel() * t.element_size()
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (model_dir / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")


def fresh_dir(name: str) -> Path:
    d = OUT / name
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    return d


# --------------------------------------------------------------------------------------------
# Reference computation
# --------------------------------------------------------------------------------------------


@torch.no_grad()
def logits_of(model: torch.nn.Module, ids: list[int]) -> torch.Tensor:
    """float32 logits [T, V] of one unpadded sequence from a fresh state (no cache)."""
    x = torch.tensor([ids], dtype=torch.long)
    out = model(input_ids=x, use_cache=False)
    return out.logits[0].to(torch.float32)


def reload(cls, model_dir: Path) -> torch.nn.Module:
    """Load a written model dir with transformers in float32, eager attention."""
    m = cls.from_pretrained(str(model_dir), dtype=torch.float32, attn_implementation="eager")
    m.eval()
    return m


def assert_same(a: torch.Tensor, b: torch.Tensor, what: str) -> None:
    if not torch.equal(a, b):
        diff = (a - b).abs().max().item()
        raise AssertionError(f"{what}: logits differ (max abs diff {diff})")


def router_margin_hook(model: torch.nn.Module, margins: list[float]):
    """Record, per MoE router call, the smallest gap between the k-th and (k+1)-th expert prob.

    A tiny gap would make the top-k choice fragile under rounding differences.
    """
    handles = []
    for name, mod in model.named_modules():
        if type(mod).__name__.endswith("TopKRouter"):

            def hook(mod, inp, out):
                probs = torch.softmax(out[0].float(), dim=-1)
                top = torch.topk(probs, mod.top_k + 1, dim=-1).values
                margins.append((top[:, mod.top_k - 1] - top[:, mod.top_k]).min().item())

            handles.append(mod.register_forward_hook(hook))
    return handles


def golden_record(name: str, dtype: str, ids: list[int], logits: torch.Tensor, columns) -> dict:
    """golden.json content: float32 log_softmax rows restricted to `columns` (None = all)."""
    logprobs = torch.log_softmax(logits.to(torch.float32), dim=-1)
    vocab = logits.shape[-1]
    cols = list(range(vocab)) if columns is None else list(columns)
    sel = logprobs[:, cols].tolist()
    return {
        "model": name,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "dtype": dtype,
        "compute": "float32 weights and activations, eager attention, no cache, positions 0..T-1",
        "vocab_size": vocab,
        "token_ids": ids,
        "columns": cols,
        "logprobs": sel,
    }


def golden_ids(seed: int, vocab: int) -> list[int]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (T_GOLDEN,), generator=gen).tolist()


# --------------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------------


def dense_model(hidden: int, vocab: int, tied: bool, intermediate: int, seed: int, bf16: bool):
    cfg = Qwen3_5TextConfig(**text_fields(hidden, vocab, tied, intermediate))
    cfg._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = Qwen3_5ForCausalLM(cfg).eval()
    fill_weights(model, seed)
    if tied:
        model.tie_weights()
    if bf16:
        round_to_bf16(model)
    return cfg, model


def make_text_model(
    name: str, hidden: int, vocab: int, tied: bool, bf16: bool, seed: int, intermediate: int = 64
) -> tuple[Path, torch.nn.Module]:
    """A qwen3_5_text model (Qwen3_5ForCausalLM layout) written as one safetensors file."""
    dtype = "bfloat16" if bf16 else "float32"
    cfg, model = dense_model(hidden, vocab, tied, intermediate, seed, bf16)
    d = fresh_dir(name)
    write_config(d, config_dict(cfg, REAL_EXTRA_TEXT_FIELDS, dtype, ["Qwen3_5ForCausalLM"]))
    sd = text_state(model, tied)
    write_single(d, {k: storage_tensor(k, v, bf16) for k, v in sd.items()})
    return d, model


def make_dense(name: str, tied: bool, bf16: bool, seed: int) -> None:
    d, model = make_text_model(name, 32, 512, tied, bf16, seed)
    ids = golden_ids(seed + 1, 512)
    ref = reload(Qwen3_5ForCausalLM, d)
    lg = logits_of(ref, ids)
    assert_same(lg, logits_of(model, ids), f"{name} reload")
    write_json(
        d / "golden.json", golden_record(name, "bfloat16" if bf16 else "float32", ids, lg, None)
    )


def tiny_vision_config(out_hidden: int) -> dict:
    return dict(
        depth=1,
        hidden_size=16,
        intermediate_size=32,
        num_heads=2,
        in_channels=3,
        patch_size=2,
        spatial_merge_size=2,
        temporal_patch_size=2,
        out_hidden_size=out_hidden,
        num_position_embeddings=16,
    )


def make_wrapper(name: str, seed: int) -> None:
    """qwen3_5 ConditionalGeneration layout: text_config, model.language_model.*, lm_head,
    dummy model.visual.* and mtp.* tensors, two shards plus index. BF16, untied."""
    hidden, vocab = 32, 512
    fields = text_fields(hidden, vocab, False, 64)
    _, text_model = dense_model(hidden, vocab, False, 64, seed, True)
    cfg = Qwen3_5Config(
        text_config=fields, vision_config=tiny_vision_config(hidden), tie_word_embeddings=False
    )
    d = fresh_dir(name)
    write_config(
        d, config_dict(cfg, REAL_EXTRA_TEXT_FIELDS, "bfloat16", ["Qwen3_5ForConditionalGeneration"])
    )

    sd = text_state(text_model, False)
    shard1, shard2 = {}, {}
    for k, v in sd.items():
        disk = (
            "lm_head.weight"
            if k == "lm_head.weight"
            else "model.language_model." + k[len("model.") :]
        )
        early = k.startswith("model.embed_tokens") or any(
            k.startswith(f"model.layers.{i}.") for i in (0, 1)
        )
        (shard1 if early else shard2)[disk] = storage_tensor(k, v, True)

    # Dummy tensors the loader must ignore: two real vision-tower names (right shapes, so
    # transformers loads them) and MTP head tensors (transformers ignores ^mtp.*).
    gen = torch.Generator().manual_seed(seed + 7)
    shard2["model.visual.blocks.0.norm1.weight"] = torch.randn(16, generator=gen).to(torch.bfloat16)
    shard2["model.visual.blocks.0.norm1.bias"] = torch.randn(16, generator=gen).to(torch.bfloat16)
    shard2["mtp.fc.weight"] = torch.randn(hidden, 2 * hidden, generator=gen).to(torch.bfloat16)
    shard2["mtp.norm.weight"] = torch.randn(hidden, generator=gen).to(torch.bfloat16)
    shard2["mtp.layers.0.input_layernorm.weight"] = torch.randn(hidden, generator=gen).to(
        torch.bfloat16
    )
    write_sharded(d, [shard1, shard2])

    ids = golden_ids(seed + 1, vocab)
    ref = reload(Qwen3_5ForConditionalGeneration, d)
    lg = logits_of(ref, ids)
    # The wrapper must compute exactly the text model it wraps.
    assert_same(lg, logits_of(text_model, ids), f"{name} vs text-only model")
    write_json(d / "golden.json", golden_record(name, "bfloat16", ids, lg, None))


def make_moe(seed: int) -> None:
    """qwen3_5_moe_text, f32, untied: `moe_fused` (3-D experts) and `moe_per_expert` (2-D)."""
    hidden, vocab = 32, 512
    fields = text_fields(hidden, vocab, False, 64)
    fields.update(
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=16,
        shared_expert_intermediate_size=16,
    )
    cfg = Qwen3_5MoeTextConfig(**fields)
    cfg._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = Qwen3_5MoeForCausalLM(cfg).eval()
    fill_weights(model, seed)
    sd = {k: storage_tensor(k, v, False) for k, v in text_state(model, False).items()}
    extra = dict(
        REAL_EXTRA_TEXT_FIELDS, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[]
    )
    ids = golden_ids(seed + 1, vocab)
    expected = logits_of(model, ids)

    results = {}
    for name, tensors in (("moe_fused", sd), ("moe_per_expert", fused_to_per_expert(sd))):
        d = fresh_dir(name)
        write_config(d, config_dict(cfg, extra, "float32", ["Qwen3_5MoeForCausalLM"]))
        write_single(d, tensors)
        ref = reload(Qwen3_5MoeForCausalLM, d)
        margins: list[float] = []
        handles = router_margin_hook(ref, margins)
        lg = logits_of(ref, ids)
        for h in handles:
            h.remove()
        assert_same(lg, expected, f"{name} reload")
        if min(margins) < 1e-4:
            raise AssertionError(
                f"{name}: top-k router margin {min(margins)} too small; change seed"
            )
        rec = golden_record(name, "float32", ids, lg, None)
        rec["min_router_topk_margin"] = min(margins)
        write_json(d / "golden.json", rec)
        results[name] = lg
    assert_same(results["moe_fused"], results["moe_per_expert"], "fused vs per-expert")


def link_tokenizer(d: Path) -> None:
    """Symlink tokenizer.json and tokenizer_config.json to the repo's data/qwen35-tokenizer/."""
    if not (TOKENIZER_DIR / "tokenizer.json").exists():
        TOKENIZER_DIR.mkdir(parents=True, exist_ok=True)
        for f in ("tokenizer.json", "tokenizer_config.json", "README.md"):
            shutil.copyfile(SHARED_TOKENIZER_DIR / f, TOKENIZER_DIR / f)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        os.symlink(f"../../../../data/qwen35-tokenizer/{f}", d / f)


def big_vocab_columns(ids: list[int], logits: torch.Tensor, seed: int) -> list[int]:
    """512 sorted column ids: every next-token id, every row's argmax, 0, V-1, seeded fill."""
    vocab = logits.shape[-1]
    cols = set(ids[1:]) | set(logits.argmax(dim=-1).tolist()) | {0, vocab - 1}
    gen = torch.Generator().manual_seed(seed)
    while len(cols) < BIG_COLUMNS:
        cols.add(int(torch.randint(0, vocab, (1,), generator=gen).item()))
    if len(cols) != BIG_COLUMNS:
        raise AssertionError("too many forced columns")
    return sorted(cols)


def make_big_vocab(name: str, seed: int) -> None:
    d, model = make_text_model(name, 16, BIG_VOCAB, True, True, seed, intermediate=32)
    link_tokenizer(d)
    ids = golden_ids(seed + 1, BIG_VOCAB)
    # Also exercise the padding rows past the tokenizer's 248,077 ids, including the last one.
    ids[50], ids[51] = BIG_VOCAB - 1, 248100
    ref = reload(Qwen3_5ForCausalLM, d)
    lg = logits_of(ref, ids)
    assert_same(lg, logits_of(model, ids), f"{name} reload")
    cols = big_vocab_columns(ids, lg, seed + 2)
    write_json(d / "golden.json", golden_record(name, "bfloat16", ids, lg, cols))
    write_json(d / "ppl_golden.json", ppl_record(name, ref), fmt_f64)


# --------------------------------------------------------------------------------------------
# Perplexity goldens
# --------------------------------------------------------------------------------------------


def ppl_text() -> str:
    path = WIKI if WIKI.exists() else SHARED_WIKI
    return path.read_text(encoding="utf-8")[:PPL_CHARS]


def tokenize(text: str) -> list[int]:
    """Token ids with the tokenizers library, cross-checked against transformers; no BOS."""
    tok = tokenizers.Tokenizer.from_file(str(TOKENIZER_DIR / "tokenizer.json"))
    ids = tok.encode(text, add_special_tokens=False).ids
    hf = PreTrainedTokenizerFast(tokenizer_file=str(TOKENIZER_DIR / "tokenizer.json"))
    hf_ids = hf(text, add_special_tokens=False)["input_ids"]
    if ids != hf_ids:
        raise AssertionError("tokenizers and transformers disagree on the PPL text")
    return ids


def window_nll(model, ids: list[int], begin: int, end: int, first_target: int) -> list[float]:
    """NLL (nats) of tokens first_target..end-1, each predicted from the window ids[begin:end].

    Logits are float32 from transformers; log-softmax and the NLL are taken in float64.
    """
    lg = logits_of(model, ids[begin:end]).to(torch.float64)
    lsm = torch.log_softmax(lg, dim=-1)
    return [-lsm[t - 1 - begin, ids[t]].item() for t in range(first_target, end)]


def window_entry(index: int, begin: int, end: int, first_target: int, nll: list[float]) -> dict:
    s = math.fsum(nll)
    return {
        "index": index,
        "begin": begin,
        "end": end,
        "first_target": first_target,
        "scored": len(nll),
        "nll_sum": s,
        "mean_nll": s / len(nll),
        "perplexity": math.exp(s / len(nll)),
        "nll": nll,
    }


def summary(method: str, stride: int, windows: list[dict]) -> dict:
    """Totals with llama.cpp's PPL uncertainty: PPL * sqrt((E[nll^2] - E[nll]^2) / (N - 1))."""
    nll = [x for w in windows for x in w["nll"]]
    n = len(nll)
    mean = math.fsum(nll) / n
    var = math.fsum(x * x for x in nll) / n - mean * mean
    ppl = math.exp(mean)
    return {
        "method": method,
        "ctx": PPL_CTX,
        "stride": stride,
        "windows_scored": len(windows),
        "scored_tokens": n,
        "nll_sum": math.fsum(nll),
        "mean_nll": mean,
        "perplexity": ppl,
        "perplexity_uncertainty": ppl * math.sqrt(var / (n - 1)),
        "windows": windows,
    }


def chunks_method(model, ids: list[int]) -> dict:
    """llama.cpp chunks: floor(N/ctx) chunks, each scores targets begin+ctx/2+1 .. begin+ctx-1."""
    windows = []
    for c in range(len(ids) // PPL_CTX):
        begin, end = c * PPL_CTX, (c + 1) * PPL_CTX
        first = begin + PPL_CTX // 2 + 1
        windows.append(
            window_entry(c, begin, end, first, window_nll(model, ids, begin, end, first))
        )
    return summary("chunks", PPL_CTX, windows)


def sliding_method(model, ids: list[int]) -> dict:
    """Windows ids[b:min(b+ctx,N)] for b = 0, stride, ...; each scores the targets no earlier
    window scored (targets prev_end..end-1, and 1..end-1 for the first); stops at end == N."""
    windows, prev_end, begin = [], 0, 0
    while True:
        end = min(begin + PPL_CTX, len(ids))
        first = max(prev_end, begin + 1)
        windows.append(
            window_entry(len(windows), begin, end, first, window_nll(model, ids, begin, end, first))
        )
        prev_end = end
        if end == len(ids):
            break
        begin += PPL_STRIDE
    return summary("sliding", PPL_STRIDE, windows)


def ppl_record(name: str, model) -> dict:
    text = ppl_text()
    ids = tokenize(text)
    sha = hashlib.sha256(b"".join(struct.pack("<I", i) for i in ids)).hexdigest()
    return {
        "model": name,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "tokenizers_version": tokenizers.__version__,
        "text_source": f"first {PPL_CHARS} characters of wiki.test.raw",
        "text": text,
        "add_bos": False,
        "nll_compute": "float32 logits from transformers (eager, fresh state per window); "
        "log_softmax and sums in float64",
        "tokens": len(ids),
        "token_ids_sha256": sha,
        "token_ids": ids,
        "chunks": chunks_method(model, ids),
        "sliding": sliding_method(model, ids),
    }


# --------------------------------------------------------------------------------------------


def main() -> None:
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    transformers.logging.set_verbosity_error()
    OUT.mkdir(parents=True, exist_ok=True)
    print(
        f"torch {torch.__version__}, transformers {transformers.__version__}, "
        f"safetensors {safetensors.__version__}, numpy {np.__version__}, "
        f"tokenizers {tokenizers.__version__}",
        file=sys.stderr,
    )
    make_dense("dense_tied_f32", tied=True, bf16=False, seed=1000)
    make_dense("dense_untied_bf16", tied=False, bf16=True, seed=2000)
    make_wrapper("wrapper_dense", seed=3000)
    make_moe(seed=4000)
    make_big_vocab("big_vocab_bf16", seed=5000)
    print(f"wrote {OUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
