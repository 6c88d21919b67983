"""Per-token overhead on the smallest model, where the weights are nothing and everything around
them (sampling, the decode loop, Python, streaming) shows: stories260K, 400 tokens after BOS,
best of --repeats, beside the plain-C baseline (benchmarks/baseline/plainc.c) in the same run.

    python benchmarks/bench_overhead.py [--threads N] [--json bench_overhead.json]

Rows: the plain-C loop (token at a time, greedy); decodelab generate() greedy (the loop in C++);
generate() with a sampling chain (temperature, top-k, top-p, then a seeded draw); stream() (one
Python iteration and a detokenised piece per token); and a Python loop over Model.decode with
numpy argmax (what a user writing their own loop pays). The overhead column is microseconds per
token above greedy generate().
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

import decodelab

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.environ.get("DECODELAB_MODELS", os.path.join(ROOT, "..", "shared", "models"))
N = 400


def best_rate(fn, repeats):
    """Tokens per second of the fastest of `repeats` calls; fn returns (tokens, seconds)."""
    return max(n / s for n, s in (fn() for _ in range(repeats)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", default="bench_overhead.json")
    a = ap.parse_args()
    ckpt = os.path.join(MODELS, "stories260K", "stories260K.bin")
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        exe = os.path.join(tmp, "plainc")
        subprocess.run(["gcc", "-O3", "-ffast-math", "-march=native", "-fopenmp",
                        os.path.join(ROOT, "benchmarks", "baseline", "plainc.c"), "-lm", "-o", exe], check=True)
        env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))

        def plainc():
            out = subprocess.run([exe, ckpt, "1", str(N)], capture_output=True, text=True, env=env, check=True)
            r = json.loads(out.stdout)
            return N, N / r["decode_tok_s"]

        rows["plain-C (greedy)"] = best_rate(plainc, a.repeats)

    m = decodelab.load(ckpt, threads=a.threads)
    m.generate([1], max_new_tokens=8)

    def gen(**kw):
        g = m.generate([1], max_new_tokens=N, eos_token_id=[], **kw)
        return g.generated_tokens - 1, g.decode_seconds

    rows["decodelab generate greedy"] = best_rate(gen, a.repeats)
    rows["decodelab generate T=0.8 top-k 40 top-p 0.9"] = best_rate(
        lambda: gen(temperature=0.8, top_k=40, top_p=0.9, seed=0), a.repeats)

    def stream():
        t = time.perf_counter()
        for _ in m.stream([1], max_new_tokens=N, eos_token_id=[]):
            pass
        return N, time.perf_counter() - t  # includes the prefill of one token

    rows["decodelab stream() greedy"] = best_rate(stream, a.repeats)

    def python_loop():
        c = m.new_cache()
        logits = m.prefill([1], c)
        t = time.perf_counter()
        for _ in range(N):
            logits = m.decode(int(np.argmax(logits)), c)
        return N, time.perf_counter() - t

    rows["Python loop over Model.decode"] = best_rate(python_loop, a.repeats)

    base = rows["decodelab generate greedy"]
    print(f"stories260K, {N} tokens, {a.threads} threads, best of {a.repeats}")
    print(f"{'':<46}{'tok/s':>10}{'us/token':>10}{'overhead us':>13}")
    out = {"argv": sys.argv, "threads": a.threads, "tokens": N, "rows": []}
    for name, rate in rows.items():
        over = 1e6 / rate - 1e6 / base
        print(f"{name:<46}{rate:>10.0f}{1e6 / rate:>10.1f}{over:>13.1f}")
        out["rows"].append({"name": name, "tok_s": rate, "us_per_token": 1e6 / rate, "overhead_us": over})
    print(f"decodelab greedy / plain-C: {base / rows['plain-C (greedy)']:.2f}x")
    with open(a.json, "w") as f:
        json.dump(out, f, indent=2)
    print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
