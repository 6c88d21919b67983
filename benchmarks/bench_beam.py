"""Beam search cost per generated token relative to greedy, decodelab vs transformers, on the
same checkpoints and thread count.

    python benchmarks/bench_beam.py [--json bench_beam.json]

For each model: greedy and 4-beam search over a 32-token prompt, 64 new tokens, EOS off
(every run makes the same number of steps). Reports ms per generated token and the beam/greedy
ratio for each engine, and the speed ratio decodelab / transformers.
"""
import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np
import torch
from transformers import AutoModelForCausalLM

import decodelab
from decodelab import testing

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.environ.get("DECODELAB_MODELS", os.path.join(ROOT, "..", "shared", "models"))


def best_of(fn, repeats):
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return min(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="+", default=["stories260K", "gpt2-124m"])
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--beams", type=int, default=4)
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--json", default="bench_beam.json")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.models:
            out = os.path.join(tmp, name)
            if name == "stories260K":
                folder = testing.convert_llama2c(os.path.join(MODELS, "stories260K", "stories260K.bin"), out)
            else:
                folder = testing.write_checkpoint(out, name)
            ours = decodelab.load(folder, threads=a.threads)
            ref = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
            ids = np.random.default_rng(0).integers(3, ours.config.vocab_size, size=32).tolist()
            n = a.new_tokens

            def d_greedy():
                ours.generate(ids, max_new_tokens=n, eos_token_id=[])

            def d_beam():
                ours.generate(ids, max_new_tokens=n, eos_token_id=[], num_beams=a.beams, early_stopping="never")

            def t_run(beams):
                with torch.no_grad():
                    ref.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                 do_sample=False, max_new_tokens=n, min_new_tokens=n, num_beams=beams,
                                 early_stopping="never" if beams > 1 else False, eos_token_id=None, pad_token_id=0)

            d_greedy(), d_beam(), t_run(1)  # warm-up
            r = {"model": name, "threads": a.threads, "new_tokens": n, "num_beams": a.beams,
                 "decodelab_greedy_ms": best_of(d_greedy, a.repeats) / n * 1e3,
                 "decodelab_beam_ms": best_of(d_beam, a.repeats) / n * 1e3,
                 "transformers_greedy_ms": best_of(lambda: t_run(1), a.repeats) / n * 1e3,
                 "transformers_beam_ms": best_of(lambda: t_run(a.beams), a.repeats) / n * 1e3}
            r["decodelab_beam_over_greedy"] = r["decodelab_beam_ms"] / r["decodelab_greedy_ms"]
            r["transformers_beam_over_greedy"] = r["transformers_beam_ms"] / r["transformers_greedy_ms"]
            r["beam_speedup_vs_transformers"] = r["transformers_beam_ms"] / r["decodelab_beam_ms"]
            rows.append(r)
    print(f"{'model':<12} {'engine':<13} {'greedy ms/tok':>14} {'beam ms/tok':>12} {'beam/greedy':>12}")
    for r in rows:
        for eng in ("decodelab", "transformers"):
            print(f"{r['model']:<12} {eng:<13} {r[eng + '_greedy_ms']:>14.3f} {r[eng + '_beam_ms']:>12.3f} "
                  f"{r[eng + '_beam_over_greedy']:>11.2f}x")
        print(f"{'':<12} beam search: decodelab {r['beam_speedup_vs_transformers']:.2f}x the speed of transformers")
    with open(a.json, "w") as f:
        json.dump({"argv": sys.argv, "rows": rows}, f, indent=2)
    print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
