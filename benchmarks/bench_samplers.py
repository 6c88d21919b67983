"""Per-token cost of each sampler, and of the keyword chains, on a 50,257-token vocabulary.

    python benchmarks/bench_samplers.py [--json bench_samplers.json]

Timed inside C++ (decodelab._core.time_sampler), as the decode loop runs them; each run first
restores the logits from a copy, and the "copy only" row is that restore alone. Logits are
GPT-2-like: standard normal x 3; the context is 256 random tokens.
"""
import argparse
import json
import sys

import numpy as np

from decodelab import _core
from decodelab import samplers as S

V = 50257


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default="bench_samplers.json")
    ap.add_argument("--repeats", type=int, default=300)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    logits = (rng.standard_normal(V) * 3).astype(np.float32)
    ctx = rng.integers(0, V, size=256).tolist()
    cases = [
        ("copy only", S.Chain([])),
        ("Temperature(0.7)", S.Temperature(0.7)),
        ("TopK(40)", S.TopK(40)),
        ("TopP(0.9)", S.TopP(0.9)),
        ("MinP(0.05)", S.MinP(0.05)),
        ("TypicalP(0.9)", S.TypicalP(0.9)),
        ("EpsilonCutoff(3e-4)", S.EpsilonCutoff(3e-4)),
        ("EtaCutoff(3e-4)", S.EtaCutoff(3e-4)),
        ("TopNSigma(1.0)", S.TopNSigma(1.0)),
        ("XTC(1.0, 0.1)", S.XTC(1.0, 0.1)),
        ("RepetitionPenalty(1.1)", S.RepetitionPenalty(1.1)),
        ("PresencePenalty(0.5)", S.PresencePenalty(0.5)),
        ("FrequencyPenalty(0.5)", S.FrequencyPenalty(0.5)),
        ("NoRepeatNGram(3)", S.NoRepeatNGram(3)),
        ("LogitBias(10 tokens)", S.LogitBias({i: 1.0 for i in range(10)})),
        ("SuppressTokens(10)", S.SuppressTokens(range(10))),
        ("DRY(0.8)", S.DRY(0.8)),
        ("Mirostat(5, 0.1)", S.Mirostat(5.0, 0.1)),
        ("Greedy", S.Greedy()),
        ("Dist", S.Dist(0)),
        ("chain hf: T=0.7, top_k=40, top_p=0.9", S.build_chain(order="hf", temperature=0.7, top_k=40, top_p=0.9)),
        ("chain vllm: T=0.7, min_p=0.05, top_p=0.9",
         S.build_chain(order="vllm", temperature=0.7, min_p=0.05, top_p=0.9)),
        ("chain llama.cpp: T=0.8, top_k=40, top_p=0.95, min_p=0.05, rep=1.1",
         S.build_chain(order="llama.cpp", temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, repetition_penalty=1.1)),
        ("preset balanced", S.build_chain(**S.PRESETS["balanced"])),
    ]
    rows = []
    for name, s in cases:
        sec = _core.time_sampler(s._core, logits, ctx, a.repeats)
        rows.append({"sampler": name, "us_per_token": sec * 1e6})
    w = max(len(r["sampler"]) for r in rows)
    print(f"{'sampler':<{w}}  us/token  (vocab {V}, {a.repeats} runs)")
    for r in rows:
        print(f"{r['sampler']:<{w}}  {r['us_per_token']:8.1f}")
    with open(a.json, "w") as f:
        json.dump({"argv": sys.argv, "vocab": V, "rows": rows}, f, indent=2)
    print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
