"""Speculative decoding on SmolLM2-135M-Instruct: decode tokens/s and acceptance against plain
greedy decoding of the same model, in one run.

- A draft model: the same GGUF file loaded with int8 weights, drafting for an fp32 target and a
  bf16 target, at several draft lengths k; with the draft's cost per step against the target's.
- Prompt lookup on input-grounded tasks (repeating a text with an edit, summarising it), for bf16
  and fp32 targets; and transformers' prompt_lookup_num_tokens on the same file dequantized to
  fp32, against its own plain greedy decode.

    python benchmarks/bench_speculative.py [--max-tokens 120] [--threads 2] [--no-transformers]

Decode speed counts the tokens after the first over the time after the first (decodelab:
Generation.decode_seconds; transformers: the time of the whole generation less that of a
one-token one). Results go to benchmarks/results/bench_speculative.json.
"""
import argparse
import json
import os
import time

import numpy as np

import decodelab

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.environ.get("DECODELAB_MODELS", os.path.join(HERE, "..", "..", "shared", "models"))
FOLDER = os.path.join(MODELS, "smollm2-135m-instruct")
NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"

TEXT = ("The lighthouse stood at the edge of the cliff for more than a hundred years. Every night its keeper "
        "climbed the narrow stairs, trimmed the wick and wiped the salt from the glass, so that the ships passing "
        "in the dark would know where the rocks were. When the storms came, he stayed awake until morning, watching "
        "the beam sweep across the water.")
TASKS = {
    "edit": f"Rewrite this text, replacing the word 'keeper' with 'guardian':\n\n{TEXT}",
    "summarise": f"Summarise this text in two sentences, using its own words:\n\n{TEXT}",
    "story": "Write a short story about a robot who learns to paint.",
}


def chat_ids(model, task):
    return model.tokenizer.apply_chat_template([{"role": "user", "content": TASKS[task]}], add_generation_prompt=True,
                                               tokenize=True)


def decode_rate(model, ids, max_tokens, repeats=3, **kw):
    """Best decode tokens/s of `repeats` runs, and the last Generation."""
    best, g = 0.0, None
    for _ in range(repeats):
        g = model.generate(ids, max_new_tokens=max_tokens, **kw)
        best = max(best, g.decode_tokens_per_second)
    return best, g


def step_ms(model, repeats=20):
    cache = model.new_cache()
    model.prefill(list(range(10, 42)), cache)
    t0 = time.perf_counter()
    for i in range(repeats):
        model.decode(100 + i, cache)
    return 1000 * (time.perf_counter() - t0) / repeats


def transformers_rows(prompt_ids, max_tokens, threads):
    """transformers' decode tokens/s, plain and with prompt_lookup_num_tokens=10, on the same ids
    (its GGUF tokenizer gives the same ids: tests/test_gguf_model.py)."""
    import torch
    import transformers

    torch.set_num_threads(threads)
    m = transformers.AutoModelForCausalLM.from_pretrained(FOLDER, gguf_file=NAME, dtype=torch.float32).eval()
    ids = torch.tensor([prompt_ids])

    def run(n, **kw):
        with torch.no_grad():
            t0 = time.perf_counter()
            out = m.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False, **kw)
            return time.perf_counter() - t0, out.shape[1] - ids.shape[1]

    run(4)
    first = min(run(1)[0] for _ in range(2))
    rows = {}
    for label, kw in (("plain", {}), ("prompt_lookup", {"prompt_lookup_num_tokens": 10})):
        t, n = min(run(max_tokens, **kw) for _ in range(2))
        rows[label] = (n - 1) / (t - first)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--max-tokens", type=int, default=120)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-transformers", action="store_true")
    args = ap.parse_args()
    path = os.path.join(FOLDER, NAME)
    draft = decodelab.load(path, dtype="int8", threads=args.threads)
    rows = []

    def report(**r):
        rows.append(r)
        print("  ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items()), flush=True)

    # A draft model: int8 drafting for fp32 and bf16 targets, on an open-ended story.
    for dtype in ("float32", "bfloat16"):
        target = decodelab.load(path, dtype=dtype, threads=args.threads)
        ids = chat_ids(target, "story")
        target.generate(ids, max_new_tokens=4)
        plain, want = decode_rate(target, ids, args.max_tokens)
        cost = step_ms(draft) / step_ms(target)
        report(target=dtype, draft="int8", k=0, decode_tok_s=plain, speedup=1.0, draft_step_cost=cost)
        for k in (2, 3, 4, 6):
            rate, g = decode_rate(target, ids, args.max_tokens, draft=draft, num_draft_tokens=k)
            assert g.token_ids == want.token_ids, "speculative greedy must equal plain greedy"
            report(target=dtype, draft="int8", k=k, decode_tok_s=rate, speedup=rate / plain,
                   acceptance=g.speculation.acceptance_rate, tokens_per_round=g.speculation.tokens_per_round,
                   draft_step_cost=cost)

    # Prompt lookup on input-grounded tasks, bf16 and fp32 targets; transformers' prompt lookup beside them.
    targets = {d: decodelab.load(path, dtype=d, threads=args.threads) for d in ("bfloat16", "float32")}
    for task in ("edit", "summarise"):
        for dtype, target in targets.items():
            ids = chat_ids(target, task)
            plain, want = decode_rate(target, ids, args.max_tokens)
            rate, g = decode_rate(target, ids, args.max_tokens, draft="prompt_lookup", num_draft_tokens=10)
            assert g.token_ids == want.token_ids
            report(target=dtype, draft="prompt_lookup", task=task, k=10, decode_tok_s=rate, plain_tok_s=plain,
                   speedup=rate / plain, acceptance=g.speculation.acceptance_rate,
                   tokens_per_round=g.speculation.tokens_per_round)
        if not args.no_transformers:
            hf = transformers_rows(ids, args.max_tokens, args.threads)
            report(target="transformers fp32", draft="prompt_lookup", task=task, k=10,
                   decode_tok_s=hf["prompt_lookup"], plain_tok_s=hf["plain"], speedup=hf["prompt_lookup"] / hf["plain"])
    out = {"model": NAME, "threads": args.threads, "max_tokens": args.max_tokens, "rows": rows}
    with open(os.path.join(HERE, "results", "bench_speculative.json"), "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
