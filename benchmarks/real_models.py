"""The fetched real GGUF files beside llama.cpp and transformers on one stored text: teacher-forced
top-1 agreement and perplexity over 512 positions.

    python benchmarks/real_models.py [--large] [--record]

The files are ../shared/models/fetch's (Qwen2.5-Coder-0.5B-Instruct and Gemma 3 270M, Q4_K_M;
--large adds Qwen2.5-Coder-1.5B). The text is tests/fixtures/real_text.json's: Python docstrings,
stored because they change between Python versions. Each engine reads the first 513 ids and
predicts ids 1..512: top-1 is the most likely next token at each position, perplexity is
exp(mean negative log-likelihood) of the actual next tokens.

Rows: decodelab at its default dtype for the file (int4) and at float32 (the file's exact values),
llama.cpp (llama-cpp-python, as a user runs it: default flash attention and KV cache), and
transformers at float32 on the dequantized file (from_pretrained(..., gguf_file=...)), the
reference. --record writes llama.cpp's and transformers' top-1 ids and perplexities into the
fixture, which tests/test_fetched_models.py checks in CI, where llama-cpp-python is not installed.
Results go to benchmarks/results/real_models.json.
"""
import argparse
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "real_text.json")
POSITIONS = 512


def scores(logits, ids):
    """(top-1 ids, perplexity) of logits rows 0..n-1 predicting ids 1..n."""
    logits = np.asarray(logits, dtype=np.float64)
    top1 = logits.argmax(-1)
    m = logits.max(-1, keepdims=True)
    logz = (m[:, 0] + np.log(np.exp(logits - m).sum(-1)))
    nll = logz - logits[np.arange(len(logits)), ids[1:]]
    return top1.tolist(), float(np.exp(nll.mean()))


def decodelab_rows(path, ids, dtype):
    import decodelab

    m = decodelab.load(path, dtype=dtype)
    return scores(m.forward(ids[:POSITIONS]), np.asarray(ids[:POSITIONS + 1]))


def llama_cpp_rows(path, ids):
    import llama_cpp

    llm = llama_cpp.Llama(model_path=path, n_ctx=2048, logits_all=True, n_threads=os.cpu_count(), verbose=False)
    own = llm.tokenize(TEXT.encode("utf-8"), add_bos=True, special=False)
    llm.eval(ids[:POSITIONS])
    out = scores(np.asarray(llm.scores[:POSITIONS]), np.asarray(ids[:POSITIONS + 1]))
    del llm
    return out, own == ids, llama_cpp.__version__


def transformers_rows(path, ids):
    import torch
    import transformers

    m = transformers.AutoModelForCausalLM.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path),
                                                          dtype=torch.float32).eval()
    with torch.no_grad():
        logits = m(torch.tensor([ids[:POSITIONS]])).logits[0].numpy()
    return scores(logits, np.asarray(ids[:POSITIONS + 1])), transformers.__version__


def agree(a, b):
    return float(np.mean(np.asarray(a) == np.asarray(b)))


def main():
    global TEXT, POSITIONS
    sys.path.insert(0, os.path.join(ROOT, "python"))
    from decodelab import testing

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--large", action="store_true", help="add Qwen2.5-Coder-1.5B (fetch --large)")
    p.add_argument("--record", action="store_true", help="write llama.cpp's and transformers' rows into the fixture")
    p.add_argument("--positions", type=int, default=POSITIONS, help=f"positions scored (default {POSITIONS})")
    args = p.parse_args()
    POSITIONS = args.positions
    fx = json.load(open(FIXTURE, encoding="utf-8"))
    TEXT = fx["text"]
    names = ["qwen2.5-coder-0.5b", "gemma-3-270m"] + (["qwen2.5-coder-1.5b"] if args.large else [])
    results = {}
    for name in names:
        path = testing.fetched_model(name)
        if path is None:
            print(f"{name}: not fetched (run ../shared/models/fetch{' --large' if '1.5b' in name else ''})")
            continue
        import decodelab

        ids = decodelab.load(path).tokenizer.encode(TEXT)
        if name in fx["ids"] and fx["ids"][name] != ids:
            raise SystemExit(f"{name}: the tokenizer no longer gives the fixture's ids")
        fx["ids"][name] = ids
        rows = {"decodelab int4": decodelab_rows(path, ids, "int4"),
                "decodelab float32": decodelab_rows(path, ids, "float32")}
        (rows["transformers float32"], hf_version) = transformers_rows(path, ids)
        (rows["llama.cpp"], same_ids, version) = llama_cpp_rows(path, ids)
        ref = rows["transformers float32"][0]
        table = {k: {"perplexity": round(v[1], 4), "top1_vs_transformers": round(agree(v[0], ref), 4),
                     "top1_vs_llama_cpp": round(agree(v[0], rows["llama.cpp"][0]), 4)} for k, v in rows.items()}
        results[name] = {"positions": POSITIONS, "llama_cpp_python": version, "transformers": hf_version,
                         "llama_cpp_tokenizes_the_same": same_ids, "rows": table}
        print(f"\n{name} ({POSITIONS} positions; llama-cpp-python {version}, transformers {hf_version}; "
              f"llama.cpp's ids {'equal' if same_ids else 'DIFFER from'} decodelab's)")
        print(f"  {'engine':22s} {'perplexity':>10s} {'top-1 = transformers':>21s} {'top-1 = llama.cpp':>18s}")
        for k, v in table.items():
            print(f"  {k:22s} {v['perplexity']:10.4f} {v['top1_vs_transformers']:21.2%} {v['top1_vs_llama_cpp']:18.2%}")
        if args.record:
            fx.setdefault("recorded", {})[name] = {
                "llama_cpp": {"version": version, "top1": rows["llama.cpp"][0], "perplexity": rows["llama.cpp"][1]},
                "transformers": {"version": hf_version, "top1": ref, "perplexity": rows["transformers float32"][1]}}
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "real_models.json"), "w") as f:
        json.dump(results, f, indent=1)
    if args.record:
        write_fixture(fx)


def write_fixture(fx):
    """The fixture with one line per id list, so it stays readable and diffs stay small."""
    lists = {}

    def stash(x):
        if isinstance(x, list) and x and all(isinstance(i, int) for i in x):
            lists[len(lists)] = json.dumps(x, separators=(",", ":"))
            return f"@@{len(lists) - 1}@@"
        if isinstance(x, dict):
            return {k: stash(v) for k, v in x.items()}
        return x

    text = json.dumps(stash(fx), indent=1, ensure_ascii=False)
    for k, v in lists.items():
        text = text.replace(f'"@@{k}@@"', v)
    with open(FIXTURE, "w", encoding="utf-8") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    main()
