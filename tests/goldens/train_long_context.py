#!/usr/bin/env python3
"""Train a small long-context Qwen3.5 model on wikitext-2, for FlashPrefill V2's quality report.

Random weights give flat attention, so a sparse-attention quality report on them says nothing.
This script trains a model whose attention is peaked (sinks, local windows, look-ups of earlier
text), with the real Qwen3.5 tokenizer, on the first 80% of wiki.test.raw, and writes it as a
Hugging Face directory that `lse` loads like a real checkpoint. Run by hand (not by CI):

    /work/torchvenv/bin/python tests/goldens/train_long_context.py --out /tmp/lse-trained

Environment: the goldens venv (tests/goldens/README.md: torch 2.15.0, transformers 5.24.0,
safetensors 0.8.0, tokenizers 0.23.3), CPU only, 2 threads.

The model: 8 layers (DeltaNet x3 then full attention, twice: two full-attention layers),
hidden 256, 4 query heads and 2 KV heads of 64 with Qwen3.5's partial RoPE (a quarter of each
head rotated), DeltaNet with 2 key and 4 value heads of 64, SwiGLU 768, tied embeddings, the
full 248,320-token vocabulary on disk. Trained at context 4096 (one sequence per step,
uniformly drawn windows) with AdamW, seeded.

The vocabulary trick, exact rather than approximate: the training text uses some 20,000 of the
248,320 ids. Training runs a compact vocabulary of those ids plus one "other" row whose logit
carries + log(number of unseen ids). On export every unseen id gets the "other" row as its
(tied) embedding, so the full-vocabulary softmax of the exported model gives every seen id the
probability that the compact model gave it and spreads the "other" mass evenly over the unseen
ids. The script checks this on the written directory, reloaded with transformers.

It writes into --out: config.json, model.safetensors (BF16 except A_log and the gated norm, as
real checkpoints), the tokenizer, heldout.txt (the last 20% of wiki.test.raw, the text the
quality report scores) and train_report.json (seed, steps, split, wall time, losses, held-out
perplexity and a summary of the full-attention maps). Same seed, steps and thread count give
the same weights.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import shutil
import sys
import time
from pathlib import Path

import tokenizers
import torch
import transformers
from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_goldens import (  # noqa: E402  (the goldens script's checkpoint-writing helpers)
    REAL_EXTRA_TEXT_FIELDS,
    TOKENIZER_DIR,
    WIKI,
    config_dict,
    round_to_bf16,
    save_tensors,
    storage_tensor,
    write_config,
)

FULL_VOCAB = 248320
TRAIN_FRACTION = 0.8
LAYER_TYPES = (["linear_attention"] * 3 + ["full_attention"]) * 2
# FlashPrefill V2's default block and forced blocks, for the attention-map summary.
BLOCK = 128
SINK_BLOCKS = 2
WINDOW_BLOCKS = 4


def config_fields(vocab: int) -> dict:
    """Qwen3.5 text-config fields of the trained model (the compact or the full vocabulary)."""
    return dict(
        vocab_size=vocab,
        hidden_size=256,
        intermediate_size=768,
        num_hidden_layers=len(LAYER_TYPES),
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        hidden_act="silu",
        max_position_embeddings=262144,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 10000000.0,
            "partial_rotary_factor": 0.25,
            # rot = 64 * 0.25 = 16 dims -> 8 frequencies; the sections sum to rot / 2.
            "mrope_section": [3, 3, 2],
            "mrope_interleaved": True,
        },
        attention_bias=False,
        linear_conv_kernel_dim=4,
        linear_key_head_dim=64,
        linear_value_head_dim=64,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        layer_types=list(LAYER_TYPES),
    )


def split_text(text: str) -> tuple[str, str]:
    """The first 80% of the text (cut after the line that crosses 80%) and the rest."""
    cut = text.index("\n", int(len(text) * TRAIN_FRACTION)) + 1
    return text[:cut], text[cut:]


class CompactVocab:
    """Maps full-vocabulary ids onto the seen ids plus one shared "other" row."""

    def __init__(self, seen: list[int]):
        self.seen = torch.tensor(seen, dtype=torch.long)
        self.other = len(seen)
        self.lut = torch.full((FULL_VOCAB,), self.other, dtype=torch.long)
        self.lut[self.seen] = torch.arange(len(seen))
        self.log_unseen = math.log(FULL_VOCAB - len(seen))

    def logits(self, model: Qwen3_5ForCausalLM, ids: torch.Tensor, **kw):
        """Compact logits [B, T, n_seen + 1]; the last column stands for each unseen id."""
        out = model.model(input_ids=self.lut[ids], use_cache=False, **kw)
        logits = out.last_hidden_state @ model.model.embed_tokens.weight.T
        offset = torch.zeros(logits.shape[-1])
        offset[-1] = self.log_unseen
        return logits + offset, out

    def nll(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Per-token negative log-likelihood of full-vocabulary targets, as the full model gives."""
        logp = torch.log_softmax(logits, dim=-1)
        compact = self.lut[targets]
        picked = logp.gather(-1, compact.unsqueeze(-1)).squeeze(-1)
        return -(picked - (compact == self.other).to(picked.dtype) * self.log_unseen)


def lr_at(step: int, steps: int, peak: float, warmup: int) -> float:
    """Linear warm-up, then cosine decay to a tenth of the peak."""
    if step < warmup:
        return peak * (step + 1) / warmup
    frac = (step - warmup) / max(1, steps - warmup)
    return peak * (0.1 + 0.45 * (1 + math.cos(math.pi * frac)))


def windows(ids: torch.Tensor, ctx: int) -> list[torch.Tensor]:
    """Non-overlapping windows of ctx + 1 tokens (input and next-token target)."""
    return [ids[s : s + ctx + 1] for s in range(0, len(ids) - ctx, ctx)]


@torch.no_grad()
def heldout_nll(model, vocab: CompactVocab, wins: list[torch.Tensor]) -> float:
    """Mean next-token NLL over every position of the given windows."""
    total, count = 0.0, 0
    for w in wins:
        logits, _ = vocab.logits(model, w[None, :-1])
        nll = vocab.nll(logits[0], w[1:])
        total += nll.double().sum().item()
        count += nll.numel()
    return total / count


@torch.no_grad()
def attention_summary(model, vocab: CompactVocab, wins: list[torch.Tensor]) -> list[dict]:
    """Per full-attention layer: where the attention mass goes, by 128-token key block.

    Over query rows in query blocks >= SINK_BLOCKS + WINDOW_BLOCKS (so the regions are disjoint):
    the mean mass on the sink blocks, on the local window (the WINDOW_BLOCKS blocks up to and
    including the diagonal), and elsewhere; and per query block, the fraction of its causal key
    blocks that an oracle needs to hold 90% of the block's mass (mean over heads and blocks).
    """
    model.set_attn_implementation("eager")
    acc: dict[int, dict[str, list[float]]] = {}
    for w in wins:
        _, out = vocab.logits(model, w[None, :-1], output_attentions=True)
        full_layers = [i for i, kind in enumerate(LAYER_TYPES) if kind == "full_attention"]
        for layer, att in zip(full_layers, out.attentions, strict=True):
            a = att[0].float()  # [heads, T, T]
            heads, t, _ = a.shape
            nb = t // BLOCK
            mass = a[:, :, : nb * BLOCK].reshape(heads, t, nb, BLOCK).sum(-1)  # [h, T, kb]
            first = (SINK_BLOCKS + WINDOW_BLOCKS) * BLOCK
            rows = torch.arange(first, nb * BLOCK)
            qb = rows // BLOCK
            kb = torch.arange(nb)
            sink = (kb[None, :] < SINK_BLOCKS).float()
            local = ((kb[None, :] <= qb[:, None]) & (kb[None, :] > qb[:, None] - WINDOW_BLOCKS)).float()
            m = mass[:, rows, :]  # [h, R, kb]
            s = (m * sink).sum(-1).mean().item()
            loc = (m * local).sum(-1).mean().item()
            fractions = []
            for q in range(SINK_BLOCKS + WINDOW_BLOCKS, nb):
                per_block = mass[:, q * BLOCK : (q + 1) * BLOCK, : q + 1].mean(1)  # [h, q+1]
                sorted_mass = per_block.sort(dim=-1, descending=True).values.cumsum(-1)
                needed = (sorted_mass < 0.9).sum(-1).float() + 1  # blocks to reach 90%
                fractions.append((needed / (q + 1)).mean().item())
            d = acc.setdefault(layer, {"sink": [], "local": [], "other": [], "oracle90": []})
            d["sink"].append(s)
            d["local"].append(loc)
            d["other"].append(1 - s - loc)
            d["oracle90"].append(sum(fractions) / len(fractions))
    model.set_attn_implementation("sdpa")
    return [
        {
            "layer": layer,
            "sink_mass": sum(d["sink"]) / len(d["sink"]),
            "local_window_mass": sum(d["local"]) / len(d["local"]),
            "other_mass": sum(d["other"]) / len(d["other"]),
            "key_blocks_for_90pct_mass": sum(d["oracle90"]) / len(d["oracle90"]),
        }
        for layer, d in sorted(acc.items())
    ]


def export(model, vocab: CompactVocab, out: Path) -> None:
    """Write the model with the full vocabulary as a Hugging Face directory (BF16 storage)."""
    sd = dict(model.state_dict())
    sd.pop("lm_head.weight", None)  # tied
    sd["model.embed_tokens.weight"] = sd["model.embed_tokens.weight"][vocab.lut]
    cfg = Qwen3_5TextConfig(**config_fields(FULL_VOCAB))
    write_config(out, config_dict(cfg, REAL_EXTRA_TEXT_FIELDS, "bfloat16", ["Qwen3_5ForCausalLM"]))
    save_tensors({k: storage_tensor(k, v, True) for k, v in sd.items()}, out / "model.safetensors")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(TOKENIZER_DIR / name, out / name)


@torch.no_grad()
def check_export(model, vocab: CompactVocab, out: Path, ids: torch.Tensor) -> float:
    """Largest |NLL difference| between the compact model and the written full-vocabulary one.

    In float64: torch's float32 log_softmax over 248,320 logits is off by up to 2e-4.
    """
    full = Qwen3_5ForCausalLM.from_pretrained(str(out), dtype=torch.float32).eval()
    logits, _ = vocab.logits(model, ids[None, :-1])
    compact_nll = vocab.nll(logits[0].double(), ids[1:])
    full_logits = full(input_ids=ids[None, :-1], use_cache=False).logits[0].double()
    full_nll = -torch.log_softmax(full_logits, -1).gather(-1, ids[1:, None]).squeeze(-1)
    return (compact_nll - full_nll).abs().max().item()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="model directory to write (new or empty)")
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    if args.out.exists() and any(args.out.iterdir()):
        sys.exit(f"--out {args.out}: exists and is not empty; give a new or empty directory")

    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(args.seed)
    tok = tokenizers.Tokenizer.from_file(str(TOKENIZER_DIR / "tokenizer.json"))
    train_text, held_text = split_text(WIKI.read_text(encoding="utf-8"))
    train_ids = torch.tensor(tok.encode(train_text, add_special_tokens=False).ids, dtype=torch.long)
    held_ids = torch.tensor(tok.encode(held_text, add_special_tokens=False).ids, dtype=torch.long)
    vocab = CompactVocab(sorted(set(train_ids.tolist())))
    held_wins = windows(held_ids, args.ctx)
    print(
        f"train {len(train_ids)} tokens ({len(train_text)} chars), held-out {len(held_ids)} tokens, "
        f"{len(vocab.seen)} seen ids, {len(held_wins)} held-out windows of {args.ctx}",
        flush=True,
    )

    cfg = Qwen3_5TextConfig(**config_fields(len(vocab.seen) + 1))
    cfg._attn_implementation = "sdpa"
    model = Qwen3_5ForCausalLM(cfg)
    model.train()
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=args.lr,
        betas=(0.9, 0.95),
    )
    gen = torch.Generator().manual_seed(args.seed + 1)
    log = []
    start = time.time()
    for step in range(args.steps):
        s = torch.randint(0, len(train_ids) - args.ctx - 1, (1,), generator=gen).item()
        w = train_ids[s : s + args.ctx + 1]
        for group in opt.param_groups:
            group["lr"] = lr_at(step, args.steps, args.lr, args.warmup)
        logits, _ = vocab.logits(model, w[None, :-1])
        loss = vocab.nll(logits[0], w[1:]).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        log.append(loss.item())
        if step % 10 == 9 or step == args.steps - 1:
            recent = sum(log[-10:]) / len(log[-10:])
            print(f"step {step + 1}/{args.steps} loss {recent:.3f} {time.time() - start:.0f} s", flush=True)
    train_seconds = time.time() - start

    model.eval()
    round_to_bf16(model)  # evaluate the weights as they are stored
    held_nll = heldout_nll(model, vocab, held_wins)
    print(f"held-out NLL {held_nll:.4f}, PPL {math.exp(held_nll):.2f}", flush=True)
    attention = attention_summary(model, vocab, held_wins[:2])
    for a in attention:
        print(json.dumps(a), flush=True)

    args.out.mkdir(parents=True, exist_ok=True)
    export(model, vocab, args.out)
    (args.out / "heldout.txt").write_text(held_text, encoding="utf-8")
    export_diff = check_export(model, vocab, args.out, held_ids[:513])
    print(f"exported model: max |NLL difference| against the trained one {export_diff:.2e}", flush=True)
    if export_diff > 1e-5:
        sys.exit("the exported model does not reproduce the trained one")

    report = {
        "seed": args.seed,
        "steps": args.steps,
        "ctx": args.ctx,
        "sequences_per_step": 1,
        "peak_lr": args.lr,
        "warmup_steps": args.warmup,
        "threads": args.threads,
        "train_chars": len(train_text),
        "train_tokens": len(train_ids),
        "heldout_tokens": len(held_ids),
        "seen_ids": len(vocab.seen),
        "train_seconds": round(train_seconds, 1),
        "final_train_loss_mean_last_10": sum(log[-10:]) / len(log[-10:]),
        "heldout_windows": len(held_wins),
        "heldout_nll": held_nll,
        "heldout_ppl": math.exp(held_nll),
        "export_max_nll_difference": export_diff,
        "attention": attention,
        "loss_every_10_steps": [sum(log[i : i + 10]) / len(log[i : i + 10]) for i in range(0, len(log), 10)],
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__,
        },
        "cpu": platform.processor() or platform.machine(),
    }
    (args.out / "train_report.json").write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
