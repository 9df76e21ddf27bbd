#!/usr/bin/env python3
"""The PyTorch/transformers peer of `lse perplexity` for scripts/bench-vs-torch.sh: the same
text, tokenizer and llama.cpp-style chunks (ctx tokens each, the second half scored), one
bf16 forward per chunk, timed from the first forward to the last chunk's negative
log-likelihoods. Prints one JSON object: tokens/s (every token sent through the forward),
the perplexity over the scored tokens, and the process's peak RSS.

Run it from a virtual environment outside the repository that has torch and transformers:

    /path/to/venv/bin/python scripts/torch-perplexity.py --model DIR --text FILE \
        --ctx 512 --chunks 4 --threads 2

`--device cuda:0` runs the model on that GPU (the peer of `lse perplexity --pool cuda:0`).
"""
import argparse
import json
import math
import resource
import sys
import time


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="Hugging Face model directory")
    p.add_argument("--text", required=True, help="text file to score (wiki.test.raw)")
    p.add_argument("--ctx", type=int, default=512)
    p.add_argument("--chunks", type=int, default=4)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--device", default="cpu", help="torch device: cpu (default) or cuda:N")
    args = p.parse_args()
    try:
        import torch
        from tokenizers import Tokenizer
        from transformers import AutoModelForCausalLM
    except ImportError as e:
        print(json.dumps({"error": f"torch/transformers not available in this Python ({e})"}))
        return 1
    torch.set_num_threads(args.threads)
    tok = Tokenizer.from_file(f"{args.model}/tokenizer.json")
    with open(args.text, encoding="utf-8") as f:
        ids = tok.encode(f.read(), add_special_tokens=False).ids
    n_chunks = min(args.chunks, len(ids) // args.ctx)
    if n_chunks == 0:
        print(json.dumps({"error": f"{len(ids)} tokens: fewer than one chunk of {args.ctx}"}))
        return 1
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16)
    model.to(args.device)
    model.eval()
    first = args.ctx // 2
    nll, count = 0.0, 0
    start = time.perf_counter()
    with torch.inference_mode():
        for c in range(n_chunks):
            chunk = torch.tensor([ids[c * args.ctx:(c + 1) * args.ctx]], device=args.device)
            # Logits of the rows that predict scored tokens only, as lse computes them.
            logits = model(chunk, logits_to_keep=args.ctx - first).logits[0]
            targets = chunk[0, first + 1:]
            for r0 in range(0, len(targets), 256):
                rows = logits[r0:r0 + 256].float()
                lp = torch.log_softmax(rows, dim=-1)
                t = targets[r0:r0 + 256]
                nll -= lp[torch.arange(len(t), device=args.device), t].double().sum().item()
                count += len(t)
    elapsed = time.perf_counter() - start
    print(json.dumps({
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "device": args.device,
        "chunks": n_chunks,
        "ctx": args.ctx,
        "prefill_tokens": n_chunks * args.ctx,
        "elapsed_seconds": elapsed,
        "prefill_tokens_per_second": n_chunks * args.ctx / elapsed,
        "perplexity": math.exp(nll / count),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
