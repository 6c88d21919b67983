"""Continuous batching without HTTP: what one decode pass costs at batch sizes 1..32 (the
scheduler's fixed-row arithmetic against the default kernels), BatchEngine throughput at 1..64
concurrent requests, and whether starting from a cached prompt prefix changes the logits' bits.

    python benchmarks/bench_batching.py [--model FILE] [--dtypes int8 float32 bfloat16]

Results go to benchmarks/results/batching.json.
"""
import argparse
import json
import os
import time

import numpy as np

import decodelab
from decodelab.serve.engine import BatchEngine

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.environ.get("DECODELAB_MODELS", os.path.join(HERE, "..", "..", "shared", "models"))
SMOLLM = os.path.join(MODELS, "smollm2-135m-instruct", "SmolLM2-135M-Instruct.Q4_1.gguf")


def step_ms(m, B, fixed, repeats=10):
    """Median ms of one decode_batch pass over B sequences of 32 cached tokens."""
    rng = np.random.default_rng(B)
    caches = []
    for _ in range(B):
        c = m.new_cache(capacity=32 + repeats + 2)
        m.prefill(rng.integers(0, 1000, size=32).tolist(), c)
        caches.append(c)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        m.decode_batch(rng.integers(0, 1000, size=B).tolist(), caches, fixed_rows=fixed)
        times.append(time.perf_counter() - t0)
    return 1000 * float(np.median(times))


def engine_tokens_per_s(m, n, max_new=48):
    prompts = [f"Story {i}: once upon a time" for i in range(n)]
    with BatchEngine(m, max_running=64) as eng:
        eng.submit("warm up", max_new_tokens=4).result(60)
        t0 = time.perf_counter()
        reqs = [eng.submit(p, max_new_tokens=max_new, temperature=0.8, seed=i, eos_token_id=[])
                for i, p in enumerate(prompts)]
        out = sum(len(r.result(600).token_ids) for r in reqs)
        return out / (time.perf_counter() - t0)


def prefix_reuse_changes_bits(m):
    """The first token's logprob and top 5 of a 150-token prompt, greedy, through the engine: read
    whole, against starting from the two 64-token blocks a 130-token prompt left in the prefix cache."""
    ids = np.random.default_rng(7).integers(3, 1000, size=150).tolist()
    with BatchEngine(m) as eng:
        whole = eng.submit(ids, max_new_tokens=1, logprobs=5, temperature=0).result(60)
    with BatchEngine(m, prefix_cache_blocks=4) as eng:
        eng.submit(ids[:130], max_new_tokens=1).result(60)
        reused = eng.submit(ids, max_new_tokens=1, logprobs=5, temperature=0).result(60)
    a, b = whole.logprobs[0], reused.logprobs[0]
    return {"reused_tokens": reused.reused_prompt_tokens, "top5_whole": a.top, "top5_reused": b.top,
            "same_bits": a.top == b.top, "max_abs_diff": max(abs(x[1] - y[1]) for x, y in zip(a.top, b.top))}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=SMOLLM)
    ap.add_argument("--dtypes", nargs="+", default=["int8", "float32", "bfloat16"])
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    rows = []
    for dtype in args.dtypes:
        m = decodelab.load(args.model, dtype=dtype, threads=args.threads)
        step_ms(m, 1, True, 3)  # warm up
        for B in (1, 2, 4, 8, 16, 32):
            fixed, default = step_ms(m, B, True), step_ms(m, B, False)
            rows.append(dict(dtype=dtype, batch=B, fixed_rows_ms=fixed, default_ms=default))
            print(f"{dtype:9s} B={B:2d}: fixed rows {fixed:6.1f} ms/step ({B / fixed * 1000:6.0f} tok/s), "
                  f"default {default:6.1f} ms", flush=True)
        for n in (1, 4, 16, 64):
            tps = engine_tokens_per_s(m, n)
            rows.append(dict(dtype=dtype, requests=n, engine_tokens_per_s=tps))
            print(f"{dtype:9s} BatchEngine, {n:2d} requests: {tps:6.0f} tok/s", flush=True)
    reuse = {}
    for dtype in ("float32", "int8"):
        reuse[dtype] = prefix_reuse_changes_bits(decodelab.load(args.model, dtype=dtype, threads=args.threads))
        print(f"prefix reuse, {dtype}:", reuse[dtype])
    out = {"model": os.path.basename(args.model), "threads": args.threads, "rows": rows, "prefix_reuse": reuse}
    with open(os.path.join(HERE, "results", "batching.json"), "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
