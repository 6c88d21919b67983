"""One phase of the engine on one checkpoint, timed alone: for A/B runs of a kernel change and for
profiling (`perf record python benchmarks/bench_phase.py ...`), where bench_speed.py's full matrix
is too slow and too mixed.

    python benchmarks/bench_phase.py FOLDER --phase decode [--dtype int8] [--kv bfloat16]
        [--prompt 512] [--steps 100] [--batch 16] [--repeats 3]

Phases: "prefill" (one prompt of --prompt tokens), "decode" (--steps one-token steps after a
prompt of --prompt tokens), "batch" (--steps steps of decode_batch over --batch sequences, each
after a 32-token prompt). Prints the best of --repeats in tokens/s and one JSON line.

"first": the first prompt after load(), which bench_speed.py times (after the same 8-token
warm-up), against the --repeats prompts after it, each on a new cache: tokens/s and the minor page
faults each took (memory mapped for the first time), and the seconds load() took.

--profile: each repeat runs under Model.profile(), and the best one's table is printed, op by op,
with the read-bandwidth probe taken after it and the bound it gives: the probe over the bytes of
weights and cache one pass reads (decode and batch), and the share of it the phase ran at.
"""
import argparse
import contextlib
import json
import os
import resource
import time

import numpy as np

import decodelab


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("folder")
    ap.add_argument("--phase", choices=["prefill", "decode", "batch", "first"], required=True)
    ap.add_argument("--dtype", default="float32", help="weights: float32, bfloat16, int8 or w8a8")
    ap.add_argument("--kv", default="float32", help="KV cache: float32 or bfloat16")
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--profile", action="store_true", help="print the best repeat's op profile")
    a = ap.parse_args()
    t = time.perf_counter()
    m = decodelab.load(a.folder, dtype=a.dtype, threads=a.threads)
    load_s = time.perf_counter() - t
    V = m.config.vocab_size
    rng = np.random.default_rng(0)
    prompt = rng.integers(3, V, size=a.prompt).tolist()
    m.generate(prompt[:8], max_new_tokens=4, eos_token_id=[], cache=m.new_cache(dtype=a.kv))  # warm-up
    if a.phase == "first":
        rates, faults = [], []
        for _ in range(1 + a.repeats):
            c = m.new_cache(dtype=a.kv)
            f = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            t = time.perf_counter()
            m.prefill(prompt, c)
            rates.append(a.prompt / (time.perf_counter() - t))
            faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f)
        print(f"{os.path.basename(os.path.normpath(a.folder))} weights {a.dtype} KV {a.kv}: load {load_s:.2f} s; "
              f"first prompt {rates[0]:.1f} tok/s, {faults[0]} page faults; then "
              + ", ".join(f"{r:.1f} ({n})" for r, n in zip(rates[1:], faults[1:])))
        print(json.dumps({"folder": a.folder, "phase": a.phase, "dtype": a.dtype, "kv": a.kv, "prompt": a.prompt,
                          "threads": a.threads, "load_s": load_s, "tok_s": rates, "page_faults": faults}))
        return
    best, best_prof = 0.0, None
    for _ in range(a.repeats):
        prof = m.profile() if a.profile else contextlib.nullcontext()
        with prof as p:
            rate = run_once(a, m, prompt, rng, V)
        if rate > best:
            best, best_prof = rate, p
    extra = {}
    if best_prof is not None:
        extra = report_profile(best_prof, a.phase, a.threads)
    print(f"{os.path.basename(os.path.normpath(a.folder))} {a.phase} weights {a.dtype} KV {a.kv}: {best:.1f} tok/s "
          f"(best of {a.repeats})")
    print(json.dumps({"folder": a.folder, "phase": a.phase, "dtype": a.dtype, "kv": a.kv, "prompt": a.prompt,
                      "steps": a.steps, "batch": a.batch, "threads": a.threads, "tok_s": best, **extra}))


def report_profile(prof, phase, threads):
    """Prints the profile with the probe; returns the per-op milliseconds and the bound figures."""
    from decodelab._native import _core
    prof.bandwidth = _core.read_bandwidth(256 << 20, threads)
    print(prof)
    ph = "prompt" if phase == "prefill" else "decode"
    rows = prof.ops(ph)
    out = {"profile_ms_per_pass": {r.op: r.ms_per_pass for r in rows}, "bandwidth_bytes_s": prof.bandwidth}
    if ph == "decode" and prof.passes["decode"]:
        weights = sum(r.weight_bytes for r in rows) / prof.passes["decode"]
        kv = prof.kv_bytes["decode"] / prof.passes["decode"]
        per_pass = prof.seconds["decode"] / prof.passes["decode"]
        bound = prof.bandwidth / (weights + kv)  # passes per second at the probe's rate
        print(f"a pass reads {weights / 1e6:.1f} MB of weights and {kv / 1e6:.1f} MB of cache: bound "
              f"{bound:.1f} passes/s, run at {1 / per_pass / bound:.0%} of it")
        out.update(weight_bytes_per_pass=weights, kv_bytes_per_pass=kv, bound_share=1 / per_pass / bound)
    return out


def run_once(a, m, prompt, rng, V):
    """One repeat of the phase; its tokens/s."""
    if a.phase == "prefill":
        c = m.new_cache(dtype=a.kv)
        t = time.perf_counter()
        m.prefill(prompt, c)
        rate = a.prompt / (time.perf_counter() - t)
    elif a.phase == "decode":
        c = m.new_cache(dtype=a.kv)
        m.prefill(prompt, c)
        t = time.perf_counter()
        for _ in range(a.steps):
            m.decode(5, c)
        rate = a.steps / (time.perf_counter() - t)
    else:
        caches = []
        for _ in range(a.batch):
            c = m.new_cache(dtype=a.kv)
            m.prefill(rng.integers(3, V, size=32).tolist(), c)
            caches.append(c)
        toks = [5] * a.batch
        t = time.perf_counter()
        for _ in range(a.steps):
            toks = [int(x) for x in m.decode_batch(toks, caches).argmax(1)]
        rate = a.batch * a.steps / (time.perf_counter() - t)
    return rate


if __name__ == "__main__":
    main()
