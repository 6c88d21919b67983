"""Decode tokens/s after a short prompt on the shared SmolLM2 Q4_1 file: llama.cpp (llama-cpp-python)
beside decodelab's int8 and int4 weights, same threads, in one run; with each one's teacher-forced
top-1 agreement with the exact fp32 read over 512 tokens of README.md, and the share of the file's
Q4_1 weights that int4's rounding rule gives back exactly. A quick check on the way to
bench_speed.py's full 4-bit rows.

    python benchmarks/bench_q4_decode.py [--threads 2] [--tokens 64]

Decode speed: llama.cpp's time for `tokens` new tokens less its time for one, over tokens - 1;
decodelab's Generation.decode_tokens_per_second; the best of three runs each. Results go to
benchmarks/results/bench_q4_decode.json.
"""
import argparse
import json
import os
import time

import decodelab

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.environ.get("DECODELAB_MODELS", os.path.join(HERE, "..", "..", "shared", "models"))
PATH = os.path.join(MODELS, "smollm2-135m-instruct", "SmolLM2-135M-Instruct.Q4_1.gguf")
PROMPT = "Once upon a time"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=64)
    args = ap.parse_args()
    rows = {}
    import llama_cpp

    llm = llama_cpp.Llama(model_path=PATH, n_threads=args.threads, n_threads_batch=args.threads, n_ctx=512,
                          verbose=False)

    def run(n):
        llm.reset()
        t0 = time.perf_counter()
        out = llm.create_completion(PROMPT, max_tokens=n, temperature=0.0, top_k=1)
        return time.perf_counter() - t0, out["usage"]["completion_tokens"]

    run(4)
    first = min(run(1)[0] for _ in range(3))
    t, n = min(run(args.tokens) for _ in range(3))
    rows["llama.cpp"] = (n - 1) / (t - first)
    for dtype in ("int8", "int4"):
        m = decodelab.load(PATH, dtype=dtype, threads=args.threads)
        ids = m.tokenizer.encode(PROMPT)
        m.generate(ids, max_new_tokens=4)
        rows[f"decodelab {dtype}"] = max(m.generate(ids, max_new_tokens=args.tokens, eos_token_id=[])
                                         .decode_tokens_per_second for _ in range(3))
    for k, v in rows.items():
        print(f"{k:16s} {v:6.1f} tok/s decode  ({v / rows['llama.cpp']:.2f}x llama.cpp)")
    ref = decodelab.load(PATH, dtype="float32", threads=args.threads)
    with open(os.path.join(HERE, "..", "README.md"), encoding="utf-8") as f:
        ids = ref.tokenizer.encode(f.read())[:512]
    top = ref.forward(ids).argmax(-1)
    agree = {d: float((decodelab.load(PATH, dtype=d, threads=args.threads).forward(ids).argmax(-1) == top).mean())
             for d in ("int8", "int4")}
    print("top-1 agreement with fp32 over 512 README tokens:", agree)
    exact = q4_1_values_kept()
    print(f"Q4_1 weights int4's rounding gives back exactly: {exact:.6f}")
    with open(os.path.join(HERE, "results", "bench_q4_decode.json"), "w") as f:
        json.dump({"threads": args.threads, "tokens": args.tokens, "decode_tok_s": rows, "top1_agreement": agree,
                   "q4_1_values_kept": exact}, f, indent=1)


def q4_1_values_kept() -> float:
    """The file's Q4_1 weights, decoded, then rounded by int4's rule (tests/test_kernels.py checks the
    kernel against this emulation): per block of 32, min, 15 steps to the max, nearest step."""
    import numpy as np

    from decodelab.formats.gguf import blocks as gguf_quants
    from decodelab.formats.gguf.reader import GGUFFile

    same = total = 0
    with GGUFFile(PATH) as g:
        for t in g.tensors.values():
            if t.type.name != "Q4_1":
                continue
            b = gguf_quants.dequantize_tensor(g, t).reshape(-1, 32)
            lo = b.min(axis=1, keepdims=True)
            d = ((b.max(axis=1, keepdims=True) - lo) / np.float32(15)).astype(np.float32)
            inv = np.where(d > 0, np.float32(1) / np.where(d > 0, d, 1), 0).astype(np.float32)
            q = np.minimum(15, np.floor((b - lo) * inv + np.float32(0.5)))
            same += int(((d * q + lo).astype(np.float32) == b).sum())
            total += b.size
    return same / total


if __name__ == "__main__":
    main()
