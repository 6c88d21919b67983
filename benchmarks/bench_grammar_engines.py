"""llguidance against xgrammar on the SmolLM2 tokenizer: how long each takes to read the
vocabulary and compile a JSON Schema, what a token mask costs along a recorded constrained
generation (up to the first token xgrammar's JSON grammar refuses), and whether the two allow the
same tokens at each step. The figures behind the choice
of llguidance for decodelab's grammar stage (decodelab.samplers.grammar).

    pip install llguidance xgrammar   # xgrammar's metadata pulls torch, transformers and triton
    python benchmarks/bench_grammar_engines.py [--json benchmarks/results/bench_grammar_engines.json]
"""
import argparse
import json
import os
import platform
import time

import numpy as np

import decodelab

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.environ.get("DECODELAB_MODELS", os.path.join(HERE, "..", "..", "shared", "models"))
PATH = os.path.join(MODELS, "smollm2-135m-instruct", "SmolLM2-135M-Instruct.Q4_1.gguf")
SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 24}, "age": {"type": "integer"},
    "role": {"enum": ["student", "teacher", "researcher"]},
    "address": {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": "string"}},
                "required": ["city", "zip"]},
    "skills": {"type": "array", "items": {"type": "string"}}},
    "required": ["name", "age", "role", "address", "skills"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", default=os.path.join(HERE, "results", "bench_grammar_engines.json"))
    a = ap.parse_args()
    import llguidance
    import xgrammar as xgr
    from transformers import PreTrainedTokenizerFast

    m = decodelab.load(PATH)
    V, eos = m.config.vocab_size, m._default_eos()
    p = m.tokenizer.apply_chat_template([{"role": "user", "content": "Give me a person as JSON."}],
                                        add_generation_prompt=True, tokenize=True)
    tokens = m.generate(p, json_schema=SCHEMA, max_new_tokens=200, temperature=0.8, seed=1).token_ids
    out = {"tokens": len(tokens)}

    t = time.perf_counter()
    lt = llguidance.LLTokenizer(m.tokenizer._tok.to_str(), n_vocab=V, eos_token=eos)
    out["llguidance_tokenizer_s"] = time.perf_counter() - t
    t = time.perf_counter()
    grammar = llguidance.LLMatcher.grammar_from_json_schema(SCHEMA)
    lm = llguidance.LLMatcher(lt, grammar)
    out["llguidance_compile_s"] = time.perf_counter() - t

    t = time.perf_counter()
    info = xgr.TokenizerInfo.from_huggingface(PreTrainedTokenizerFast(tokenizer_object=m.tokenizer._tok),
                                              vocab_size=V, stop_token_ids=eos)
    out["xgrammar_tokenizer_s"] = time.perf_counter() - t
    t = time.perf_counter()
    compiled = xgr.GrammarCompiler(info).compile_json_schema(json.dumps(SCHEMA))
    xm = xgr.GrammarMatcher(compiled)
    out["xgrammar_compile_s"] = time.perf_counter() - t

    words = np.zeros((V + 31) // 32, np.uint32)
    xmask = xgr.allocate_token_bitmask(1, V)
    ll_s = xg_s = 0.0
    agree = steps = 0
    out["xgrammar_refused_at"] = None
    for i, tok in enumerate(tokens):
        t = time.perf_counter()
        lm.unsafe_compute_mask_ptr(words.ctypes.data, words.nbytes)
        ll_s += time.perf_counter() - t
        t = time.perf_counter()
        xm.fill_next_token_bitmask(xmask)
        xg_s += time.perf_counter() - t
        a_ = np.unpackbits(words.view(np.uint8), bitorder="little")[:V]
        b_ = np.unpackbits(xmask[0].numpy().view(np.uint8), bitorder="little")[:V]
        agree += bool((a_ == b_).all())
        steps += 1
        assert lm.consume_token(tok)
        if tok not in eos and not xm.accept_token(tok):
            # The engines' JSON grammars differ (whitespace, here): the comparison ends there.
            out["xgrammar_refused_at"] = f"step {i}: {m.tokenizer.decode(tokens[:i])[-40:]!r} + " \
                                         f"{m.tokenizer.decode([tok])!r}"
            break
    out["steps_compared"] = steps
    out["llguidance_mask_ms"] = 1e3 * ll_s / steps
    out["xgrammar_mask_ms"] = 1e3 * xg_s / steps
    out["steps_with_equal_masks"] = agree
    for k, v in out.items():
        print(f"{k:30s} {v:.4g}" if isinstance(v, float) else f"{k:30s} {v}")
    with open(a.json, "w") as f:
        json.dump({"argv": ["benchmarks/bench_grammar_engines.py"], "host": platform.processor() or platform.machine(),
                   "llguidance": llguidance.__version__ if hasattr(llguidance, "__version__") else None,
                   **out}, f, indent=2)
    print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
