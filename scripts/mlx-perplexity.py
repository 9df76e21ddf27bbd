"""mlx-lm's own forward on llama-perplexity's windows, to compare with `lse perplexity` on the
same MLX checkpoint: CTX-token chunks of the tokenized text, the second half of each scored
(position j's logits predict token j + 1, for j in [CTX/2, CTX - 1)). Prints the running
perplexity after each chunk. Runs from a venv outside the repo with mlx and mlx-lm
(`pip install "mlx[cpu]" mlx-lm`; README "MLX quantized checkpoints"):

    /path/to/mlxvenv/bin/python scripts/mlx-perplexity.py MODEL_DIR data/wikitext-2-raw/wiki.test.raw 512 8
"""

import math
import sys
import time

import mlx.core as mx
from mlx_lm import load


def main() -> None:
    path, text, ctx, chunks = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    model, tok = load(path)
    ids = tok.encode(open(text, encoding="utf-8").read(), add_special_tokens=False)
    nll, n = 0.0, 0
    t0 = time.time()
    for c in range(chunks):
        chunk = ids[c * ctx:(c + 1) * ctx]
        logits = model(mx.array(chunk)[None])[0].astype(mx.float32)
        scored = logits[ctx // 2:ctx - 1]
        lp = scored - mx.logsumexp(scored, axis=-1, keepdims=True)
        targets = mx.array(chunk[ctx // 2 + 1:ctx])[:, None]
        nll += -mx.take_along_axis(lp, targets, axis=-1).sum().item()
        n += ctx - 1 - ctx // 2
        print(f"chunk {c + 1}: ppl so far {math.exp(nll / n):.6f} ({time.time() - t0:.1f} s)",
              flush=True)


if __name__ == "__main__":
    main()
