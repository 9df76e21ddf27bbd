#!/usr/bin/env python3
"""Independent check of the goldens: a plain numpy (float64) Qwen3.5 forward written from
/work/shared/research/qwen35-spec.md, not from transformers' code.

Run by hand after make_goldens.py (same venv):

    /tmp/gvenv/bin/python tests/goldens/check_goldens.py

For every model under tests/data/models/ it loads the safetensors the way the spec says a
loader should (prefix stripping, ignoring model.visual.* and mtp.*, tied head, fused or
per-expert experts, per-tensor dtypes), runs the recurrent form of the gated delta rule, and
compares its log-probabilities with golden.json. For big_vocab_bf16 it also recomputes every
chunk and window NLL of ppl_golden.json. It exits non-zero if any difference exceeds the
tolerance, so a mismatch between the spec, the files and transformers cannot go unnoticed.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
from safetensors import safe_open

MODELS = Path(__file__).resolve().parents[2] / "tests" / "data" / "models"
LOGPROB_TOL = 2e-4  # float32 transformers vs float64 numpy, absolute, in nats
NLL_SUM_TOL = 5e-3  # per-window NLL sums (up to 63 tokens)


# ------------------------------------------------------------------------------- loading


def load_config(model_dir: Path) -> tuple[dict, bool]:
    """Text config (top level or text_config) and the tie flag the spec says decides."""
    cfg = json.loads((model_dir / "config.json").read_text())
    text = cfg.get("text_config", cfg)
    tied = cfg.get("tie_word_embeddings", text.get("tie_word_embeddings", False))
    return text, bool(tied)


def tensor_files(model_dir: Path) -> list[Path]:
    index = model_dir / "model.safetensors.index.json"
    if index.exists():
        names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return [model_dir / n for n in names]
    return [model_dir / "model.safetensors"]


def strip_name(name: str) -> str | None:
    """Spec section 3.1: drop visual/MTP tensors, strip the first matching text prefix."""
    if name.startswith(("model.visual.", "visual.", "vision_tower.", "mtp.", "model.mtp.")):
        return None
    if name == "lm_head.weight":
        return name
    for prefix in ("model.language_model.", "language_model.model.", "model."):
        if name.startswith(prefix):
            return name[len(prefix) :]
    raise ValueError(f"unexpected tensor name {name}")


def load_weights(model_dir: Path) -> dict[str, np.ndarray]:
    import torch  # only for reading bf16, which numpy lacks

    weights = {}
    for f in tensor_files(model_dir):
        with safe_open(str(f), "pt") as s:
            for name in s.keys():
                short = strip_name(name)
                if short is not None:
                    weights[short] = s.get_tensor(name).to(torch.float64).numpy()
    return weights


def expert_weights(w: dict, layer: int, e: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(gate [Im,H], up [Im,H], down [H,Im]) of expert e, from the fused or per-expert layout."""
    fused = f"layers.{layer}.mlp.experts.gate_up_proj"
    if fused in w:
        gu = w[fused][e]
        im = gu.shape[0] // 2
        return gu[:im], gu[im:], w[f"layers.{layer}.mlp.experts.down_proj"][e]
    p = f"layers.{layer}.mlp.experts.{e}."
    return w[p + "gate_proj.weight"], w[p + "up_proj.weight"], w[p + "down_proj.weight"]


# ------------------------------------------------------------------------------- math


def silu(x):
    return x / (1.0 + np.exp(-x))


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def softplus(x):
    return np.where(x > 20.0, x, np.log1p(np.exp(np.minimum(x, 20.0))))


def rms_zc(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * (1.0 + w)


def log_softmax(x):
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.sum(np.exp(x - m), axis=-1, keepdims=True))


def attention(c, w, p, u):
    T = u.shape[0]
    nH, nKV, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    eps = c["rms_norm_eps"]
    P = (u @ w[p + "q_proj.weight"].T).reshape(T, nH, 2 * hd)
    q, gate = P[:, :, :hd], P[:, :, hd:].reshape(T, nH * hd)
    k = (u @ w[p + "k_proj.weight"].T).reshape(T, nKV, hd)
    v = (u @ w[p + "v_proj.weight"].T).reshape(T, nKV, hd)
    q = rms_zc(q, w[p + "q_norm.weight"], eps)
    k = rms_zc(k, w[p + "k_norm.weight"], eps)
    rope = c["rope_parameters"]
    rot = int(hd * rope["partial_rotary_factor"])
    half = rot // 2
    inv = rope["rope_theta"] ** (-np.arange(half) * 2.0 / rot)
    ang = np.arange(T)[:, None] * inv[None, :]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]

    def apply(x):
        x = x.copy()
        a, b = x[:, :, :half].copy(), x[:, :, half:rot].copy()
        x[:, :, :half] = a * cos - b * sin
        x[:, :, half:rot] = b * cos + a * sin
        return x

    q, k = apply(q), apply(k)
    G = nH // nKV
    o = np.zeros((T, nH, hd))
    mask = np.tril(np.ones((T, T), dtype=bool))
    for h in range(nH):
        s = q[:, h, :] @ k[:, h // G, :].T / math.sqrt(hd)
        s = np.where(mask, s, -np.inf)
        pr = np.exp(s - s.max(axis=1, keepdims=True))
        pr /= pr.sum(axis=1, keepdims=True)
        o[:, h, :] = pr @ v[:, h // G, :]
    o = o.reshape(T, nH * hd) * sigmoid(gate)
    return o @ w[p + "o_proj.weight"].T


def gated_delta_net(c, w, p, u):
    T = u.shape[0]
    Hk, Hv = c["linear_num_key_heads"], c["linear_num_value_heads"]
    dk, dv, Kc = c["linear_key_head_dim"], c["linear_value_head_dim"], c["linear_conv_kernel_dim"]
    Kd = Hk * dk
    X = u @ w[p + "in_proj_qkv.weight"].T
    z = (u @ w[p + "in_proj_z.weight"].T).reshape(T, Hv, dv)
    b = u @ w[p + "in_proj_b.weight"].T
    a = u @ w[p + "in_proj_a.weight"].T
    cw = w[p + "conv1d.weight"][:, 0, :]
    Xp = np.concatenate([np.zeros((Kc - 1, X.shape[1])), X], axis=0)
    C = silu(sum(cw[:, j][None, :] * Xp[j : j + T] for j in range(Kc)))
    q = C[:, :Kd].reshape(T, Hk, dk)
    k = C[:, Kd : 2 * Kd].reshape(T, Hk, dk)
    v = C[:, 2 * Kd :].reshape(T, Hv, dv)
    beta = sigmoid(b)
    g = -np.exp(w[p + "A_log"])[None, :] * softplus(a + w[p + "dt_bias"][None, :])
    q = q / np.sqrt(np.sum(q * q, axis=-1, keepdims=True) + 1e-6) / math.sqrt(dk)
    k = k / np.sqrt(np.sum(k * k, axis=-1, keepdims=True) + 1e-6)
    r = Hv // Hk
    o = np.zeros((T, Hv, dv))
    for h in range(Hv):
        S = np.zeros((dk, dv))
        for t in range(T):
            kt, qt = k[t, h // r], q[t, h // r]
            S = math.exp(g[t, h]) * S
            delta = beta[t, h] * (v[t, h] - S.T @ kt)
            S = S + np.outer(kt, delta)
            o[t, h] = S.T @ qt
    eps = c["rms_norm_eps"]
    n = o / np.sqrt(np.mean(o * o, axis=-1, keepdims=True) + eps)
    y = (n * w[p + "norm.weight"] * silu(z)).reshape(T, Hv * dv)
    return y @ w[p + "out_proj.weight"].T


def swiglu(x, gate, up, down):
    return (silu(x @ gate.T) * (x @ up.T)) @ down.T


def ffn(c, w, layer, x):
    p = f"layers.{layer}.mlp."
    if p + "gate.weight" not in w:
        return swiglu(
            x, w[p + "gate_proj.weight"], w[p + "up_proj.weight"], w[p + "down_proj.weight"]
        )
    k = c["num_experts_per_tok"]
    probs = np.exp(log_softmax(x @ w[p + "gate.weight"].T))
    out = np.zeros_like(x)
    for t in range(x.shape[0]):
        top = np.argsort(-probs[t], kind="stable")[:k]
        wt = probs[t, top] / probs[t, top].sum()
        for e, we in zip(top, wt):
            out[t] += we * swiglu(x[t : t + 1], *expert_weights(w, layer, e))[0]
    sh = swiglu(
        x,
        w[p + "shared_expert.gate_proj.weight"],
        w[p + "shared_expert.up_proj.weight"],
        w[p + "shared_expert.down_proj.weight"],
    )
    return out + sigmoid(x @ w[p + "shared_expert_gate.weight"].T) * sh


def forward_logits(c, tied, w, ids) -> np.ndarray:
    eps = c["rms_norm_eps"]
    x = w["embed_tokens.weight"][ids]
    for layer, kind in enumerate(c["layer_types"]):
        u = rms_zc(x, w[f"layers.{layer}.input_layernorm.weight"], eps)
        if kind == "full_attention":
            m = attention(c, w, f"layers.{layer}.self_attn.", u)
        else:
            m = gated_delta_net(c, w, f"layers.{layer}.linear_attn.", u)
        h = x + m
        x = h + ffn(
            c, w, layer, rms_zc(h, w[f"layers.{layer}.post_attention_layernorm.weight"], eps)
        )
    y = rms_zc(x, w["norm.weight"], eps)
    head = w["embed_tokens.weight"] if tied else w["lm_head.weight"]
    return y @ head.T


# ------------------------------------------------------------------------------- checks


def check_golden(model_dir: Path, c, tied, w) -> float:
    g = json.loads((model_dir / "golden.json").read_text())
    ids = g["token_ids"]
    lp = log_softmax(forward_logits(c, tied, w, ids))
    if lp.shape[1] != g["vocab_size"]:
        raise AssertionError(f"{model_dir.name}: vocab {lp.shape[1]} != {g['vocab_size']}")
    ours = lp[:, g["columns"]]
    ref = np.array(g["logprobs"], dtype=np.float64)
    return float(np.abs(ours - ref).max())


def check_ppl(model_dir: Path, c, tied, w) -> float:
    g = json.loads((model_dir / "ppl_golden.json").read_text())
    ids = g["token_ids"]
    worst = 0.0
    for method in ("chunks", "sliding"):
        for win in g[method]["windows"]:
            lp = log_softmax(forward_logits(c, tied, w, ids[win["begin"] : win["end"]]))
            nll = [
                -lp[t - 1 - win["begin"], ids[t]] for t in range(win["first_target"], win["end"])
            ]
            if len(nll) != win["scored"]:
                raise AssertionError(f"{method} window {win['index']}: scored count mismatch")
            worst = max(worst, abs(math.fsum(nll) - win["nll_sum"]))
    return worst


def main() -> int:
    failed = False
    for model_dir in sorted(p for p in MODELS.iterdir() if (p / "golden.json").exists()):
        c, tied = load_config(model_dir)
        w = load_weights(model_dir)
        diff = check_golden(model_dir, c, tied, w)
        ok = diff <= LOGPROB_TOL
        failed |= not ok
        print(f"{model_dir.name:20s} max |dlogprob| = {diff:.3e} {'ok' if ok else 'FAIL'}")
        if (model_dir / "ppl_golden.json").exists():
            d = check_ppl(model_dir, c, tied, w)
            ok = d <= NLL_SUM_TOL
            failed |= not ok
            print(f"{model_dir.name:20s} max |d nll_sum| = {d:.3e} {'ok' if ok else 'FAIL'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
