"""What a grammar costs per decode step on the shared SmolLM2 Q4_1 file: the grammar stage's mask
time per token (llguidance's matcher plus the call into Python) against the decode step, and the
decode time per token with the grammar against without it, greedy, on one chat prompt per
constraint. Target (issue 42): the grammar stage adds under 10 % to a decode step. The mask's share
of a free step is the steadier figure; the two runs' step times also differ by their tokens.

    python benchmarks/bench_grammar.py [--rounds 3] [--json benchmarks/results/bench_grammar.json]

Each figure is the best of `rounds` rounds, each round running free then constrained in one process.
"""
import argparse
import json
import os
import platform

import decodelab
from decodelab import Grammar, samplers
from decodelab.samplers.grammar import GrammarMask

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.environ.get("DECODELAB_MODELS", os.path.join(HERE, "..", "..", "shared", "models"))
PATH = os.path.join(MODELS, "smollm2-135m-instruct", "SmolLM2-135M-Instruct.Q4_1.gguf")

PERSON = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 24}, "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "role": {"enum": ["student", "teacher", "researcher"]},
    "address": {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": "string"}},
                "required": ["city", "zip"]},
    "skills": {"type": "array", "items": {"type": "string"}, "maxItems": 4}},
    "required": ["name", "age", "role", "address", "skills"]}
CASES = [
    ("json_schema", Grammar.json_schema(PERSON), "Give me a person as JSON: name, age, role, address and skills."),
    ("json_object", Grammar.json_schema({"type": "object"}), "Describe Paris as a JSON object."),
    ("regex", Grammar.regex(r"[A-Z][a-z]+( [a-z]+)+\."), "Write one sentence about the sea."),
    # The same pattern with a bounded repetition, which makes llguidance's mask far costlier.
    ("regex {3,12}", Grammar.regex(r"[A-Z][a-z]+( [a-z]+){3,12}\."), "Write one sentence about the sea."),
    ("lark", Grammar('start: "Answer: " /[0-9]+/ " because " /[a-z ,]{10,80}/ "."'), "What is 12 times 12? Explain."),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("--json", default=os.path.join(HERE, "results", "bench_grammar.json"))
    a = ap.parse_args()
    m = decodelab.load(PATH)
    eos = m._default_eos()
    rows = []
    for name, grammar, question in CASES:
        p = m.tokenizer.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True,
                                            tokenize=True)
        best = {}
        for _ in range(a.rounds):
            free = m.generate(p, max_new_tokens=a.tokens, temperature=0, eos_token_id=[])
            mask = GrammarMask(grammar, m.tokenizer, m.config.vocab_size, eos)
            con = m.generate(p, max_new_tokens=a.tokens, sampler=samplers.Chain([mask, samplers.Greedy()]))
            n_free, n_con = len(free.token_ids) - 1, len(con.token_ids) - 1
            r = {"free_ms_per_token": 1e3 * free.decode_seconds / n_free,
                 "grammar_ms_per_token": 1e3 * con.decode_seconds / max(n_con, 1),
                 "mask_ms_per_token": 1e3 * mask.mask_seconds / mask.mask_calls, "tokens": len(con.token_ids)}
            for k, v in r.items():
                best[k] = min(best.get(k, v), v) if k != "tokens" else v
        best["stage_share"] = best["mask_ms_per_token"] / best["free_ms_per_token"]
        best["step_overhead"] = best["grammar_ms_per_token"] / best["free_ms_per_token"] - 1
        rows.append(dict(constraint=name, **best))
        print(f"{name:12s} decode {best['free_ms_per_token']:.2f} ms/token free, {best['grammar_ms_per_token']:.2f} "
              f"with the grammar ({best['step_overhead']:+.1%}); mask {best['mask_ms_per_token']:.3f} ms/token "
              f"({best['stage_share']:.1%} of a free step), {best['tokens']} tokens")
    with open(a.json, "w") as f:
        json.dump({"argv": ["benchmarks/bench_grammar.py"] + [f"--rounds={a.rounds}", f"--tokens={a.tokens}"],
                   "host": platform.processor() or platform.machine(), "model": os.path.basename(PATH),
                   "dtype": m.dtype, "threads": m.threads, "rows": rows}, f, indent=2)
    print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
