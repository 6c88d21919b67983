"""llama.cpp's vocabulary-only GGUF files (../shared/models/fetch --vocab; .ci/run fetches them)
load as tokenizers and cut text as llama.cpp does: its own test vectors (.inp/.out, tokenized
without special tokens, as its test-tokenizer-0 does), and a fixture of hard texts whose
llama.cpp and transformers ids benchmarks/llama_cpp_vocab.py --record wrote
(fixtures/llama_cpp_vocab_ids.json). Long texts, cut at line starts and encoded as a batch, give
the ids of the whole text."""
import hashlib
import json
import os

import pytest

from decodelab.formats.gguf.reader import GGUFFile
from decodelab.testing import model_cache
from decodelab.text import load_tokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "fixtures", "llama_cpp_vocab_ids.json")
VOCABS = ["gpt-2", "llama-bpe", "qwen2", "qwen35", "deepseek-llm", "deepseek-coder", "falcon", "starcoder",
          "command-r", "llama-spm", "phi-3", "gemma-4", "mpt", "refact"]
# Where decodelab follows the file and transformers rather than llama.cpp: llama.cpp makes "</s>"
# a control token by its text in every vocabulary (Qwen2's is a normal token), and strips the
# space after a special token in files named phi-3. Both ids are pinned: llama.cpp's in the fixture.
FOLLOWS_TRANSFORMERS = {("qwen2", "<s>The end.</s> After"), ("qwen35", "<s>The end.</s> After"),
                        ("phi-3", "<s>The end.</s> After")}
_TOKENIZERS = {}


def _tokenizer(name):
    path = os.path.join(model_cache(), "vocab", f"ggml-vocab-{name}.gguf")
    if not os.path.exists(path):
        pytest.skip(f"{path} is missing: run ../shared/models/fetch --vocab (.ci/run does)")
    if name not in _TOKENIZERS:
        _TOKENIZERS[name] = load_tokenizer(path, 0)
    return path, _TOKENIZERS[name]


def _vectors(path):
    """llama.cpp's test texts and ids: texts separated by a marker line, one line of ids per text."""
    sep = "\n__ggml_vocab_test__\n"
    with open(path + ".inp", encoding="utf-8", newline="") as f:
        raw = f.read()
    texts = raw.split(sep)
    if texts[-1] == "":  # the file ends with the marker (all but gemma-4's)
        texts.pop()
    with open(path + ".out", encoding="utf-8", newline="") as f:
        lines = f.read().split("\n")
    return texts, [[int(x) for x in line.split()] for line in lines[:len(texts)]]


@pytest.mark.parametrize("name", VOCABS)
def test_llama_cpp_test_vectors(name):
    path, tok = _tokenizer(name)
    texts, want = _vectors(path)
    assert len(texts) >= 46
    for text, ids in zip(texts, want):
        assert tok.encode(text, add_special_tokens=False) == ids, (name, text)


@pytest.mark.parametrize("name", VOCABS)
def test_hard_texts_equal_llama_cpp(name):
    path, tok = _tokenizer(name)
    with open(FIXTURE, encoding="utf-8") as f:
        rec = json.load(f)
    entry = rec["files"][name]
    with GGUFFile(path) as g:
        digest = hashlib.sha256("\n".join(g.metadata["tokenizer.ggml.tokens"]).encode("utf-8")).hexdigest()[:16]
    assert digest == entry["vocab_sha256_16"], "the fixture was recorded from a different vocabulary"
    for k, text in enumerate(rec["texts"]):
        got = tok.encode(text)
        if (name, text) in FOLLOWS_TRANSFORMERS:
            assert got != entry["llama_cpp"][k] and got == entry["transformers"][k], (name, text)
        else:
            assert got == entry["llama_cpp"][k], (name, text)


def test_the_gpt2_pre_tokenizer_reads_under_both_spellings(tmp_path):
    gguf = pytest.importorskip("gguf", reason="the gguf package (a test extra) writes the files")
    path, tok = _tokenizer("gpt-2")
    with GGUFFile(path) as g:
        tokens, merges = g.metadata["tokenizer.ggml.tokens"], g.metadata["tokenizer.ggml.merges"]
    out = str(tmp_path / "gpt2.gguf")  # decodelab's exporter wrote "gpt2" before llama.cpp's "gpt-2"
    w = gguf.GGUFWriter(out, "gpt2")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt2")
    w.add_token_list(tokens)
    w.add_token_merges(merges)
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    text = "Hello  world\n\n\tdef f(x): return 12345"
    assert load_tokenizer(out, 0).encode(text) == tok.encode(text)


@pytest.mark.parametrize("name", ["gpt-2", "qwen2", "deepseek-llm", "falcon", "gemma-4", "command-r", "llama-spm",
                                  "phi-3"])
def test_long_texts_cut_at_line_starts_give_the_whole_texts_ids(name):
    _, tok = _tokenizer(name)
    assert tok.line_cuts
    with open(FIXTURE, encoding="utf-8") as f:
        texts = json.load(f)["texts"]
    text = "\n".join(texts) * 40  # about 40k characters, every hard case at many offsets
    assert len(text) > 2 * tok.CHUNK_CHARS
    whole = tok._tok.encode(text, add_special_tokens=True).ids
    assert tok.encode(text) == whole
    assert tok.encode(text, add_special_tokens=False) == tok._tok.encode(text, add_special_tokens=False).ids
