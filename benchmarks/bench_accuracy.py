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
teacher-forced over the first 513 tokens of the standard library's docstrings
(decodelab.testing.stdlib_docstrings): each dtype's top-1 agreement with the file's exact values
(dtype="float32") over 512 positions, and the perplexity of each, next to llama.cpp's own logits
for the same file and tokens (llama-cpp-python, where installed). --only-gguf runs that part alone.
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


def gguf_rows(threads):
    """SmolLM2 Q4_1: top-1 agreement with dtype="float32" and perplexity over 512 positions of real
    text, for our dtypes and for llama.cpp on the same file and token ids."""
    ref = decodelab.load(GGUF, dtype="float32", threads=threads)
    ids = ref.tokenizer.encode(testing.stdlib_docstrings())[:513]
    base = ref.forward(ids)
    del ref
    results = {"float32": base}
    for dtype in ("int4", "int8", "bfloat16"):
        results[dtype] = decodelab.load(GGUF, dtype=dtype, threads=threads).forward(ids)
    try:
        import llama_cpp
    except ImportError:
        print("llama-cpp-python is not installed: no llama.cpp row", file=sys.stderr)
    else:
        llm = llama_cpp.Llama(model_path=GGUF, n_ctx=1024, n_batch=512, n_threads=threads, logits_all=True,
                              verbose=False)
        llm.eval(ids)
        results["llama.cpp"] = np.array(llm.scores[:len(ids)], dtype=np.float32)
    rows = []
    for name, lg in results.items():  # the 512 positions that predict a next token
        d = np.abs(lg - base)[:-1]
        rows.append({"model": "smollm2-135m Q4_1", "dtype": name, "path": "forward", "kv_cache": "-",
                     "tokens": len(ids) - 1, "max_abs_logit_err": float(d.max()), "mean_abs_logit_err": float(d.mean()),
                     "argmax_agreement": float(np.mean(lg[:-1].argmax(1) == base[:-1].argmax(1))),
                     "max_abs_logit": float(np.abs(base).max()), "perplexity": float(np.exp(nll(lg, np.asarray(ids))))})
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
