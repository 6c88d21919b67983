"""decodelab beside llama.cpp (llama-cpp-python) on GGUF files: token ids of a set of texts, and
teacher-forced top-1 agreement of the next-token predictions.

    python benchmarks/llama_cpp_tokens.py [--record tests/fixtures/llama_cpp_token_ids.json]

The files: the shared SmolLM2-135M-Instruct Q4_1 GGUF (`gpt2` byte-level BPE, pre-tokenizer
smollm) and stories260K exported to GGUF with its SentencePiece vocabulary (`llama` type). llama.cpp
is the reference for GGUF tokenization; --record writes its ids into the fixture that
tests/test_gguf_tokenizer.py checks in CI, where llama-cpp-python is not installed.

Top-1 agreement: one text, teacher-forced through both engines, the share of positions where the
most likely next token is the same. llama.cpp runs Q4_1 matrices against activations rounded to 8
bits (Q8_1), decodelab dequantizes the file to float32 or int8, so near-agreement is what to expect.
Results go to benchmarks/results/llama_cpp_tokens.json.
"""
import argparse
import hashlib
import json
import os
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MODELS = os.environ.get("DECODELAB_MODELS", os.path.join(ROOT, "..", "shared", "models"))
SMOLLM = os.path.join(MODELS, "smollm2-135m-instruct", "SmolLM2-135M-Instruct.Q4_1.gguf")
STORIES = os.path.join(MODELS, "stories260K", "stories260K.bin")

# Texts for the fixture: prose, emoji, CJK, whitespace runs, code, digits, contractions, accents,
# zero-width and no-break spaces, and each file's special tokens written in the text.
TEXTS = ["The capital of France is", "Hello, world! 😀🎉 and 日本語のテキスト, 世界", "    x  =\t\tk\n\n\n  end",
         "def f(a, b):\n    return a ** 2 + b  # 12345 67.89", "", " ", "  two leading spaces",
         "don't won't it's I'm we've WE'LL", "ÀÉÎÕÜ ñ ß ø", "a\u200bb\u00a0c", "1 22 333 4444 55555 3.14159",
         "Once upon a time, there was a little girl named Lily.", "\n\nline\r\nbreaks\r\n", "tabs\tand\t\ttabs",
         "🦙🦙 llama ᚠᛇᚻ Ελληνικά Русский عربى हिन्दी", "https://example.com/a?b=c&d=e",
         "<|im_start|>user\nhi<|im_end|>\n", "<s>The end.</s> After", "x<s>y</s>z", "<unk> word"]
TOP1_TEXT = ("<|im_start|>user\nWhat is the capital of France? Answer in one word.<|im_end|>\n<|im_start|>assistant\n"
             "The capital of France is Paris. It is known for the Eiffel Tower, the Louvre and its cafes. "
             "Paris has been the capital since the tenth century and is home to about two million people. "
             "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with "
             "her friends. One day, she saw a big red ball under a tree. She ran to get it, but a small dog got "
             "there first. The dog wagged its tail and dropped the ball at her feet. Lily laughed and threw the "
             "ball, and they played together until the sun went down.\n\ndef add(a, b):\n    return a + b\n")


def vocab_digest(tokens):
    """A short hash of a vocabulary, so the fixture names the exact tokenizer it was made from."""
    return hashlib.sha256("\n".join(tokens).encode("utf-8")).hexdigest()[:16]


def stories_gguf(folder):
    """stories260K as GGUF (F32, SentencePiece vocabulary), through decodelab's exporter."""
    from decodelab import testing
    from decodelab.formats.gguf import export as gguf_export

    hf = testing.convert_llama2c(STORIES, os.path.join(folder, "hf"))
    return gguf_export.export(hf, os.path.join(folder, "stories260K.gguf"))


def files(folder):
    return {"smollm2-135m-instruct-q4_1": SMOLLM, "stories260K-spm-f32": stories_gguf(folder)}


def llama_cpp_ids(path):
    import llama_cpp

    llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
    out = {t: llm.tokenize(t.encode("utf-8"), add_bos=True, special=True) for t in TEXTS}
    del llm
    return out


def decodelab_ids(path):
    from decodelab.formats.gguf import reader as gguf_file
    from decodelab.formats.gguf import tokenizer as gguf_tokenizer

    with gguf_file.GGUFFile(path) as g:
        tok = gguf_tokenizer.tokenizer_from_gguf(g)
        digest = vocab_digest(g.metadata["tokenizer.ggml.tokens"])
    return {t: tok.encode(t) for t in TEXTS}, digest


def top1_agreement(path, dtypes=("float32", "int8")):
    import llama_cpp

    import decodelab

    llm = llama_cpp.Llama(model_path=path, n_ctx=512, logits_all=True, n_threads=os.cpu_count(), verbose=False)
    ids = llm.tokenize(TOP1_TEXT.encode("utf-8"), add_bos=True, special=True)
    llm.eval(ids)
    ref = np.asarray(llm.scores[:len(ids)]).argmax(-1)
    del llm
    out = {"positions": len(ids)}
    for dtype in dtypes:
        ours = decodelab.load(path, dtype=dtype).forward(ids).argmax(-1)
        out[dtype] = round(float(np.mean(ours == ref)), 4)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--record", help="write llama.cpp's ids to this JSON fixture")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "llama_cpp_tokens.json"))
    args = ap.parse_args()
    import llama_cpp

    results = {"llama_cpp_python": llama_cpp.__version__, "files": {}}
    fixture = {"llama_cpp_python": llama_cpp.__version__, "texts": TEXTS, "files": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in files(tmp).items():
            theirs = llama_cpp_ids(path)
            ours, digest = decodelab_ids(path)
            same = [t for t in TEXTS if ours[t] == theirs[t]]
            row = {"texts": len(TEXTS), "same_ids": len(same),
                   "differ": {t: {"decodelab": ours[t], "llama.cpp": theirs[t]} for t in TEXTS if t not in same}}
            row["top1_agreement"] = top1_agreement(path)
            results["files"][name] = row
            fixture["files"][name] = {"vocab_sha256_16": digest, "ids": [theirs[t] for t in TEXTS]}
            print(f"{name}: {len(same)}/{len(TEXTS)} texts give the same ids"
                  + f"; top-1 agreement {row['top1_agreement']}")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(results, f, indent=1, ensure_ascii=False)
    if args.record:
        with open(args.record, "w", encoding="utf-8") as f:
            json.dump(fixture, f, indent=1, ensure_ascii=False)
    return 0 if all(r["same_ids"] == r["texts"] for r in results["files"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
