#!/usr/bin/env python3
"""Build the GGUF block-dequantization fixture and its reference values.

Run by hand (not by CI), from anywhere:

    /work/torchvenv/bin/python tests/goldens/make_gguf_goldens.py [--llama-bin DIR]

DIR holds llama.cpp's `llama-quantize` and `libggml-base.so` (default: $LLAMA_BIN, else
/tmp/llsrc/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin).

Environment it was run with: Python 3.11, numpy 2.4.6, gguf-py 0.19.0 (installed from the
llama.cpp tree vendored by llama-cpp-python 0.3.36: `pip install <llama.cpp>/gguf-py`),
llama.cpp from the same tree ("0.5.0-dev (build 1, commit 0c1e570)"), built with cmake
(GGML_NATIVE=OFF, GCC 12.2, x86-64).

What it writes (under tests/data/gguf/):
    blocks.gguf            GGUF v3 (gguf-py's GGUFWriter, arch "lse-test"): one tensor per type
                           LSE reads (F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K Q5_K Q6_K),
                           8 rows x 512 columns each, quantized from the same f32 matrix, plus a
                           few metadata keys of different types.
    blocks.expected.f32    gguf-py's gguf.quants.dequantize of every tensor, read back from
                           blocks.gguf: raw little-endian f32, tensors concatenated in file order.
    blocks.expected.json   index: versions, and per tensor its name, type, ne and element range
                           in blocks.expected.f32.

Where the blocks come from: F32 is the source matrix; F16 and BF16 come from gguf-py's
gguf.quants.quantize; every quantized type comes from llama.cpp's own `llama-quantize --pure`
(no importance matrix), run on a one-tensor F32 GGUF of the source matrix.

Checks made while it runs:
    - every tensor read back from blocks.gguf has the bytes that were written;
    - gguf-py's dequantization equals, bit for bit, ggml's reference to_float
      (`dequantize_row_*` in ggml-quants.c, called through ctypes on libggml-base.so);
    - for the legacy types, says whether gguf-py's own quantizer gives llama-quantize's bytes.

Deterministic: fixed seed; two runs give identical files.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

import gguf
from gguf import GGMLQuantizationType as T

ROWS, COLS = 8, 512
SEED = 20250117
OUT = Path(__file__).resolve().parents[1] / "data" / "gguf"
LLAMA_VERSION: set[str] = set()
DEFAULT_BIN = "/tmp/llsrc/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin"

# (type, llama-quantize type name or None when gguf-py writes it)
TYPES = [
    (T.F32, None),
    (T.F16, None),
    (T.BF16, None),
    (T.Q4_0, "Q4_0"),
    (T.Q4_1, "Q4_1"),
    (T.Q5_0, "Q5_0"),
    (T.Q5_1, "Q5_1"),
    (T.Q8_0, "Q8_0"),
    (T.Q4_K, "Q4_K"),
    (T.Q5_K, "Q5_K"),
    (T.Q6_K, "Q6_K"),
]


def source_matrix() -> np.ndarray:
    """8 x 512 f32 with a realistic spread and the edge cases quantizers care about."""
    rng = np.random.default_rng(SEED)
    m = np.zeros((ROWS, COLS), dtype=np.float32)
    m[0] = rng.standard_normal(COLS)
    m[1] = rng.standard_normal(COLS) * 0.02  # typical weight scale
    m[2] = rng.standard_normal(COLS)
    idx = rng.choice(COLS, 12, replace=False)  # outliers
    m[2, idx] = rng.choice([-1.0, 1.0], 12) * rng.uniform(20, 60, 12)
    # m[3] stays all zeros.
    m[4] = rng.standard_normal(COLS)
    m[4, rng.random(COLS) < 0.3] = 0.0  # exact zeros
    m[4, 64:96] = 0.75  # a constant block
    m[4, 256:288] = 0.0  # an all-zero block inside a row
    m[5, :256] = rng.uniform(0.1, 3.0, 256)  # one sign per super-block: minimums matter
    m[5, 256:] = rng.uniform(-5.0, -0.5, 256)
    m[6] = rng.standard_normal(COLS) * 2e-5  # subnormal f16 scales
    m[7] = rng.standard_normal(COLS) * 300.0  # large magnitudes
    return m.astype(np.float32)


def llama_quantize(bin_dir: Path, src: np.ndarray, qtype: str, tmp: Path) -> np.ndarray:
    """Quantizes `src` with llama-quantize --pure; returns the raw blocks (rows x row bytes)."""
    inp, out = tmp / "in.gguf", tmp / f"out-{qtype}.gguf"
    if not inp.exists():
        # llama-quantize loads the file as a model, so it needs a known architecture and its
        # required hyper-parameters; the tensor only has to end in "weight".
        w = gguf.GGUFWriter(str(inp), "llama")
        w.add_context_length(64)
        w.add_embedding_length(COLS)
        w.add_block_count(1)
        w.add_feed_forward_length(COLS)
        w.add_head_count(4)
        w.add_head_count_kv(4)
        w.add_layer_norm_rms_eps(1e-6)
        w.add_tensor("m.weight", src)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
    run = subprocess.run(
        [str(bin_dir / "llama-quantize"), "--pure", str(inp), str(out), qtype, "1"],
        check=True,
        capture_output=True,
        text=True,
    )
    # It starts with "version: ... (build N, commit X)" and "built with ...".
    lines = (run.stdout + run.stderr).splitlines()
    LLAMA_VERSION.update(l.split(":", 1)[1].strip() for l in lines if l.startswith("version:"))
    LLAMA_VERSION.update(l.strip() for l in lines if l.startswith("built with"))
    r = gguf.GGUFReader(str(out))
    (t,) = [t for t in r.tensors if t.name == "m.weight"]
    assert t.tensor_type == T[qtype], (t.tensor_type, qtype)
    return np.array(t.data, dtype=np.uint8).reshape(ROWS, -1)


class GgmlRef:
    """ggml's reference dequantization (type_traits.to_float) through ctypes."""

    class Traits(ctypes.Structure):
        _fields_ = [
            ("type_name", ctypes.c_char_p),
            ("blck_size", ctypes.c_int64),
            ("blck_size_interleave", ctypes.c_int64),
            ("type_size", ctypes.c_size_t),
            ("is_quantized", ctypes.c_bool),
            ("to_float", ctypes.c_void_p),
            ("from_float_ref", ctypes.c_void_p),
        ]

    def __init__(self, bin_dir: Path):
        self.lib = ctypes.CDLL(str(bin_dir / "libggml-base.so"))
        self.lib.ggml_get_type_traits.restype = ctypes.POINTER(self.Traits)
        self.lib.ggml_get_type_traits.argtypes = [ctypes.c_int]
        self.to_float_t = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)

    def dequantize(self, ty: T, raw: np.ndarray) -> np.ndarray | None:
        tr = self.lib.ggml_get_type_traits(int(ty)).contents
        bs, ts = gguf.GGML_QUANT_SIZES[ty]
        assert (tr.blck_size, tr.type_size) == (bs, ts), (ty, tr.blck_size, tr.type_size)
        if not tr.to_float:
            return None  # F32: nothing to convert
        raw = np.ascontiguousarray(raw, dtype=np.uint8)
        n = raw.size // ts * bs
        out = np.empty(n, dtype=np.float32)
        self.to_float_t(tr.to_float)(raw.ctypes.data, out.ctypes.data, n)
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--llama-bin", type=Path, default=Path(os.environ.get("LLAMA_BIN", DEFAULT_BIN)))
    args = ap.parse_args()
    bin_dir: Path = args.llama_bin

    src = source_matrix()
    blocks: dict[T, np.ndarray] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for ty, qname in TYPES:
            if qname is None:
                blocks[ty] = src if ty == T.F32 else gguf.quants.quantize(src, ty)
            else:
                blocks[ty] = llama_quantize(bin_dir, src, qname, Path(tmp))
                if ty in (T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0):
                    same = np.array_equal(gguf.quants.quantize(src, ty), blocks[ty])
                    print(f"{ty.name}: gguf-py's quantizer {'matches' if same else 'differs from'} llama-quantize")

    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / "blocks.gguf"
    w = gguf.GGUFWriter(str(path), "lse-test")
    w.add_name("LSE GGUF block dequantization fixture")
    w.add_description(f"one {ROWS}x{COLS} matrix in every ggml type LSE reads; tests/goldens/make_gguf_goldens.py")
    w.add_uint32("lse-test.rows", ROWS)
    w.add_int32("lse-test.negative", -7)
    w.add_float32("lse-test.scale", 0.5)
    w.add_float64("lse-test.scale_f64", 0.1)
    w.add_bool("lse-test.flag", True)
    w.add_array("lse-test.types", [ty.name for ty, _ in TYPES])
    w.add_array("lse-test.sizes", [int(b.nbytes) for b in blocks.values()])
    for ty, _ in TYPES:
        b = blocks[ty]
        name = f"blocks.{ty.name.lower()}"
        if ty in (T.F32, T.F16):
            w.add_tensor(name, b)
        else:
            w.add_tensor(name, b, raw_shape=b.shape, raw_dtype=ty)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    ref = GgmlRef(bin_dir)
    r = gguf.GGUFReader(str(path))
    assert [t.name for t in r.tensors] == [f"blocks.{ty.name.lower()}" for ty, _ in TYPES]
    index, chunks, offset = [], [], 0
    for t, (ty, _) in zip(r.tensors, TYPES):
        assert t.tensor_type == ty
        raw = np.array(t.data)
        assert np.array_equal(raw.view(np.uint8).reshape(-1), blocks[ty].view(np.uint8).reshape(-1)), t.name
        y = gguf.quants.dequantize(raw, ty).astype(np.float32, copy=False).reshape(-1)
        assert y.size == ROWS * COLS, (t.name, y.shape)
        g = ref.dequantize(ty, raw.view(np.uint8))
        if g is not None:
            assert np.array_equal(g.view(np.uint32), y.view(np.uint32)), f"{t.name}: gguf-py != ggml"
        err = float(np.max(np.abs(y - src.reshape(-1))))
        print(f"{t.name}: {raw.nbytes} bytes, max |dequantized - source| = {err:.4g}"
              f"{'' if g is None else ', ggml to_float agrees bit for bit'}")
        index.append({
            "name": t.name,
            "type": ty.name,
            "ne": [int(x) for x in t.shape],
            "offset": offset,
            "count": int(y.size),
        })
        chunks.append(y.astype("<f4"))
        offset += y.size
    np.concatenate(chunks).tofile(OUT / "blocks.expected.f32")
    meta = {
        "generator": "tests/goldens/make_gguf_goldens.py",
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "gguf": getattr(gguf, "__version__", None) or _dist_version("gguf"),
        "llama.cpp": ", ".join(sorted(LLAMA_VERSION)),
        "seed": SEED,
        "tensors": index,
    }
    # One line per tensor.
    text = json.dumps({k: v for k, v in meta.items() if k != "tensors"}, indent=1)[:-2]
    text += ',\n "tensors": [\n  ' + ",\n  ".join(json.dumps(e) for e in index) + "\n ]\n}\n"
    json.loads(text)
    (OUT / "blocks.expected.json").write_text(text)
    for f in sorted(OUT.iterdir()):
        print(f"{f.relative_to(OUT.parents[1])}: {f.stat().st_size} bytes")


def _dist_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


if __name__ == "__main__":
    main()
