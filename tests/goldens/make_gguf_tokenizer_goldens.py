#!/usr/bin/env python3
"""Build the GGUF tokenizer fixture and llama.cpp's token ids for it.

Run by hand (not by CI), from anywhere:

    /work/torchvenv/bin/python tests/goldens/make_gguf_tokenizer_goldens.py [--llama DIR]
    /work/torchvenv/bin/python tests/goldens/make_gguf_tokenizer_goldens.py --tables
    /work/torchvenv/bin/python tests/goldens/make_gguf_tokenizer_goldens.py --whole-file OUT.u32

DIR is a llama.cpp source tree with `convert_hf_to_gguf.py`, `gguf-py/`,
`src/unicode-data.cpp` and a build whose `build/bin/` holds `llama-tokenize` (default:
$LLAMA_CPP, else /tmp/llsrc/llama_cpp_python-0.3.36/vendor/llama.cpp).

Environment it was run with: Python 3.11, gguf-py 0.19.0, transformers 5.24.0, tokenizers 0.23.3
(/work/torchvenv), llama.cpp from the tree vendored by llama-cpp-python 0.3.36 ("0.5.0-dev
(build 1, commit 0c1e570)"), built with cmake (GCC 12.2, x86-64).

What it writes (under tests/data/gguf/):
    qwen35-vocab.gguf         `convert_hf_to_gguf.py --vocab-only --no-mtp` of
                              tests/data/models/big_vocab_bf16 (the Qwen3.5 tokenizer of
                              data/qwen35-tokenizer/): tokenizer.ggml.model "gpt2", pre "qwen35",
                              248,320 tokens (33 control, 243 unused padding), 247,587 merges.
    qwen35-vocab.tokens.json  the test texts and `llama-tokenize --ids --no-bos --no-escape
                              --no-parse-special` of each (and, for the text with special-token
                              literals, also with special parsing on), for three vocabularies:
                              "qwen35" (the file as converted), "qwen2" (the same with
                              tokenizer.ggml.pre = "qwen2") and "user_defined" (the same with
                              <think>, </think>, <tool_call>, </tool_call> of token type 4,
                              user-defined, instead of 3, control). The Rust test rebuilds the
                              two variants from qwen35-vocab.gguf the same way.

The texts: the first 20,000 bytes of data/wikitext-2-raw/wiki.test.raw (cut back to the end of a
line), each of the hostile snippets below, and all snippets joined.

`--tables` prints the Unicode classes of llama.cpp's `src/unicode-data.cpp` (generated from
Unicode 15.1) in the form `lse-runtime/src/model/gguf/tokenizer.rs` embeds them; every run also
checks that the tables in tokenizer.rs equal them.

`--whole-file OUT` writes llama-tokenize's ids of the whole wiki.test.raw (as read, trailing newline
included) as little-endian u32, for a local comparison; nothing is committed from it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "data" / "gguf"
GGUF_NAME = "qwen35-vocab.gguf"
JSON_NAME = "qwen35-vocab.tokens.json"
MODEL_DIR = ROOT / "tests" / "data" / "models" / "big_vocab_bf16"
WIKI = ROOT / "data" / "wikitext-2-raw" / "wiki.test.raw"
HF_TOKENIZER = ROOT / "data" / "qwen35-tokenizer" / "tokenizer.json"
RUST_SRC = ROOT / "lse-runtime" / "src" / "model" / "gguf" / "tokenizer.rs"
DEFAULT_LLAMA = "/tmp/llsrc/llama_cpp_python-0.3.36/vendor/llama.cpp"
WIKI_BYTES = 20_000
USER_DEFINED = ["<think>", "</think>", "<tool_call>", "</tool_call>"]

SNIPPETS: list[tuple[str, str]] = [
    ("cjk", "中文测试：你好，世界！日本語のテキスト、カタカナとひらがな。한국어 텍스트입니다. 繁體字與简体字"),
    ("emoji", "👋🏽 hi 👨\u200d👩\u200d👧\u200d👦 family 🇺🇸🇯🇵 ❤️ ❤ 🙂🙃😀😀😀 ✌🏿✌️ #️⃣ 🏳️\u200d🌈"),
    (
        "combining",
        "e\u0301 a\u0308 n\u0303o Cafe\u0301 Z\u0351\u036b\u0343a\u0310l\u0357g\u0352o\u035b "
        "\u0301\u0301alone x\u20dd नमस्ते दुनिया ภาษาไทย العَرَبِيَّة שָׁלוֹם ক্ষ ñ\u0327",
    ),
    (
        "specials",
        "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
        "<tool_call>{}</tool_call><|endoftext|>< |im_end| ><|im_end|<|im_end|>>"
        "<think><think></think>x<|fim_prefix|>",
    ),
    ("spaces", "a" + " " * 40 + "b" + " " * 17 + "\n" * 5 + "   c  \n  d " + " " * 9 + "end   "),
    ("newlines", "\n\n\n\n\n\nline\r\nline\r\n\r\n\r\r\n\n\r x\n \n \n  y\r"),
    ("tabs", "\t\tindented\tcode\t\n\tfoo \tbar\t \t baz\t\t\n\t"),
    (
        "digits",
        "1234567 3.14159 1,000,000 -42 +7e10 0x1F 2024-01-01 ٣٤٥ ०१२ ①②③ Ⅻ ½ ¾ ²³ 一二三 12ab34cd",
    ),
    (
        "contractions",
        "it's I'll we've they're I'M DON'T 'S 'll 'Ll 'lL 'ReD don't's 's rock'n'roll "
        "it’s o'clock ''s 'x 'ſ 'K y'all' ' '",
    ),
    (
        "odd",
        "\\xff\\xfe \ufffd \x00 nul \x01\x02\x7f \x0b\x0c \u200b zero\u200bwidth \u00a0nbsp\u00a0 "
        "\u2028ls\u2029ps \u3000ideo \u0085nel \ufeffbom \ue000pua \U0010fffd \U0001ffff "
        "\u1c89tje \U00010d50\U00010d51 \U00010d40\U00010d41 \u2066isolate\u2069 \u202eRLO",
    ),
    (
        "code",
        "snake_case_var = foo->bar(x[i]); // comment\nhttp://example.com/path?q=1&r=2#frag "
        "$100.00 €50 £30 !!!???... --- *** ___ (paren) [[link]] {\"k\": [1, 2]} a/b\\c ~`@^|",
    ),
    ("long", "a" * 300 + " " + "ab" * 200 + " " + "🙂" * 50 + " " + "-" * 120 + "\n"),
]


def llama_paths(llama: Path) -> tuple[Path, Path]:
    bin_dir = llama / "build" / "bin"
    return bin_dir, bin_dir / "llama-tokenize"


def tokenize(llama: Path, gguf_path: Path, text: str, parse_special: bool, work: Path) -> list[int]:
    bin_dir, exe = llama_paths(llama)
    src = work / "text.txt"
    src.write_bytes(text.encode("utf-8"))
    cmd = [str(exe), "-m", str(gguf_path), "-f", str(src), "--ids", "--no-bos", "--no-escape",
           "--log-disable"]
    if not parse_special:
        cmd.append("--no-parse-special")
    env = dict(os.environ, LD_LIBRARY_PATH=str(bin_dir))
    out = subprocess.run(cmd, check=True, capture_output=True, env=env).stdout.decode()
    lines = [l for l in out.splitlines() if l.startswith("[")]
    assert len(lines) == 1, out[-2000:]
    return json.loads(lines[0])


def convert(llama: Path, out: Path) -> None:
    subprocess.run(
        [sys.executable, str(llama / "convert_hf_to_gguf.py"), "--vocab-only", "--no-mtp",
         "--outfile", str(out), str(MODEL_DIR)],
        check=True, capture_output=True,
    )


def variant(src: Path, dst: Path, pre: str | None, user_defined: list[str]) -> None:
    """Copies src's metadata to dst, with tokenizer.ggml.pre = pre and the named tokens made
    user-defined (token type 4)."""
    import gguf

    r = gguf.GGUFReader(src)
    assert not r.tensors
    w = gguf.GGUFWriter(dst, r.fields["general.architecture"].contents())
    tokens = r.fields["tokenizer.ggml.tokens"].contents()
    for key, f in r.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        val = f.contents()
        if key == "tokenizer.ggml.pre" and pre is not None:
            val = pre
        if key == "tokenizer.ggml.token_type":
            for t in user_defined:
                val[tokens.index(t)] = 4
        sub = f.types[1] if f.types[0] == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(key, val, f.types[0], sub)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def unicode_tables(llama: Path) -> dict[str, list[tuple[int, int]]]:
    """llama.cpp's \\p{L}, \\p{M}, \\p{N} and whitespace, as sorted inclusive ranges."""
    src = (llama / "src" / "unicode-data.cpp").read_text()
    body = src.split("unicode_ranges_flags = {")[1].split("};")[0]
    starts = [(int(a, 16), int(b, 16)) for a, b in re.findall(r"\{0x([0-9A-F]+), 0x([0-9A-F]+)\}", body)]
    starts.append((0x110000, 0))

    def cls(mask: int) -> list[tuple[int, int]]:
        out: list[list[int]] = []
        for (s, f), (n, _) in zip(starts, starts[1:]):
            if f & mask:
                if out and out[-1][1] == s - 1:
                    out[-1][1] = n - 1
                else:
                    out.append([s, n - 1])
        return [(a, b) for a, b in out]

    ws_body = src.split("unicode_set_whitespace = {")[1].split("};")[0]
    ws: list[list[int]] = []
    for c in sorted(int(x, 16) for x in re.findall(r"0x([0-9A-F]+)", ws_body)):
        if ws and ws[-1][1] == c - 1:
            ws[-1][1] = c
        else:
            ws.append([c, c])
    return {
        "LETTER": cls(0x0004),
        "MARK": cls(0x0010),
        "NUMBER": cls(0x0002),
        "WHITESPACE": [(a, b) for a, b in ws],
    }


def format_ranges(ranges: list[tuple[int, int]]) -> list[str]:
    words = [f"{a:X}" if a == b else f"{a:X}-{b:X}" for a, b in ranges]
    lines, cur = [], ""
    for w in words:
        if cur and len(cur) + 1 + len(w) > 90:
            lines.append(cur)
            cur = w
        else:
            cur = f"{cur} {w}" if cur else w
    lines.append(cur)
    return lines


def rust_tables(tables: dict[str, list[tuple[int, int]]]) -> str:
    out = []
    for name, ranges in tables.items():
        out.append(f"const {name}: &str = \"\\")
        out.extend(f"{l} \\" for l in format_ranges(ranges))
        out.append("\";")
    return "\n".join(out)


def check_rust_tables(tables: dict[str, list[tuple[int, int]]]) -> None:
    if not RUST_SRC.exists():
        print(f"note: {RUST_SRC} not found, tables not checked")
        return
    src = RUST_SRC.read_text()
    for name, ranges in tables.items():
        m = re.search(r"const " + name + r': &str = "\\\n(.*?)";', src, re.S)
        assert m, f"{RUST_SRC}: no table {name}"
        words = m.group(1).replace("\\", " ").split()
        got = []
        for w in words:
            a, _, b = w.partition("-")
            got.append((int(a, 16), int(b or a, 16)))
        assert got == ranges, f"{RUST_SRC}: table {name} differs from llama.cpp's unicode-data.cpp"
    print(f"tables in {RUST_SRC.name} equal llama.cpp's unicode-data.cpp")


def wiki_head() -> str:
    raw = WIKI.read_bytes()[:WIKI_BYTES]
    return raw[: raw.rindex(b"\n") + 1].decode("utf-8")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llama", type=Path, default=Path(os.environ.get("LLAMA_CPP", DEFAULT_LLAMA)))
    ap.add_argument("--tables", action="store_true", help="print the Rust Unicode tables and exit")
    ap.add_argument("--whole-file", type=Path, help="write llama-tokenize's ids of wiki.test.raw")
    args = ap.parse_args()
    llama: Path = args.llama
    sys.path.insert(0, str(llama / "gguf-py"))

    tables = unicode_tables(llama)
    if args.tables:
        print(rust_tables(tables))
        return
    check_rust_tables(tables)

    with tempfile.TemporaryDirectory(prefix="lse-gguf-tok-") as tmp:
        work = Path(tmp)
        base = work / GGUF_NAME
        if args.whole_file:
            src = OUT / GGUF_NAME
            ids = tokenize(llama, src, WIKI.read_text(encoding="utf-8"), False, work)
            args.whole_file.write_bytes(b"".join(i.to_bytes(4, "little") for i in ids))
            print(f"{len(ids)} ids -> {args.whole_file}")
            return
        convert(llama, base)
        qwen2 = work / "qwen2.gguf"
        variant(base, qwen2, "qwen2", [])
        userdef = work / "user_defined.gguf"
        variant(base, userdef, None, USER_DEFINED)

        texts = [("wiki_head", wiki_head())] + SNIPPETS + [("all_snippets", "".join(t for _, t in SNIPPETS))]
        cases = []
        for vname, path in [("qwen35", base), ("qwen2", qwen2), ("user_defined", userdef)]:
            for name, text in texts:
                cases.append({"vocab": vname, "parse_special": False, "name": name, "text": text,
                              "ids": tokenize(llama, path, text, False, work)})
        for vname, path in [("qwen35", base), ("user_defined", userdef)]:
            text = dict(SNIPPETS)["specials"]
            cases.append({"vocab": vname, "parse_special": True, "name": "specials", "text": text,
                          "ids": tokenize(llama, path, text, True, work)})

        # The plain text must give the Hugging Face tokenizer's ids too (the Rust test checks
        # this again with the tokenizers crate).
        from tokenizers import Tokenizer

        hf = Tokenizer.from_file(str(HF_TOKENIZER))
        wiki_ids = hf.encode(texts[0][1], add_special_tokens=False).ids
        assert wiki_ids == cases[0]["ids"], "HF tokenizer.json and llama-tokenize differ on wiki_head"
        differ = [c["name"] for c in cases if c["vocab"] == "qwen35" and not c["parse_special"]
                  and hf.encode(c["text"], add_special_tokens=False).ids != c["ids"]]
        print(f"cases where HF tokenizer.json differs from llama-tokenize: {differ}")

        OUT.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(base, OUT / GGUF_NAME)
        version = subprocess.run(
            [str(llama_paths(llama)[1]), "--version"], capture_output=True,
            env=dict(os.environ, LD_LIBRARY_PATH=str(llama_paths(llama)[0])),
        )
        doc = {
            "gguf": GGUF_NAME,
            "llama_tokenize": next(l for l in (version.stdout + version.stderr).decode().splitlines()
                                   if l.startswith("version")),
            "flags": "--ids --no-bos --no-escape [--no-parse-special]",
            "user_defined": USER_DEFINED,
            "cases": cases,
        }
        lines = ["{"]
        for k in ("gguf", "llama_tokenize", "flags", "user_defined"):
            lines.append(f"  {json.dumps(k)}: {json.dumps(doc[k], ensure_ascii=False)},")
        lines.append('  "cases": [')
        lines.append(",\n".join("    " + json.dumps(c, ensure_ascii=False, separators=(",", ":"))
                                for c in cases))
        lines.append("  ]")
        lines.append("}")
        (OUT / JSON_NAME).write_text("\n".join(lines) + "\n", encoding="utf-8")
        for p in (OUT / GGUF_NAME, OUT / JSON_NAME):
            print(f"{p.relative_to(ROOT)}: {p.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
