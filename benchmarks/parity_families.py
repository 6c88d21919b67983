"""Each model family at its published widths against transformers on the same random weights: the
check run before an architecture counts as supported (tests/test_families.py runs the tiny shapes
in CI). Layers are cut to --layers where two fp32 copies of the whole model would not fit here;
pythia-160m runs whole.

    python benchmarks/parity_families.py [--layers 2] [--shapes qwen2.5-0.5b ...] [--json PATH]

Per shape: max |logit difference| of a 64-token forward, of a 48-token prefill then 16 cached
decode steps, and whether 32 greedy tokens are identical. Results go to
benchmarks/results/parity_families.json.
"""
import argparse
import gc
import json
import os
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SHAPES = ["qwen2.5-0.5b", "qwen3-0.6b", "llama-3.2-1b", "mistral-7b", "phi-3-mini", "gemma-2-2b", "gemma-3-1b",
          "pythia-160m"]


def run(shape, layers, tmp):
    import torch
    from transformers import AutoModelForCausalLM

    import decodelab
    from decodelab import testing

    spec = dict(testing.SHAPES[shape])
    if shape != "pythia-160m":
        spec["num_hidden_layers"] = layers
    if "pad_token_id" not in spec and spec.get("family") == "phi3":
        spec["pad_token_id"] = 0
    folder = testing.write_checkpoint(os.path.join(tmp, shape), spec, seed=1)
    ours = decodelab.load(folder)
    ref = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager").eval()
    ids = np.random.default_rng(2).integers(3, ours.config.vocab_size, 64).tolist()
    with torch.no_grad():
        want = ref(torch.tensor([ids])).logits[0].numpy()
        greedy = ref.generate(torch.tensor([ids[:16]]), attention_mask=torch.ones(1, 16, dtype=torch.long),
                              do_sample=False, max_new_tokens=32, eos_token_id=None,
                              pad_token_id=0)[0, 16:].tolist()
    forward = float(np.abs(ours.forward(ids) - want).max())
    cache = ours.new_cache()
    steps = [ours.prefill(ids[:48], cache)] + [ours.decode(t, cache) for t in ids[48:]]
    cached = float(np.abs(np.stack(steps) - want[47:]).max())
    same = ours.generate(ids[:16], max_new_tokens=32, eos_token_id=[]).token_ids == greedy
    row = {"shape": shape, "layers": ours.config.n_layers, "hidden": ours.config.hidden_size,
           "vocab": ours.config.vocab_size, "max_abs_logit": float(np.abs(want).max()),
           "forward_max_diff": forward, "cached_max_diff": cached, "greedy_32_identical": same}
    del ours, ref
    gc.collect()
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--shapes", nargs="+", default=SHAPES, choices=SHAPES)
    ap.add_argument("--json", default=os.path.join(HERE, "results", "parity_families.json"))
    a = ap.parse_args()
    if a.layers < 1:
        ap.error(f"--layers must be at least 1, got {a.layers}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for shape in a.shapes:
            t0 = time.perf_counter()
            row = run(shape, a.layers, tmp)
            row["seconds"] = round(time.perf_counter() - t0, 1)
            rows.append(row)
            print(f"{shape:14s} layers {row['layers']:2d}  forward {row['forward_max_diff']:.2e}  cached "
                  f"{row['cached_max_diff']:.2e}  greedy identical {row['greedy_32_identical']}  "
                  f"({row['seconds']} s)", flush=True)
            for name in os.listdir(tmp):
                import shutil
                shutil.rmtree(os.path.join(tmp, name), ignore_errors=True)
    with open(a.json, "w") as f:
        json.dump({"argv": sys.argv, "rows": rows}, f, indent=1)
    bad = [r["shape"] for r in rows if r["forward_max_diff"] > 1e-4 or r["cached_max_diff"] > 1e-4
           or not r["greedy_32_identical"]]
    print("all within 1e-4 and greedy identical" if not bad else f"outside: {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
