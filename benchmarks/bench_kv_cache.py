"""What the KV cache buys and costs, measured.

    python benchmarks/bench_kv_cache.py [--json bench_kv_cache.json]

1. Time per generated token against context length, with the cache (one decode step) and
   without it (a full forward over the whole sequence, as a cache-less loop must do).
2. The speedup of reusing a long shared prefix: generate after a 900-token prompt from a cold
   cache, and from a cache that already holds the prompt.
3. Memory of 4 forks of a 1,000-token cache, each decoding 100 tokens, against 4 separate caches.
4. The logit error of bfloat16 and int8 caches against fp32, over 256 positions.
Models: stories260K and a random-initialised Llama 110M shape (12 heads, 4 kv heads).
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np

import decodelab
from decodelab import testing

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.environ.get("DECODELAB_MODELS", os.path.join(ROOT, "..", "shared", "models"))
LLAMA_110M_LONG = dict(testing.SHAPES["llama-110m"], max_position_embeddings=2048)


def timed(fn, repeats):
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def per_token_vs_context(m, lengths, rng):
    rows = []
    for n in lengths:
        ids = rng.integers(3, m.config.vocab_size, size=n + 1).tolist()
        cache = m.new_cache()
        m.prefill(ids[:n], cache)

        def step():
            m.decode(ids[n], cache)
            cache.truncate(n)

        with_cache = timed(step, 7)
        without = timed(lambda: m.forward(ids), 3 if n <= 256 else 1)
        rows.append({"context": n, "with_cache_ms": with_cache * 1e3, "without_cache_ms": without * 1e3,
                     "speedup": without / with_cache})
    return rows


def prefix_reuse(m, rng, n_prefix=900, n_new=16):
    prompt = rng.integers(3, m.config.vocab_size, size=n_prefix).tolist()
    cold = timed(lambda: m.generate(prompt, max_new_tokens=n_new, eos_token_id=[]), 2)
    cache = m.new_cache()
    m.prefill(prompt[:-1], cache)
    warm_prompt = prompt

    def warm():
        m.generate(warm_prompt, max_new_tokens=n_new, eos_token_id=[], cache=cache)

    warm_t = timed(warm, 3)
    g = m.generate(warm_prompt, max_new_tokens=n_new, eos_token_id=[], cache=cache)
    return {"prefix_tokens": n_prefix, "new_tokens": n_new, "cold_ms": cold * 1e3, "warm_ms": warm_t * 1e3,
            "reused_prompt_tokens": g.reused_prompt_tokens, "speedup": cold / warm_t}


def fork_memory(m, rng):
    ids = rng.integers(3, m.config.vocab_size, size=1000).tolist()
    one = m.new_cache()
    m.prefill(ids, one)
    for t in rng.integers(3, m.config.vocab_size, size=100).tolist():
        m.decode(t, one)
    single = one.nbytes
    del one
    base = m.new_cache()
    m.prefill(ids, base)
    forks = [base.fork() for _ in range(4)]
    for f in forks:
        for t in rng.integers(3, m.config.vocab_size, size=100).tolist():
            m.decode(t, f)
    r = m.memory_report()["float32"]
    return {"single_sequence_bytes": single, "four_separate_bytes": 4 * single, "four_forks_bytes": r["bytes_in_use"],
            "ratio_to_four_separate": r["bytes_in_use"] / (4 * single),
            "ratio_to_single": r["bytes_in_use"] / single}


def cache_error(m, rng, dtype, n=256):
    ids = rng.integers(3, m.config.vocab_size, size=n).tolist()
    full = m.forward(ids)
    c = m.new_cache(dtype=dtype)
    rows = [m.prefill(ids[:1], c)] + [m.decode(t, c) for t in ids[1:]]
    err = np.abs(np.stack(rows) - full)
    same = float(np.mean(np.argmax(np.stack(rows), 1) == np.argmax(full, 1)))
    return {"positions": n, "max_abs_logit_error": float(err.max()), "mean_abs_logit_error": float(err.mean()),
            "max_abs_logit": float(np.abs(full).max()), "argmax_agreement": same}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default="bench_kv_cache.json")
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    a = ap.parse_args()
    out = {"argv": sys.argv, "threads": a.threads, "models": {}}
    with tempfile.TemporaryDirectory() as tmp:
        models = {
            "stories260K": decodelab.load(os.path.join(MODELS, "stories260K", "stories260K.bin"), threads=a.threads),
            "llama-110m": decodelab.load(testing.write_checkpoint(os.path.join(tmp, "l"), LLAMA_110M_LONG),
                                         threads=a.threads),
        }
        for name, m in models.items():
            rng = np.random.default_rng(0)
            lengths = [32, 128, 256, 500] if name == "stories260K" else [32, 128, 512, 1024]
            res = {"per_token": per_token_vs_context(m, lengths, rng),
                   "prefix_reuse": prefix_reuse(m, rng, n_prefix=400 if name == "stories260K" else 900),
                   "bf16_cache": cache_error(m, rng, "bfloat16"), "int8_cache": cache_error(m, rng, "int8")}
            if name == "llama-110m":
                res["fork_memory"] = fork_memory(m, rng)
            out["models"][name] = res
    for name, res in out["models"].items():
        print(f"\n{name}: time per generated token (ms)")
        print(f"{'context':>8} {'with cache':>11} {'without':>10} {'speedup':>8}")
        for r in res["per_token"]:
            print(f"{r['context']:>8} {r['with_cache_ms']:>11.3f} {r['without_cache_ms']:>10.2f} {r['speedup']:>7.1f}x")
        p = res["prefix_reuse"]
        print(f"prefix reuse: {p['prefix_tokens']}-token prompt + {p['new_tokens']} new tokens: cold {p['cold_ms']:.1f} ms, "
              f"cached prefix {p['warm_ms']:.1f} ms ({p['speedup']:.1f}x, {p['reused_prompt_tokens']} tokens reused)")
        for key, label in (("bf16_cache", "bf16"), ("int8_cache", "int8")):
            b = res[key]
            print(f"{label} cache over {b['positions']} positions: max |logit error| {b['max_abs_logit_error']:.2e} "
                  f"(mean {b['mean_abs_logit_error']:.2e}, max |logit| {b['max_abs_logit']:.2f}), "
                  f"argmax agreement {b['argmax_agreement']:.3f}")
        if "fork_memory" in res:
            f = res["fork_memory"]
            print(f"4 forks of a 1000-token cache, +100 tokens each: {f['four_forks_bytes'] / 2**20:.1f} MiB vs "
                  f"{f['four_separate_bytes'] / 2**20:.1f} MiB for 4 separate caches "
                  f"({f['ratio_to_four_separate']:.2f}x; {f['ratio_to_single']:.2f}x one cache)")
    with open(a.json, "w") as fh:
        json.dump(out, fh, indent=2)
    print(f"\nwrote {a.json}")


if __name__ == "__main__":
    main()
