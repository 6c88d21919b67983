"""llama.cpp's vocabulary-only files (../shared/models/fetch --vocab) as decodelab tokenizes them,
against llama.cpp and transformers, on a fixture of hard texts; and encoding time per file.

    python benchmarks/llama_cpp_vocab.py [--record]

For each file: the ids of every text from decodelab (``load_tokenizer(file).encode(text)``),
llama.cpp (llama-cpp-python, ``Llama(vocab_only=True).tokenize(text, add_bos=True,
special=True)``: the file's BOS rule, special tokens written in the text matched) and transformers
(``AutoTokenizer.from_pretrained(folder, gguf_file=file)(text)``, where it reads the file). The
texts mix scripts, emoji, code with tabs and runs of spaces, digits, CRLF, special tokens inside
text and an empty string. --record writes llama.cpp's and transformers' ids into
tests/fixtures/llama_cpp_vocab_ids.json, which tests/test_llama_cpp_vocab.py checks in CI (where
neither runs); the summary goes to benchmarks/results/llama_cpp_vocab.json. Encoding time: 10k and
100k characters of mixed text per file (best of 3).
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "llama_cpp_vocab_ids.json")
VOCABS = ["gpt-2", "llama-bpe", "qwen2", "qwen35", "deepseek-llm", "deepseek-coder", "falcon", "starcoder",
          "command-r", "llama-spm", "phi-3", "gemma-4", "mpt", "refact"]
HARD = [
    "",
    " ",
    "\n",
    "Hello, world! 😀🎉👩‍👩‍👧‍👦 and 日本語のテキスト, 世界; 한국어 문장; ภาษาไทย; العربية; हिन्दी; Ελληνικά; Русский",
    "def f(a, b):\n\tif a  >  b:\n\t\treturn a ** 2 + b   # 12345 67.89\n    else:\n        return -1\n",
    "x  =\t\tk\n\n\n  end    \n\n",
    "1 22 333 4444 55555 666666 1234567890 3.14159e-10 0x1F 1,000,000",
    "line one\r\nline two\r\n\r\nend\r",
    "don't won't it's I'm we've WE'LL 'S",
    "e\u0301 n\u0303 a\u0308 (combining marks) \u00e9 \u00f1",
    "a\u200bb\u00a0c\u2003d \ufeffe",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "<s>The end.</s> After",
    "<|endoftext|>x<|endoftext|>",
    "<bos><start_of_turn>user\nHi<end_of_turn>",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
    "<unk> word <pad>",
    "   leading spaces and trailing   ",
    "ÀÉÎÕÜ ñ ß ø Å æ œ ﬁ ｆｕｌｌｗｉｄｔｈ",
    "🦙🦙 llama ᚠᛇᚻ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ∀x∈ℝ: x²≥0",
    "https://example.com/a?b=c&d=e#frag user@example.org",
    "{\"key\": [1, 2, {\"nested\": true}], 'single': None}",
]


def vocab_path(name):
    from decodelab.testing import model_cache

    return os.path.join(model_cache(), "vocab", f"ggml-vocab-{name}.gguf")


def vocab_digest(path):
    """llama_cpp_tokens.py's short hash of the file's vocabulary, which the fixture records."""
    from llama_cpp_tokens import vocab_digest as digest

    from decodelab.formats.gguf.reader import GGUFFile

    with GGUFFile(path) as g:
        return digest(g.metadata["tokenizer.ggml.tokens"])


def llama_cpp_ids(path):
    import llama_cpp

    llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
    out = [llm.tokenize(t.encode("utf-8"), add_bos=True, special=True) for t in HARD]
    del llm
    return out


def transformers_ids(path):
    import transformers

    try:
        tok = transformers.AutoTokenizer.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path))
    except Exception as e:  # transformers reads GGUF tokenizers of some architectures only
        return None, f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
    return [tok(t)["input_ids"] for t in HARD], None


def encode_seconds(tok, n_chars):
    text = (HARD[3] + HARD[4] + HARD[6] + HARD[18]) * (n_chars // 300 + 1)
    text = text[:n_chars]
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        tok.encode(text)
        best = min(best, time.perf_counter() - t)
    return best


def main():
    sys.path.insert(0, os.path.join(ROOT, "python"))
    sys.path.insert(0, HERE)
    import llama_cpp
    import transformers

    from decodelab.text import load_tokenizer

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--record", action="store_true", help="write llama.cpp's and transformers' ids into the fixture")
    args = p.parse_args()
    fixture = {"about": "Hard texts tokenized by llama.cpp and transformers for each of llama.cpp's vocabulary "
                        "files; recorded by benchmarks/llama_cpp_vocab.py --record.",
               "llama_cpp_python": llama_cpp.__version__, "transformers": transformers.__version__,
               "texts": HARD, "files": {}}
    summary = {}
    for name in VOCABS:
        path = vocab_path(name)
        if not os.path.exists(path):
            print(f"{name}: not fetched (run ../shared/models/fetch --vocab)")
            continue
        ours_tok = load_tokenizer(path, 0)
        ours = [ours_tok.encode(t) for t in HARD]
        ref = llama_cpp_ids(path)
        hf, hf_error = transformers_ids(path)
        differ_llama = [i for i, (a, b) in enumerate(zip(ours, ref)) if a != b]
        differ_hf = None if hf is None else [i for i, (a, b) in enumerate(zip(ref, hf)) if a != b]
        t10, t100 = encode_seconds(ours_tok, 10_000), encode_seconds(ours_tok, 100_000)
        summary[name] = {"texts_differing_from_llama_cpp": differ_llama,
                         "llama_cpp_vs_transformers_differ": differ_hf, "transformers_error": hf_error,
                         "encode_10k_s": t10, "encode_100k_s": t100, "ratio_100k_10k": t100 / t10}
        print(f"{name:15s} decodelab = llama.cpp on {len(HARD) - len(differ_llama)}/{len(HARD)} texts; "
              + (f"transformers = llama.cpp on {len(HARD) - len(differ_hf)}/{len(HARD)}" if hf is not None
                 else f"transformers: {hf_error}")
              + f"; encode 10k chars {t10 * 1e3:.1f} ms, 100k {t100 * 1e3:.1f} ms ({t100 / t10:.1f}x)")
        fixture["files"][name] = {"vocab_sha256_16": vocab_digest(path), "llama_cpp": ref, "transformers": hf,
                                  "transformers_error": hf_error}
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "llama_cpp_vocab.json"), "w") as f:
        json.dump({"llama_cpp_python": llama_cpp.__version__, "transformers": transformers.__version__,
                   "files": summary}, f, indent=1)
    if args.record:
        text = json.dumps(fixture, indent=1, ensure_ascii=False)
        with open(FIXTURE, "w", encoding="utf-8") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
