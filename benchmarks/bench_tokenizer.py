"""Encoding time of the llama2.c tokenizer (stories260K's tok512.bin) against text length.

    python benchmarks/bench_tokenizer.py [--out benchmarks/results/bench_tokenizer.json]

Story-like text of 1,000 to 100,000 characters, best of five encodes each; the ratio column is
the time against the previous row's (4x the text each row: about 4 for linear growth, 16 for
quadratic, as run.c's merge loop grew).
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
    if args.out:
        cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
        with open(args.out, "w") as f:
            json.dump({"cpu": cpu, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
