"""The CPU's integer multiply-add peak next to the int4 kernel's rate on a long prompt.

    python benchmarks/bench_int8_peak.py [--rows 512] [--threads 2] [--json out.json]

A prompt's matrix products are bound by compute, not by memory, so their ceiling is the rate at
which the CPU can multiply int8 values at all: native/int8_peak.cc times independent chains of the
instruction the kernels use (vpdpbusd, or pmaddubsw + pmaddwd without VNNI) on every thread, and
vpdpwssd, the int16 product of the int8 dtype (whose activations are 16-bit), on AVX-512 VNNI.
Beside it, the int4 and int8 kernels time Qwen2.5-1.5B's seven layer shapes at `--rows` rows, weighted as
one transformer layer: the share of the peak a prompt can reach, and the prompt rate that a
multiple of a peer would need (`--peer-prompt-tok-s`, tokens per second) as a share of the peak,
beside the whole prompt's own share (`--prompt-tok-s`, decodelab's prompt rate from bench_speed.py).
"""
import argparse
import json
import os
import pathlib
import subprocess
import tempfile

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
# (in, out) of one Qwen2.5-1.5B layer's products: q, k, v, o, gate, up, down.
QWEN15_LAYER = [(1536, 1536), (1536, 256), (1536, 256), (1536, 1536), (1536, 8960), (1536, 8960), (8960, 1536)]
QWEN15_LAYERS = 28


def peak(threads):
    with tempfile.TemporaryDirectory() as tmp:
        exe = os.path.join(tmp, "int8_peak")
        subprocess.run(["c++", "-O2", "-march=native", "-fopenmp", str(HERE / "native" / "int8_peak.cc"), "-o", exe],
                       check=True)
        out = subprocess.run([exe], check=True, capture_output=True, text=True,
                             env={**os.environ, "OMP_NUM_THREADS": str(threads)}).stdout
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=512)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--peer-prompt-tok-s", type=float, default=None,
                    help="a peer's prompt rate on Qwen2.5-1.5B, to show what multiples of it would need")
    ap.add_argument("--prompt-tok-s", type=float, default=None,
                    help="decodelab's prompt rate on Qwen2.5-1.5B (bench_speed.py), as a share of the peak")
    ap.add_argument("--json", default="bench_int8_peak.json")
    a = ap.parse_args()
    if a.rows < 1 or a.threads < 1 or a.rounds < 1:
        ap.error(f"--rows, --threads and --rounds must be >= 1, got {a.rows}, {a.threads}, {a.rounds}")
    os.environ["OMP_NUM_THREADS"] = str(a.threads)  # read when the core's OpenMP runtime loads, below
    from decodelab._native import _core

    p = peak(a.threads)
    best_peak = max(v for k, v in p.items() if k.endswith("_gmac_s"))
    rng = np.random.default_rng(0)
    layer_macs = sum(n_in * n_out for n_in, n_out in QWEN15_LAYER)
    rates = {}
    for dtype in ("int4", "int8"):
        seconds = 0.0
        for n_in, n_out in QWEN15_LAYER:
            x = rng.standard_normal((a.rows, n_in)).astype(np.float32)
            w = (0.05 * rng.standard_normal((n_out, n_in))).astype(np.float32)
            seconds += min(float(_core.linear_seconds(x, w, dtype, 3).min()) for _ in range(a.rounds))
        rates[dtype] = a.rows * layer_macs / seconds / 1e9
    kernel = rates["int4"]
    result = {"peak": p, "rows": a.rows, "threads": a.threads, "int4_gmac_s": kernel,
              "int4_share_of_peak": kernel / best_peak,
              "prompt_tok_s_at_peak": best_peak * 1e9 / (layer_macs * QWEN15_LAYERS),
              "int8_gmac_s": rates["int8"]}
    print(json.dumps(p))
    print(f"int4 kernel, one Qwen2.5-1.5B layer at {a.rows} rows: {kernel:.1f} GMAC/s, "
          f"{kernel / best_peak:.0%} of the best peak ({best_peak:.1f} GMAC/s)")
    # The int8 dtype multiplies int16 activations: its ceiling is the int16 product's, not int8's.
    int16 = p.get("int16_vnni512_gmac_s")
    if int16:
        result["int8_share_of_int16_peak"] = rates["int8"] / int16
        print(f"int8 kernel (int16 activations), the same layer: {rates['int8']:.1f} GMAC/s, "
              f"{rates['int8'] / int16:.0%} of the int16 peak ({int16:.1f} GMAC/s)")
    print(f"a 1.5B prompt at the peak, layers' products alone: {result['prompt_tok_s_at_peak']:.0f} tok/s")
    if a.prompt_tok_s:
        result["prompt_share_of_peak"] = a.prompt_tok_s * layer_macs * QWEN15_LAYERS / 1e9 / best_peak
        print(f"the whole prompt at {a.prompt_tok_s:.0f} tok/s: {result['prompt_share_of_peak']:.0%} of the peak")
    if a.peer_prompt_tok_s:
        for m in (1.5, 2, 3):
            need = m * a.peer_prompt_tok_s * layer_macs * QWEN15_LAYERS / 1e9
            result[f"x{m:g}_peer_share_of_peak"] = need / best_peak
            print(f"{m:g}x the peer ({m * a.peer_prompt_tok_s:.0f} tok/s) needs {need:.0f} GMAC/s, "
                  f"{need / best_peak:.0%} of the peak")
    with open(a.json, "w") as f:
        json.dump({"argv": vars(a), **result}, f, indent=1)
    print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
