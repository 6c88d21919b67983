"""Decode tokens/s after a short prompt on the shared SmolLM2 Q4_1 file: llama.cpp (llama-cpp-python)
beside decodelab's int8 and int4 weights, same threads, in one run. A quick check on the way to
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
    with open(os.path.join(HERE, "results", "bench_q4_decode.json"), "w") as f:
        json.dump({"threads": args.threads, "tokens": args.tokens, "decode_tok_s": rows}, f, indent=1)


if __name__ == "__main__":
    main()
