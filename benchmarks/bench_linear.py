"""One linear layer through the engine's kernels: multiply-adds per second for each weight dtype.

    python benchmarks/bench_linear.py [--rows 4096] [--shapes 768x2304 3072x768] [--repeats 10] [--json out.json]

The rate of the matrix products alone, the part of a prompt that each dtype's kernel decides
(fp32: the oneDNN matmul; bf16: oneDNN's bf16 matmul on inputs rounded to bf16, as load() runs
by default where the CPU has native bf16 (else the same as the next), and "bf16-fp32in" the fp32
matmul on weights widened per call, as with load(bf16_matmul=False); int8: the bf16 matmul on the
int8 values, as load() runs by default where the CPU has native bf16 (else the panels), and
"int8-panels" the integer panel kernel, as with
load(bf16_matmul=False); w8a8: the integer panel kernel; int4: the 4-bit panel kernel on inputs
rounded to int8 per 32). The timing binding converts the fp32
weights once per call, untimed, and
times each of `--repeats` products on that copy. Rounds are interleaved across dtypes and each
keeps its best product, as this shared host's speed drifts. `--rows 1` times the one-row (decode)
kernels instead.
"""
import argparse
import json

import numpy as np

from decodelab._native import _core

DTYPES = ["float32", "bfloat16", "bf16-fp32in", "int8", "int8-panels", "w8a8", "int4"]


def seconds(x, w, d, repeats):
    if d == "bf16-fp32in":
        return _core.linear_seconds(x, w, "bfloat16", repeats, bf16_matmul=False)
    if d == "int8-panels":
        return _core.linear_seconds(x, w, "int8", repeats, bf16_matmul=False)
    return _core.linear_seconds(x, w, d, repeats, bf16_matmul=d in ("bfloat16", "int8"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--shapes", nargs="+", default=["768x2304", "3072x768"], help="IN x OUT of the layer")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=10, help="products timed per round")
    ap.add_argument("--json", default="bench_linear.json")
    a = ap.parse_args()
    if a.repeats < 1 or a.rounds < 1 or a.rows < 1:
        ap.error(f"--repeats, --rounds and --rows must be >= 1, got {a.repeats}, {a.rounds}, {a.rows}")
    rng = np.random.default_rng(0)
    rows = []
    for shape in a.shapes:
        n_in, n_out = (int(v) for v in shape.split("x"))
        x = rng.standard_normal((a.rows, n_in)).astype(np.float32)
        w = (0.05 * rng.standard_normal((n_out, n_in))).astype(np.float32)
        best = {d: float("inf") for d in DTYPES}
        for _ in range(a.rounds):
            for d in DTYPES:
                best[d] = min(best[d], float(seconds(x, w, d, a.repeats).min()))
        for d in DTYPES:
            t = best[d]
            rows.append({"rows": a.rows, "in": n_in, "out": n_out, "dtype": d, "seconds": t,
                         "gmac_s": a.rows * n_in * n_out / t / 1e9})
    print(f"{'rows':>6} {'in':>6} {'out':>6} {'dtype':>11} {'GMAC/s':>8} {'vs fp32':>8}")
    for r in rows:
        f32 = next(q for q in rows if q["in"] == r["in"] and q["out"] == r["out"] and q["dtype"] == "float32")
        print(f"{r['rows']:6d} {r['in']:6d} {r['out']:6d} {r['dtype']:>11} {r['gmac_s']:8.1f} "
              f"{r['gmac_s'] / f32['gmac_s']:7.2f}x")
    with open(a.json, "w") as f:
        json.dump({"argv": vars(a), "rows": rows}, f, indent=1)
    print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
