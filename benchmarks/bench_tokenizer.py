"""Encoding time of the llama2.c tokenizer (stories260K's tok512.bin) against text length, and of
each GGUF tokenizer that ../shared/models/fetch --vocab downloads at 10k and 100k characters.

    python benchmarks/bench_tokenizer.py [--out benchmarks/results/bench_tokenizer.json]

Story-like text of 1,000 to 100,000 characters, best of five encodes each; the ratio column is
the time against the previous row's (4x the text each row: about 4 for linear growth, 16 for
quadratic, as run.c's merge loop grew). The GGUF rows encode mixed text (scripts, code, digits)
of 10,000 and 100,000 characters, best of three; the target is 100k within 12x the time of 10k.
"""
from __future__ import annotations

import argparse
import json
import os
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.environ.get("DECODELAB_MODELS", os.path.join(ROOT, "..", "shared", "models"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    from decodelab.text.tokenizer import Llama2cTokenizer

    tok = Llama2cTokenizer(os.path.join(MODELS, "stories260K", "tok512.bin"), 512)
    words = ("Once upon a time there was a little girl named Lily . She loved to play with her red ball in the "
             "park , and one day she met a big friendly dog .").split()
    text = " ".join(words[i % len(words)] for i in range(30000))
    rows, prev = [], None
    print(f"{'chars':>8s} {'tokens':>8s} {'seconds':>9s} {'ratio':>6s}")
    for n in (1000, 4000, 16000, 64000, 100000):
        s = text[:n]
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            ids = tok.encode(s)
            times.append(time.perf_counter() - t0)
        t = min(times)
        ratio = t / prev if prev and n != 100000 else float("nan")
        print(f"{n:8d} {len(ids):8d} {t:9.4f} {ratio:6.2f}")
        rows.append({"chars": n, "tokens": len(ids), "seconds": round(t, 5)})
        prev = t
    gguf_rows = gguf_vocabularies()
    if args.out:
        cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
        with open(args.out, "w") as f:
            json.dump({"cpu": cpu, "rows": rows, "gguf": gguf_rows}, f, indent=1)


def gguf_vocabularies():
    """10k and 100k characters through each fetched llama.cpp vocabulary file (none if not fetched)."""
    import sys

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from llama_cpp_vocab import VOCABS, encode_seconds, vocab_path

    from decodelab.text import load_tokenizer

    out = []
    print(f"\n{'GGUF vocabulary':16s} {'10k ms':>8s} {'100k ms':>8s} {'ratio':>6s}")
    for name in VOCABS:
        if not os.path.exists(vocab_path(name)):
            continue
        tok = load_tokenizer(vocab_path(name), 0)
        t10, t100 = encode_seconds(tok, 10_000), encode_seconds(tok, 100_000)
        print(f"{name:16s} {t10 * 1e3:8.1f} {t100 * 1e3:8.1f} {t100 / t10:6.1f}")
        out.append({"vocabulary": name, "seconds_10k": round(t10, 5), "seconds_100k": round(t100, 5),
                    "ratio": round(t100 / t10, 2)})
    return out


if __name__ == "__main__":
    main()
