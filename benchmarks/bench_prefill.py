"""Quick engine-only figures: 512-token prefill (best of 3) on the GPT-2 124M and Llama 110M
shapes, and greedy decode of 400 tokens on stories260K.

    python benchmarks/bench_prefill.py [--json bench_prefill.json]
"""
import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

import decodelab
from decodelab import testing

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.environ.get("DECODELAB_MODELS", os.path.join(ROOT, "..", "shared", "models"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default="bench_prefill.json")
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    a = ap.parse_args()
    out = {"argv": sys.argv, "threads": a.threads}
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("gpt2-124m", "llama-110m"):
            m = decodelab.load(testing.write_checkpoint(os.path.join(tmp, name), name), threads=a.threads)
            ids = np.random.default_rng(0).integers(3, m.config.vocab_size, 512).tolist()
            m.forward(ids[:8])
            best = float("inf")
            for _ in range(3):
                c = m.new_cache()
                t = time.perf_counter()
                m.prefill(ids, c)
                best = min(best, time.perf_counter() - t)
            out[f"{name}_prefill512_tok_s"] = 512 / best
    m = decodelab.load(os.path.join(MODELS, "stories260K", "stories260K.bin"), threads=a.threads)
    m.generate("Once upon a time", max_new_tokens=10)
    out["stories260K_decode400_tok_s"] = max(
        m.generate("Once upon a time", max_new_tokens=400, eos_token_id=[]).decode_tokens_per_second for _ in range(5))
    for k, v in out.items():
        if k.endswith("tok_s"):
            print(f"{k:>32}: {v:9.1f}")
    with open(a.json, "w") as f:
        json.dump(out, f, indent=2)
    print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
