"""Greedy decoding speed, decodelab vs transformers (torch CPU), same checkpoint, same threads.

    python benchmarks/bench_greedy.py [--models stories260K gpt2-124m llama-110m] [--json out.json]

Prints a table (prefill tokens/s, decode tokens/s, ratio) and writes JSON. Speed is measured
here, never asserted in tests. Peers beyond transformers arrive with the speed work.
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


def checkpoint(name, tmp):
    out = os.path.join(tmp, name)
    if name == "stories260K":
        return testing.convert_llama2c(os.path.join(MODELS, "stories260K", "stories260K.bin"), out)
    return testing.write_checkpoint(out, name)


def bench_decodelab(folder, prompt, n_new, threads, repeats):
    m = decodelab.load(folder, threads=threads)
    m.generate(prompt, max_new_tokens=n_new, eos_token_id=[])  # warm-up
    best = None
    for _ in range(repeats):
        g = m.generate(prompt, max_new_tokens=n_new, eos_token_id=[])
        r = (len(prompt) / g.prefill_seconds, (n_new - 1) / g.decode_seconds)
        best = r if best is None or r[1] > best[1] else best
    return best


def bench_transformers(folder, prompt, n_new, threads, repeats):
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(threads)
    m = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    ids = torch.tensor([prompt])
    mask = torch.ones_like(ids)

    def run(n):
        t = time.perf_counter()
        with torch.no_grad():
            m.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=n, min_new_tokens=n,
                       eos_token_id=None, pad_token_id=0)
        return time.perf_counter() - t

    run(n_new)  # warm-up
    best = None
    for _ in range(repeats):
        t1, tn = run(1), run(n_new)
        r = (len(prompt) / t1, (n_new - 1) / max(tn - t1, 1e-9))
        best = r if best is None or r[1] > best[1] else best
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="+", default=["stories260K", "gpt2-124m", "llama-110m"])
    ap.add_argument("--prompt-tokens", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", default="bench_greedy.json")
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.models:
            folder = checkpoint(name, tmp)
            vocab = decodelab.load(folder).config.vocab_size
            prompt = np.random.default_rng(0).integers(3, vocab, size=a.prompt_tokens).tolist()
            ours = bench_decodelab(folder, prompt, a.new_tokens, a.threads, a.repeats)
            ref = bench_transformers(folder, prompt, a.new_tokens, a.threads, a.repeats)
            rows.append({"model": name, "threads": a.threads, "prompt_tokens": a.prompt_tokens,
                         "new_tokens": a.new_tokens,
                         "decodelab": {"prefill_tok_s": ours[0], "decode_tok_s": ours[1]},
                         "transformers": {"prefill_tok_s": ref[0], "decode_tok_s": ref[1]},
                         "decode_ratio": ours[1] / ref[1], "prefill_ratio": ours[0] / ref[0]})
    hdr = f"{'model':<12} {'engine':<13} {'prefill tok/s':>14} {'decode tok/s':>13}"
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        for eng in ("decodelab", "transformers"):
            print(f"{r['model']:<12} {eng:<13} {r[eng]['prefill_tok_s']:>14.1f} {r[eng]['decode_tok_s']:>13.1f}")
        print(f"{'':<12} {'ratio':<13} {r['prefill_ratio']:>13.2f}x {r['decode_ratio']:>12.2f}x")
    with open(a.json, "w") as f:
        json.dump({"argv": sys.argv, "rows": rows}, f, indent=2)
    print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
