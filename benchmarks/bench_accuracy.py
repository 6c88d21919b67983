"""What reduced precision costs in accuracy: logit error against fp32 and perplexity on a fixed
text, for load(dtype="bfloat16"), load(dtype="int8") and load(dtype="w8a8") weights and for bf16
and int8 KV caches.

    python benchmarks/bench_accuracy.py [--json bench_accuracy.json] [--only-gguf]

stories260K (a real trained model) is scored on the fixed story below, tokenised with its own
vocabulary; the GPT-2 124M and Llama 110M shapes (random weights, so perplexity means nothing)
get the logit error over a pseudo-random 256-token sequence. Logit error: max and mean |logit -
fp32 logit| over every position, and how often the argmax agrees with fp32's.

Two paths per setting: "forward" scores the whole text in one pass (the prefill kernels);
"decode" feeds it one token at a time through a KV cache (the kernels generation runs after the
prompt; a bf16 or int8 cache rounds keys and values there). bfloat16 and int8 "forward" run twice: with
bf16_matmul (the default: the prompt's matmuls round their inputs to bf16, where the CPU has
native bf16 products) and without ("-fp32in": bf16 weights with fp32 inputs, "-panels": the
int8 kernel's 16-bit inputs).

The shared SmolLM2-135M-Instruct Q4_1 GGUF (a real model in llama.cpp's 4-bit format) is scored
teacher-forced over four windows of 513 tokens of the standard library's docstrings
(decodelab.testing.stdlib_docstrings): each dtype's top-1 agreement with the file's exact values
(dtype="float32") over 512 positions per window, and the perplexity of each, next to llama.cpp's
own logits for the same file and tokens (llama-cpp-python, where installed). --only-gguf runs that part alone.
"""
import argparse
import json
import os
import sys
import tempfile

import numpy as np

import decodelab
from decodelab import testing

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.environ.get("DECODELAB_MODELS", os.path.join(ROOT, "..", "shared", "models"))

TEXT = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the park "
        "with her dog, Max. One day, Lily saw a big red ball under a tree. She ran to get it, but "
        "the ball rolled away. Max barked and ran after the ball. Lily laughed and said, \"Good dog, "
        "Max!\" They played with the ball until the sun went down. Then Lily and Max went home. Her "
        "mom gave them a warm bowl of soup. Lily was happy. She said, \"Today was the best day.\"")


def nll(logits, ids):
    """Mean negative log-likelihood of ids[1:] given the logits at ids[:-1]."""
    x = logits[:-1].astype(np.float64)
    lse = np.log(np.exp(x - x.max(1, keepdims=True)).sum(1)) + x.max(1)
    return float(np.mean(lse - x[np.arange(len(x)), ids[1:]]))


GGUF = os.path.join(MODELS, "smollm2-135m-instruct", "SmolLM2-135M-Instruct.Q4_1.gguf")


def gguf_rows(threads, windows=4):
    """SmolLM2 Q4_1: top-1 agreement with dtype="float32", mean |logit error| and perplexity over
    consecutive windows of 513 tokens of real text (512 positions each), for our dtypes and for
    llama.cpp on the same file and token ids. The first window's figures are the row's; every
    window's agreement is in per_window."""
    ref = decodelab.load(GGUF, dtype="float32", threads=threads)
    text = ref.tokenizer.encode(testing.stdlib_docstrings())
    spans = [text[513 * w:513 * (w + 1)] for w in range(windows) if len(text) >= 513 * (w + 1)]
    models = {d: decodelab.load(GGUF, dtype=d, threads=threads) for d in ("int4", "int8", "bfloat16")}
    try:
        import llama_cpp
    except ImportError:
        print("llama-cpp-python is not installed: no llama.cpp row", file=sys.stderr)
        llm = None
    else:
        llm = llama_cpp.Llama(model_path=GGUF, n_ctx=1024, n_batch=512, n_threads=threads, logits_all=True,
                              verbose=False)
    stats = {name: [] for name in ["float32", *models, *(["llama.cpp"] if llm else [])]}
    for ids in spans:
        base = ref.forward(ids)
        results = {"float32": base, **{d: m.forward(ids) for d, m in models.items()}}
        if llm:
            llm.reset()
            llm.eval(ids)
            results["llama.cpp"] = np.array(llm.scores[:len(ids)], dtype=np.float32)
        for name, lg in results.items():  # the 512 positions that predict a next token
            d = np.abs(lg - base)[:-1]
            top2 = np.sort(base[:-1], axis=1)[:, -2:]
            stats[name].append({"agree": float(np.mean(lg[:-1].argmax(1) == base[:-1].argmax(1))),
                                # positions where fp32's top two are within 0.1: where flips can happen
                                "near_ties": int(np.sum(top2[:, 1] - top2[:, 0] < 0.1)),
                                "mean_err": float(d.mean()), "max_err": float(d.max()),
                                "max_abs_logit": float(np.abs(base).max()),
                                "perplexity": float(np.exp(nll(lg, np.asarray(ids))))})
    rows = []
    for name, per in stats.items():
        first = per[0]
        rows.append({"model": "smollm2-135m Q4_1", "dtype": name, "path": "forward", "kv_cache": "-", "tokens": 512,
                     "max_abs_logit_err": first["max_err"], "mean_abs_logit_err": first["mean_err"],
                     "argmax_agreement": first["agree"], "max_abs_logit": first["max_abs_logit"],
                     "perplexity": first["perplexity"], "per_window": per,
                     "mean_argmax_agreement": float(np.mean([w["agree"] for w in per]))})
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default="bench_accuracy.json")
    ap.add_argument("--only-gguf", action="store_true", help="only the SmolLM2 Q4_1 rows")
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    a = ap.parse_args()
    rows = gguf_rows(a.threads) if os.path.exists(GGUF) else []
    with tempfile.TemporaryDirectory() as tmp:
        sources = [("stories260K", os.path.join(MODELS, "stories260K", "stories260K.bin"))]
        if a.only_gguf:
            sources = []
        for shape in () if a.only_gguf else ("gpt2-124m", "llama-110m"):
            sources.append((shape, testing.write_checkpoint(os.path.join(tmp, shape), shape)))
        for name, path in sources:
            ref = decodelab.load(path)
            if name == "stories260K":
                ids = ref.tokenizer.encode(TEXT)
            else:
                ids = np.random.default_rng(0).integers(3, ref.config.vocab_size, 256).tolist()
            base = ref.forward(ids)
            del ref
            settings = [("float32", "forward", "-"), ("bfloat16", "forward", "-"), ("bfloat16-fp32in", "forward", "-"),
                        ("int8", "forward", "-"), ("int8-panels", "forward", "-"),
                        ("float32", "decode", "float32"), ("float32", "decode", "bfloat16"),
                        ("float32", "decode", "int8"),
                        ("bfloat16", "decode", "float32"), ("bfloat16", "decode", "bfloat16"),
                        ("int8", "decode", "float32"), ("int8", "decode", "bfloat16"), ("int8", "decode", "int8"),
                        ("w8a8", "forward", "-"), ("w8a8", "decode", "float32")]
            models = {}
            for dtype, path_kind, kv in settings:
                # "bfloat16-fp32in", "int8-panels": loaded with bf16_matmul=False
                m = models.get(dtype) or models.setdefault(dtype, decodelab.load(
                    path, dtype=dtype.split("-")[0], bf16_matmul="-" not in dtype))
                if path_kind == "forward":
                    lg = m.forward(ids)
                else:
                    c = m.new_cache(dtype=kv)
                    lg = np.stack([m.prefill(ids[:1], c)] + [m.decode(t, c) for t in ids[1:]])
                d = np.abs(lg - base)
                row = {"model": name, "dtype": dtype, "path": path_kind, "kv_cache": kv, "tokens": len(ids),
                       "max_abs_logit_err": float(d.max()),
                       "mean_abs_logit_err": float(d.mean()),
                       "argmax_agreement": float(np.mean(lg.argmax(1) == base.argmax(1))),
                       "max_abs_logit": float(np.abs(base).max())}
                if name == "stories260K":
                    row["perplexity"] = float(np.exp(nll(lg, np.asarray(ids))))
                rows.append(row)
    for r in rows:
        if "per_window" in r:
            print(f"{r['model']} {r['dtype']:<10} top-1 agreement per window of 512: "
                  + " ".join(f"{w['agree']:.3f}" for w in r["per_window"]) + f"  (mean {r['mean_argmax_agreement']:.3f}; "
                  "fp32 top-2 margins under 0.1: " + " ".join(str(w["near_ties"]) for w in r["per_window"]) + ")")
    print(f"{'model':<12} {'dtype':<15} {'path':<8} {'KV':<9} {'tokens':>6} {'max |err|':>10} {'mean |err|':>11} "
          f"{'argmax agree':>13} {'perplexity':>11}")
    for r in rows:
        ppl = f"{r['perplexity']:.3f}" if "perplexity" in r else "-"
        print(f"{r['model']:<12} {r['dtype']:<15} {r['path']:<8} {r['kv_cache']:<9} {r['tokens']:>6} "
              f"{r['max_abs_logit_err']:>10.2e} "
              f"{r['mean_abs_logit_err']:>11.2e} {r['argmax_agreement']:>13.3f} {ppl:>11}")
    with open(a.json, "w") as f:
        json.dump({"argv": sys.argv, "text": TEXT, "python": sys.version.split()[0], "rows": rows}, f, indent=2)
    print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
