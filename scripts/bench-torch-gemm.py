#!/usr/bin/env python3
"""PyTorch's bf16 matmul on the shapes of `cargo bench -p lse-runtime --bench gemm`, for
comparison in the same session: `y = x @ w.T` with x [M, K] and w [N, K] in bf16, GFLOP/s,
the best of at least 3 runs, more while they take under a second (as the bench does). Two
figures per shape: bf16 in and out (`torch.matmul` alone), and f32 in and out as LSE's
GEMM takes them (x rounded to bf16 and y widened to f32 inside the timed call, as LSE's
figure includes rounding and transposing x). A third figure multiplies f32 `x` by the weight
widened to f32 (an SGEMM: what PyTorch runs on a CPU without bf16 matrix instructions, where
its bf16 matmul is far slower). Run it from a virtual environment outside the
repository that has torch, with the same thread count as the bench:

    /path/to/venv/bin/python scripts/bench-torch-gemm.py --threads 2

`--device cuda:0` runs it on that GPU instead (each run timed to its end).

The bench runs it itself, one shape at a time beside its own figures, when
`LSE_BENCH_PYTHON` names that Python: `--shapes MxNxK,...` picks shapes and `--json` prints one
JSON object per line (`{"torch": version, "threads": n}`, then `{"m", "n", "k", "bf16",
"f32", "sgemm"}` in GFLOP/s per shape) for it to read.
"""
import argparse
import json
import sys
import time

SHAPES = [
    ("attn qkv+gate / deltanet qkvz", 512, 6144, 1024),
    ("deltanet in_proj_qkv", 512, 4096, 1024),
    ("attn o / q", 512, 2048, 1024),
    ("mlp gate / up", 512, 3584, 1024),
    ("mlp down", 512, 1024, 3584),
    ("attn o_proj", 512, 1024, 2048),
    ("lm head, M = 128", 128, 248320, 1024),
    ("lm head, M = 127", 127, 248320, 1024),
    ("lm head, M = 256", 256, 248320, 1024),
    ("qkvz, ctx 8192 in one pass", 8192, 6144, 1024),
    ("mlp down, ctx 8192", 8192, 1024, 3584),
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu", help="torch device: cpu (default) or cuda:N")
    parser.add_argument("--shapes", help="MxNxK,... (default: every shape of the bench)")
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    args = parser.parse_args()
    shapes = SHAPES
    if args.shapes:
        try:
            wanted = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
        except ValueError:
            print(f"--shapes: expected MxNxK,... with integers, got {args.shapes!r}")
            return 2
        if any(len(s) != 3 or min(s) < 1 for s in wanted):
            print(f"--shapes: expected MxNxK,... with positive integers, got {args.shapes!r}")
            return 2
        shapes = [(f"{m} x {n} x {k}", m, n, k) for m, n, k in wanted]
    try:
        import torch
    except ImportError:
        print(f"torch is not installed in this Python ({sys.executable}); run this script from a venv with torch")
        return 1
    torch.set_num_threads(args.threads)
    try:
        device = torch.device(args.device)
        torch.empty(1, device=device)
    except (RuntimeError, AssertionError) as e:
        print(f"--device {args.device}: torch cannot use it: {e}")
        return 1
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    if args.json:
        print(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads()}))
    else:
        print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
        print(
            f"{'shape':<30} {'M':>6} {'N':>7} {'K':>5}  {'bf16 -> bf16':>12} {'f32 -> f32':>12}"
            f" {'f32 weights':>12}"
        )
    for name, m, n, k in shapes:
        x32 = torch.rand(m, k, device=device) * 2 - 1
        x = x32.to(torch.bfloat16)
        w = ((torch.rand(n, k, device=device) * 2 - 1) * 0.05).to(torch.bfloat16)
        bf16 = best_time(lambda: torch.matmul(x, w.t()), sync)
        f32 = best_time(lambda: torch.matmul(x32.to(torch.bfloat16), w.t()).float(), sync)
        w32 = w.float()
        sgemm = best_time(lambda: torch.matmul(x32, w32.t()), sync)
        del w32
        flop = 2 * m * n * k / 1e9
        if args.json:
            rates = {"bf16": flop / bf16, "f32": flop / f32, "sgemm": flop / sgemm}
            print(json.dumps({"m": m, "n": n, "k": k, **rates}), flush=True)
            continue
        print(
            f"{name:<30} {m:>6} {n:>7} {k:>5}  {flop / bf16:12.1f} {flop / f32:12.1f}"
            f" {flop / sgemm:12.1f}  GFLOP/s"
        )
    return 0


def best_time(run, sync) -> float:
    """The shortest of at least 3 runs of `run`, more while they add up to under a second,
    after one untimed run (oneDNN and cuBLAS pick and cache their kernels); `sync` waits for
    a GPU's queued work, so each run is timed to its end."""
    run()
    sync()
    best = float("inf")
    start = time.perf_counter()
    for rep in range(50):
        if rep >= 3 and time.perf_counter() - start >= 1.0:
            break
        t = time.perf_counter()
        run()
        sync()
        best = min(best, time.perf_counter() - t)
    return best


if __name__ == "__main__":
    sys.exit(main())
