"""Decode attention alone: one query over a paged KV cache of n_ctx positions, every layer, read
from memory as a decode step reads it (the weights stream through the caches in between).

    python benchmarks/bench_attention.py [--ctx 128 640 1024] [--rounds 5] [--repeats 10] [--json out.json]

For the GPT-2 124M shape (12 KV heads) and the Llama 110M shape (4 KV heads for 12 query heads),
fp32, bf16 and int8 caches (int8: one fp32 scale per row of head_dim values): milliseconds per decode step, the cache bytes read per second, and that
rate against the read-bandwidth probe of the same run. Rounds are interleaved across the rows and
each keeps its best step, as this shared host's speed drifts.
"""
import argparse
import json
import os

from decodelab._native import _core

SHAPES = {  # n_layers, n_heads, n_kv_heads, head_dim
    "gpt2-124m": (12, 12, 12, 64),
    "llama-110m": (12, 12, 4, 64),
}
KV = {"float32": 4, "bfloat16": 2, "int8": 1}  # bytes per value; an int8 row adds its 4-byte scale


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ctx", type=int, nargs="+", default=[128, 640, 1024], help="cache positions")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=10, help="steps timed per round")
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--json", default="bench_attention.json")
    a = ap.parse_args()
    for name in ("rounds", "repeats", "threads"):
        if getattr(a, name) < 1:
            ap.error(f"--{name} must be >= 1, got {getattr(a, name)}")
    if min(a.ctx) < 1:
        ap.error(f"--ctx values must be >= 1, got {min(a.ctx)}")
    cases = [(s, kv, n) for s in SHAPES for kv in KV for n in a.ctx]
    best = {c: float("inf") for c in cases}
    probe = 0.0
    for _ in range(a.rounds):
        for c in cases:
            s, kv, n = c
            best[c] = min(best[c], float(_core.attention_seconds(*SHAPES[s], n, kv, a.repeats, a.threads).min()))
        probe = max(probe, _core.read_bandwidth(256 << 20, a.threads, 3))
    rows = []
    print(f"{'shape':>11} {'KV':>9} {'ctx':>5} {'ms/step':>8} {'GB/s':>6} {'of probe':>8}")
    for s, kv, n in cases:
        layers, _, kvh, hd = SHAPES[s]
        nbytes = 2 * layers * kvh * n * (hd * KV[kv] + (4 if kv == "int8" else 0))
        t = best[(s, kv, n)]
        rows.append({"shape": s, "kv": kv, "ctx": n, "seconds": t, "bytes": nbytes, "gb_s": nbytes / t / 1e9,
                     "of_probe": nbytes / t / probe})
        print(f"{s:>11} {kv:>9} {n:5d} {t * 1e3:8.3f} {nbytes / t / 1e9:6.1f} {nbytes / t / probe:8.0%}")
    print(f"read-bandwidth probe: {probe / 1e9:.1f} GB/s ({a.threads} threads)")
    with open(a.json, "w") as f:
        json.dump({"argv": vars(a), "probe_bytes_s": probe, "rows": rows}, f, indent=1)
    print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
