"""DRY beside llama.cpp's own sampler (through llama-cpp-python) on random contexts: how many
penalised logits differ, and by how much, with and without the exponent clamp.

    python benchmarks/dry_llama_cpp.py [--windows 400] [--seed 0]

Each window is a random context of 16-700 tokens built from repeated runs (so that runs of every
length occur, up to past the clamp at floor(88.7228391 / ln base)), random logits over SmolLM2's
49,152 tokens, and a random multiplier, base (1.1-3.5) and allowed length. llama.cpp's sampler
needs a vocabulary, so SmolLM2's GGUF file is opened vocabulary-only; no sequence breakers.
Results go to benchmarks/results/dry_llama_cpp.json.
"""
import argparse
import ctypes
import json
import os

import numpy as np

import decodelab.samplers as S

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.environ.get("DECODELAB_MODELS", os.path.join(HERE, "..", "..", "shared", "models"))
SMOLLM = os.path.join(MODELS, "smollm2-135m-instruct", "SmolLM2-135M-Instruct.Q4_1.gguf")


def llama_dry(vocab, logits, context, mult, base, allowed, last_n):
    import llama_cpp as L

    # This llama.cpp call reads -1 as 0 (off); its command line turns -1 into the context size.
    smpl = L.llama_sampler_init_dry(vocab, mult, base, allowed, last_n if last_n > 0 else 4096, None, 0)
    try:
        for t in context:
            L.llama_sampler_accept(smpl, int(t))
        n = len(logits)
        data = (L.llama_token_data * n)(*[L.llama_token_data(i, float(v), 0.0) for i, v in enumerate(logits)])
        arr = L.llama_token_data_array(data=data, size=n, selected=-1, sorted=False)
        L.llama_sampler_apply(smpl, ctypes.byref(arr))
        out = np.empty(n, dtype=np.float32)
        for k in range(arr.size):
            out[arr.data[k].id] = arr.data[k].logit
        return out
    finally:
        L.llama_sampler_free(smpl)


def window(rng, n_vocab):
    """A context of repeated runs, its logits and DRY settings."""
    pieces, length = [], int(rng.integers(16, 700))
    while sum(len(p) for p in pieces) < length:
        if pieces and rng.random() < 0.6:
            pieces.append(pieces[int(rng.integers(len(pieces)))][: int(rng.integers(1, 40))])
        else:
            pieces.append(rng.integers(0, 64, size=int(rng.integers(1, 12))))
    context = np.concatenate(pieces)[:length]
    if rng.random() < 0.3:  # one long repeat: the exponent reaches the clamp
        unit = rng.integers(0, 64, size=int(rng.integers(1, 4)))
        context = np.tile(unit, 700 // len(unit) + 1)[: int(rng.integers(300, 700))]
    logits = rng.normal(0, 4, size=n_vocab).astype(np.float32)
    settings = dict(mult=float(np.float32(rng.uniform(0.1, 3.0))), base=float(np.float32(rng.uniform(1.1, 3.5))),
                    allowed=int(rng.integers(1, 5)), last_n=int(rng.choice([-1, 64, 256])))
    return context.astype(np.int64), logits, settings


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--windows", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    import llama_cpp as L

    L.llama_backend_init()
    params = L.llama_model_default_params()
    params.vocab_only = True
    model = L.llama_model_load_from_file(SMOLLM.encode(), params)
    vocab = L.llama_model_get_vocab(model)
    n_vocab = L.llama_vocab_n_tokens(vocab)
    rng = np.random.default_rng(args.seed)
    rows = {"clamped": [0, 0, 0.0], "not clamped": [0, 0, 0.0]}  # windows, windows that differ, max rel diff
    for _ in range(args.windows):
        ctx, x, s = window(rng, n_vocab)
        ours = S.DRY(multiplier=s["mult"], base=s["base"], allowed_length=s["allowed"], last_n=s["last_n"],
                     sequence_breakers=[]).apply(x, ctx)
        theirs = llama_dry(vocab, x, ctx, s["mult"], s["base"], s["allowed"], s["last_n"])
        max_exp = int(np.float32(88.7228391) / np.log(np.float32(s["base"])))
        penalised = x - ours
        clamped = bool(np.any(penalised >= s["mult"] * np.float64(np.float32(s["base"])) ** max_exp * 0.999))
        row = rows["clamped" if clamped else "not clamped"]
        row[0] += 1
        differ = ours != theirs
        if differ.any():
            row[1] += 1
            rel = np.abs(ours[differ] - theirs[differ]) / np.maximum(np.abs(theirs[differ]), 1e-30)
            row[2] = max(row[2], float(rel.max()))
    L.llama_model_free(model)
    out = {"windows": args.windows, "seed": args.seed, "vocab": n_vocab,
           "rows": [{"kind": k, "windows": v[0], "windows_that_differ": v[1], "max_relative_difference": v[2]}
                    for k, v in rows.items()]}
    for r in out["rows"]:
        print(f"{r['kind']:>12}: {r['windows']} windows, {r['windows_that_differ']} differ, "
              f"max relative difference {r['max_relative_difference']:.3g}")
    with open(os.path.join(HERE, "results", "dry_llama_cpp.json"), "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
