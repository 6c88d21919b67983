"""One linear layer through the engine's kernels: multiply-adds per second for each weight dtype.

    python benchmarks/bench_linear.py [--rows 4096] [--shapes 768x2304 3072x768] [--repeats 10] [--json out.json]

The rate of the matrix products alone, the part of a prompt that each dtype's kernel decides
(fp32: the oneDNN matmul; bf16: that matmul on weights widened per call; int8 and w8a8: the
integer panel kernels). The test binding converts the fp32 weights once per call and then runs the
product `--repeats` times on that copy; the time of a one-product call (conversion plus one
product) is subtracted, leaving the products alone. Rounds are interleaved across dtypes and each
keeps its best, as this shared host's speed drifts.
"""
import argparse
import json
import time

import numpy as np

from decodelab._native import _core

DTYPES = ["float32", "bfloat16", "int8", "w8a8"]


def call_time(x, w, dtype, repeats):
    t = time.perf_counter()
    _core.linear(x, w, dtype, repeats)
    return time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--shapes", nargs="+", default=["768x2304", "3072x768"], help="IN x OUT of the layer")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=10, help="products per timed call (>= 2)")
    ap.add_argument("--json", default="bench_linear.json")
    a = ap.parse_args()
    if a.repeats < 2:
        ap.error(f"--repeats must be >= 2, got {a.repeats}")
    rng = np.random.default_rng(0)
    rows = []
    for shape in a.shapes:
        n_in, n_out = (int(v) for v in shape.split("x"))
        x = rng.standard_normal((a.rows, n_in)).astype(np.float32)
        w = (0.05 * rng.standard_normal((n_out, n_in))).astype(np.float32)
        many = {d: float("inf") for d in DTYPES}
        one = {d: float("inf") for d in DTYPES}
        for _ in range(a.rounds):
            for d in DTYPES:
                many[d] = min(many[d], call_time(x, w, d, a.repeats))
                one[d] = min(one[d], call_time(x, w, d, 1))
        for d in DTYPES:
            t = (many[d] - one[d]) / (a.repeats - 1)  # (conversion + R products) - (conversion + 1)
            rows.append({"rows": a.rows, "in": n_in, "out": n_out, "dtype": d, "seconds": t,
                         "gmac_s": a.rows * n_in * n_out / t / 1e9})
    print(f"{'rows':>6} {'in':>6} {'out':>6} {'dtype':>9} {'GMAC/s':>8} {'vs fp32':>8}")
    for r in rows:
        f32 = next(q for q in rows if q["in"] == r["in"] and q["out"] == r["out"] and q["dtype"] == "float32")
        print(f"{r['rows']:6d} {r['in']:6d} {r['out']:6d} {r['dtype']:>9} {r['gmac_s']:8.1f} "
              f"{r['gmac_s'] / f32['gmac_s']:7.2f}x")
    with open(a.json, "w") as f:
        json.dump({"argv": vars(a), "rows": rows}, f, indent=1)
    print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
