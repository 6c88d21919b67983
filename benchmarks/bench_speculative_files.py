"""Speculative decoding on real files: Qwen2.5-Coder-0.5B-Instruct drafting for
Qwen2.5-Coder-1.5B-Instruct (the same 151,936-token vocabulary), both Q4_K_M as
../shared/models/fetch --large downloads them, at their default dtype (int4), on code tasks.

    python benchmarks/bench_speculative_files.py [--max-tokens 128] [--threads 2] [--k 2 3 4 5 6]
        [--p-min 0 0.6]

Per task, draft length k and draft_p_min (0: every round drafts k; p > 0: a round ends where the
draft's likeliest next token is below p, so k is the most): decode tokens/s against the target's
own greedy decode (best of --repeats runs each, the same tokens checked), acceptance, tokens per
round, drafts per round, the draft's cost per step against the target's (c), and the standard
cost model's prediction for those rounds: tokens per round / (drafts per round x c + v), with v
the target's cost to verify a round's drafts + 1 tokens in one call against one decode step
(measured per length with every row's logits, as verification computes them, averaged over
the rounds). Beside it, where the run's time went: each round's drafting and verification in plain
decode steps of the same run (s.draft_seconds and s.verify_seconds). Prompt lookup (draft="prompt_lookup") runs
beside them. llama.cpp (llama-cpp-python, which exposes prompt lookup but no draft model) runs
the same prompt ids in a process of its own, greedy, alone and with LlamaPromptLookupDecoding
(10 tokens), as the peer rows. Results go to benchmarks/results/bench_speculative_files.json.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

import decodelab
from decodelab import testing

HERE = os.path.dirname(os.path.abspath(__file__))

SNIPPET = '''def load_scores(path):
    f = open(path)
    scores = {}
    for line in f.readlines():
        name, score = line.split(",")
        scores[name] = int(score)
    return scores
'''
PARTIAL = '''import math


class Vector:
    """A 2-D vector."""

    def __init__(self, x: float, y: float):
        self.x = x
        self.y = y

    def __add__(self, other: "Vector") -> "Vector":
        return Vector(self.x + other.x, self.y + other.y)

    def __sub__(self, other: "Vector") -> "Vector":
'''
TASKS = {
    "write": "Write a Python function `merge_intervals(intervals)` that merges overlapping intervals given as "
             "(start, end) tuples and returns them sorted. Include a docstring and type hints.",
    "complete": f"Complete this file: finish __sub__, then add length(), dot() and normalized() methods.\n\n"
                f"```python\n{PARTIAL}```",
    "edit": f"Edit this function to use a `with` block, skip blank lines, and raise ValueError naming the line "
            f"number on a malformed line. Return only the code.\n\n```python\n{SNIPPET}```",
}


def chat_ids(model, task):
    return model.tokenizer.apply_chat_template([{"role": "user", "content": TASKS[task]}],
                                               add_generation_prompt=True, tokenize=True)


def best_rate(model, ids, n, repeats, **kw):
    """The best decode tokens/s of `repeats` runs, and that run's Generation."""
    best, g = 0.0, None
    for _ in range(repeats):
        run = model.generate(ids, max_new_tokens=n, **kw)
        if g is None or run.decode_tokens_per_second > best:
            best, g = run.decode_tokens_per_second, run
    return best, g


def step_seconds(model, tokens=1, repeats=12):
    """Seconds of one decode call of `tokens` tokens after a 64-token prompt (best of repeats)."""
    best = float("inf")
    for i in range(repeats):
        cache = model.new_cache()
        model.prefill(list(range(100, 164)), cache)
        t0 = time.perf_counter()
        if tokens == 1:
            model.decode(200 + i, cache)
        else:  # k + 1 tokens onto the cache in one call with every row's logits, as verification runs
            model._engine.forward(np.arange(300, 300 + tokens, dtype=np.int64), cache, True)
        best = min(best, time.perf_counter() - t0)
    return best


def llamacpp_rows(path, prompts, max_tokens, threads, repeats):
    """llama.cpp's greedy decode of each prompt (token ids) alone and with its prompt lookup draft:
    decode tokens/s after the first token, best of repeats; run in a process of its own."""
    import llama_cpp
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    rows = []
    for draft in (None, "prompt_lookup"):
        llm = llama_cpp.Llama(path, n_ctx=1024, n_batch=512, n_threads=threads, n_threads_batch=threads,
                              logits_all=draft is not None, verbose=False,
                              draft_model=LlamaPromptLookupDecoding(num_pred_tokens=10) if draft else None)
        for task, ids in prompts.items():
            best, out = 0.0, []
            for _ in range(repeats):
                out, t_first = [], None
                for tok in llm.generate(ids, top_k=1, temp=0.0, reset=True):
                    if t_first is None:
                        t_first = time.perf_counter()
                    out.append(tok)
                    if len(out) == max_tokens or tok == llm.token_eos():
                        break
                if len(out) > 1:
                    best = max(best, (len(out) - 1) / (time.perf_counter() - t_first))
            rows.append({"task": task, "engine": "llama.cpp", "draft": draft, "decode_tok_s": best,
                         "tokens": len(out), "token_ids": out})
        del llm
    return rows


def main():
    if sys.argv[1:2] == ["--llama-cpp-worker"]:  # llama.cpp in a process of its own
        job = json.loads(sys.stdin.read())
        print(json.dumps(llamacpp_rows(job["path"], job["prompts"], job["max_tokens"], job["threads"],
                                       job["repeats"])))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--k", type=int, nargs="+", default=[2, 3, 4, 5, 6])
    ap.add_argument("--p-min", type=float, nargs="+", default=[0.0])
    ap.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    a = ap.parse_args()
    paths = {n: testing.fetched_model(n) for n in ("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b")}
    if not all(paths.values()):
        raise SystemExit("needs ../shared/models/fetch --large (Qwen2.5-Coder 0.5B and 1.5B)")
    target = decodelab.load(paths["qwen2.5-coder-1.5b"], threads=a.threads)
    draft = decodelab.load(paths["qwen2.5-coder-0.5b"], threads=a.threads)
    target.generate([1, 2, 3], max_new_tokens=4)
    draft.generate([1, 2, 3], max_new_tokens=4)
    t1, d1 = step_seconds(target), step_seconds(draft)
    c = d1 / t1
    verify = {k: step_seconds(target, k + 1) / t1 for k in range(max(a.k) + 1)}
    print(f"target step {t1 * 1e3:.1f} ms, draft step {d1 * 1e3:.1f} ms: c = {c:.3f}; verify k+1 tokens / one step: "
          + ", ".join(f"k={k} {verify[k]:.2f}" for k in a.k), flush=True)
    rows = []
    for task in a.tasks:
        ids = chat_ids(target, task)
        plain, want = best_rate(target, ids, a.max_tokens, a.repeats)
        rows.append({"task": task, "draft": None, "k": 0, "decode_tok_s": plain, "speedup": 1.0,
                     "tokens": len(want.token_ids), "token_ids": list(want.token_ids)})
        print(f"{task}: plain {plain:.1f} tok/s, {len(want.token_ids)} tokens", flush=True)
        for p_min in a.p_min:
            for k in a.k:
                rate, g = best_rate(target, ids, a.max_tokens, a.repeats, draft=draft, num_draft_tokens=k,
                                    draft_p_min=p_min or None)
                assert g.token_ids == want.token_ids, "speculative greedy must equal plain greedy"
                s = g.speculation
                drafts = s.drafted / len(s.rounds)
                v = sum(verify[len(r.draft)] for r in s.rounds) / len(s.rounds)
                predicted = s.tokens_per_round / (drafts * c + v)
                # Where the run's time went, per round in plain decode steps of this run.
                step = 1.0 / plain
                draft_steps = s.draft_seconds / len(s.rounds) / step
                verify_steps = s.verify_seconds / len(s.rounds) / step
                rows.append({"task": task, "draft": "qwen2.5-coder-0.5b", "k": k, "draft_p_min": p_min,
                             "decode_tok_s": rate, "speedup": rate / plain, "acceptance": s.acceptance_rate,
                             "tokens_per_round": s.tokens_per_round, "drafts_per_round": drafts, "draft_cost": c,
                             "verify_cost": v, "predicted_speedup": predicted,
                             "run_draft_steps_per_round": draft_steps, "run_verify_steps_per_round": verify_steps})
                print(f"  k={k} p_min={p_min}: {rate:.1f} tok/s, {rate / plain:.2f}x (model {predicted:.2f}x), "
                      f"acceptance {s.acceptance_rate:.2f}, {s.tokens_per_round:.2f} tokens and {drafts:.2f} drafts "
                      f"a round; a round took {draft_steps:.2f} steps drafting and {verify_steps:.2f} verifying",
                      flush=True)
        rate, g = best_rate(target, ids, a.max_tokens, a.repeats, draft="prompt_lookup", num_draft_tokens=10)
        assert g.token_ids == want.token_ids
        rows.append({"task": task, "draft": "prompt_lookup", "k": 10, "decode_tok_s": rate, "speedup": rate / plain,
                     "acceptance": g.speculation.acceptance_rate, "tokens_per_round": g.speculation.tokens_per_round})
        print(f"  prompt lookup: {rate:.1f} tok/s, {rate / plain:.2f}x, {g.speculation.tokens_per_round:.2f} tokens a "
              "round", flush=True)
    # The peer: llama.cpp on the same prompt ids, after decodelab's rows (one engine at a time).
    job = {"path": paths["qwen2.5-coder-1.5b"], "prompts": {t: chat_ids(target, t) for t in a.tasks},
           "max_tokens": a.max_tokens, "threads": a.threads, "repeats": a.repeats}
    del target, draft
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--llama-cpp-worker"], input=json.dumps(job),
                       capture_output=True, text=True, check=True)
    peer = json.loads(r.stdout.strip().splitlines()[-1])
    plain_peer = {row["task"]: row["decode_tok_s"] for row in peer if row["draft"] is None}
    ours = {row["task"]: row for row in rows if row["draft"] is None}
    for row in peer:
        row["speedup"] = row["decode_tok_s"] / plain_peer[row["task"]]
        row["same_tokens_as_decodelab"] = row["token_ids"] == ours[row["task"]]["token_ids"]
        del row["token_ids"]
        print(f"llama.cpp {row['task']} {row['draft'] or 'plain'}: {row['decode_tok_s']:.1f} tok/s, "
              f"{row['speedup']:.2f}x its own greedy", flush=True)
    for row in ours.values():
        del row["token_ids"]
    rows += peer
    out = {"target": os.path.basename(paths["qwen2.5-coder-1.5b"]), "draft": os.path.basename(paths["qwen2.5-coder-0.5b"]),
           "threads": a.threads, "max_tokens": a.max_tokens, "host": decodelab.cpu_info(), "target_step_s": t1,
           "draft_step_s": d1, "rows": rows}
    with open(os.path.join(HERE, "results", "bench_speculative_files.json"), "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
