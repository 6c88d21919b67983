"""GGUF tokenizers against llama.cpp, the reference for GGUF tokenization: its ids for a set of texts
are recorded in fixtures/llama_cpp_token_ids.json by benchmarks/llama_cpp_tokens.py --record (the
shared SmolLM2 file, `gpt2` BPE, and stories260K exported to GGUF with its SentencePiece vocabulary,
`llama` type). Also the SentencePiece path against llama2.c's run.c and transformers, the add-BOS
rule from metadata, and malformed tokenizer metadata."""
import hashlib
import json
import os

import numpy as np
import pytest

import decodelab
from decodelab.formats.gguf import tokenizer as gguf_tokenizer
from decodelab.formats.gguf.reader import GGUFFile
from decodelab.text.tokenizer import Llama2cTokenizer

from conftest import MODELS, STORIES_TOK, _need

gguf = pytest.importorskip("gguf", reason="the gguf package (a test extra) writes the GGUF files")

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "fixtures", "llama_cpp_token_ids.json")
SMOLLM = os.path.join(MODELS, "smollm2-135m-instruct", "SmolLM2-135M-Instruct.Q4_1.gguf")


def _recorded():
    with open(FIXTURE, encoding="utf-8") as f:
        return json.load(f)


@pytest.fixture(scope="module")
def stories_gguf(tmp_path_factory, stories_bin):
    """stories260K as GGUF (F32) with its SentencePiece vocabulary, as the benchmark script makes it."""
    from decodelab import testing
    from decodelab.formats.gguf import export as gguf_export

    d = tmp_path_factory.mktemp("spm")
    hf = testing.convert_llama2c(stories_bin, str(d / "hf"))
    return gguf_export.export(hf, str(d / "stories260K.gguf"))


def _load_tokenizer(path):
    """The file's tokenizer and the digest of its vocabulary that the fixture records."""
    with GGUFFile(path) as g:
        tokens = g.metadata["tokenizer.ggml.tokens"]
        digest = hashlib.sha256("\n".join(tokens).encode("utf-8")).hexdigest()[:16]
        return gguf_tokenizer.tokenizer_from_gguf(g), digest


@pytest.mark.parametrize("name", ["smollm2-135m-instruct-q4_1", "stories260K-spm-f32"])
def test_ids_equal_llama_cpp(name, request):
    path = _need(SMOLLM) if name.startswith("smollm2") else request.getfixturevalue("stories_gguf")
    rec = _recorded()
    tok, digest = _load_tokenizer(path)
    entry = rec["files"][name]
    assert digest == entry["vocab_sha256_16"], "the fixture was recorded from a different vocabulary"
    assert len(rec["texts"]) == len(entry["ids"]) >= 20
    for text, ids in zip(rec["texts"], entry["ids"]):
        assert tok.encode(text) == ids, text


def test_sentencepiece_equals_llama2c_run_c(stories_gguf):
    # run.c has no special tokens in text; on everything else the two must agree.
    tok, _ = _load_tokenizer(stories_gguf)
    ref = Llama2cTokenizer(_need(STORIES_TOK), 512)
    for text in _recorded()["texts"]:
        if "<" not in text:
            assert tok.encode(text) == ref.encode(text), text
            assert tok.decode(tok.encode(text)) == ref.decode(ref.encode(text)), text


def test_sentencepiece_special_tokens_and_space_prefix(stories_gguf):
    tok, _ = _load_tokenizer(stories_gguf)
    piece = tok.id_to_piece
    ids = tok.encode("x<s>y")
    # BOS added (add_bos_token), <s> in the text matched whole, and "▁" before the text and after
    # each special token, as llama.cpp's add_space_prefix does.
    assert ids[0] == tok.bos_token_id == 1 and ids[3] == 1
    assert "".join(piece(i) for i in ids[1:3]) == "\u2581x" and piece(ids[4]).startswith("\u2581")
    assert tok.encode("", add_special_tokens=True) == [1]
    assert tok.encode("", add_special_tokens=False) == []
    # Characters outside the 512-token vocabulary fall back to their UTF-8 bytes.
    ids = tok.encode("中", add_special_tokens=False)
    assert [piece(i) for i in ids[-3:]] == ["<0xE4>", "<0xB8>", "<0xAD>"]
    assert tok.decode(ids) == "中"


def test_sentencepiece_against_transformers_gguf_tokenizer(stories_gguf):
    transformers = pytest.importorskip("transformers")
    ref = transformers.AutoTokenizer.from_pretrained(os.path.dirname(stories_gguf),
                                                     gguf_file=os.path.basename(stories_gguf))
    tok, _ = _load_tokenizer(stories_gguf)
    for text in _recorded()["texts"]:
        if "<" not in text and not text.startswith(" "):
            assert tok.encode(text) == ref.encode(text), text
    # Where they part, llama.cpp (the fixture) and run.c are with decodelab: transformers' Metaspace
    # adds no "▁" to text that already starts with a space, nor after a special token.
    assert len(tok.encode("  two")) == len(ref.encode("  two")) + 1
    assert tok.id_to_piece(tok.encode("x<s>y")[-1]) == "\u2581y" and ref.convert_ids_to_tokens(ref.encode("x<s>y"))[-1] == "y"


def test_stories_gguf_runs_as_the_llama2c_checkpoint(stories_gguf, stories):
    m = decodelab.load(stories_gguf, dtype="float32")
    ids = m.tokenizer.encode("Once upon a time, there was a little girl")
    assert ids == stories.tokenizer.encode("Once upon a time, there was a little girl")
    np.testing.assert_allclose(m.forward(ids), stories.forward(ids), atol=1e-5, rtol=0)
    a = m.generate("Once upon a time", max_new_tokens=24, temperature=0)
    b = stories.generate("Once upon a time", max_new_tokens=24, temperature=0)
    assert a.token_ids == b.token_ids and a.text == b.text


def _finish(w) -> None:
    """Write a GGUFWriter's header, metadata and (no) tensors, and close it."""
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _spm_file(tmp_path, **meta):
    """A GGUF file holding only a small SentencePiece vocabulary and the given metadata."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + ["\u2581", "a", "b", "\u2581a", "ab"]
    w = gguf.GGUFWriter(str(tmp_path / "spm.gguf"), "llama")
    w.add_tokenizer_model("llama")
    w.add_token_list(meta.pop("tokens", tokens))
    w.add_token_scores(meta.pop("scores", [0.0] * 259 + [-1.0, -2.0, -3.0, -4.0, -5.0]))
    w.add_token_types(meta.pop("types", [2, 3, 3] + [6] * 256 + [1] * 5))
    for k, v in meta.items():
        getattr(w, f"add_{k}")(v)
    _finish(w)
    return str(tmp_path / "spm.gguf")


def test_add_bos_and_space_prefix_follow_the_metadata(tmp_path):
    with GGUFFile(_spm_file(tmp_path, bos_token_id=1, eos_token_id=2)) as g:
        tok = gguf_tokenizer.tokenizer_from_gguf(g)
    assert [tok.id_to_piece(i) for i in tok.encode("ab a")] == ["<s>", "\u2581a", "b", "\u2581a"]
    with GGUFFile(_spm_file(tmp_path, bos_token_id=1, eos_token_id=2, add_bos_token=False,
                            add_eos_token=True, add_space_prefix=False)) as g:
        tok = gguf_tokenizer.tokenizer_from_gguf(g)
    assert [tok.id_to_piece(i) for i in tok.encode("ab a")] == ["ab", "\u2581a", "</s>"]
    assert tok.decode(tok.encode(" a")) == " a"  # no prefix added, so none is stripped


@pytest.mark.parametrize("meta,match", [
    ({"scores": [0.0] * 10}, "'tokenizer.ggml.scores' has 10 entries, expected one per token"),
    ({"scores": [float("nan")] * 264}, "'tokenizer.ggml.scores' holds a value that is not finite"),
    ({"types": [1] * 3}, "'tokenizer.ggml.token_type' has 3 entries"),
    ({"add_bos_token": True}, "asks for a bos token but 'tokenizer.ggml.bos_token_id' is missing"),
    ({"bos_token_id": 264}, r"'tokenizer.ggml.bos_token_id' = 264 is not a token id in \[0, 264\)"),
    ({"tokens": []}, "has no 'tokenizer.ggml.tokens'"),
])
def test_malformed_tokenizer_metadata_is_named(tmp_path, meta, match):
    with GGUFFile(_spm_file(tmp_path, **meta)) as g:
        with pytest.raises(ValueError, match=match):
            gguf_tokenizer.tokenizer_from_gguf(g)


def test_scores_are_required_for_sentencepiece(tmp_path):
    p = str(tmp_path / "noscores.gguf")
    w = gguf.GGUFWriter(p, "llama")
    w.add_tokenizer_model("llama")
    w.add_token_list(["<unk>", "a"])
    _finish(w)
    with GGUFFile(p) as g:
        with pytest.raises(ValueError, match="needs 'tokenizer.ggml.scores'"):
            gguf_tokenizer.tokenizer_from_gguf(g)


@pytest.mark.parametrize("merge", ["x y", "a b", "ab", "a  b"])
def test_a_merge_outside_the_vocabulary_is_named(tmp_path, merge):
    # `tokenizers` itself raises a bare Exception or panics on these.
    p = str(tmp_path / "bpe.gguf")
    w = gguf.GGUFWriter(p, "llama")
    w.add_tokenizer_model("gpt2")
    w.add_token_list(["a", "b"])
    w.add_token_merges([merge])
    _finish(w)
    with GGUFFile(p) as g:
        with pytest.raises(ValueError, match="GGUF merge 0 .* is not two vocabulary tokens"):
            gguf_tokenizer.tokenizer_from_gguf(g)


@pytest.mark.slow
def test_exported_gpt2_vocabulary_tokenizes_as_the_folder(tmp_path):
    from decodelab import testing
    from decodelab.formats.gguf import export as gguf_export

    tok_dir = _need(os.path.join(MODELS, "gpt2-tokenizer"))
    folder = testing.write_checkpoint(str(tmp_path / "hf"), "gpt2-tiny", tokenizer_dir=tok_dir)
    out = gguf_export.export(folder, str(tmp_path / "g.gguf"))
    src = decodelab.load(folder)
    m = decodelab.load(out, dtype="float32")
    for text in _recorded()["texts"]:
        assert m.tokenizer.encode(text) == src.tokenizer.encode(text), text
    ids = src.tokenizer.encode("Hello, world! 12345")
    np.testing.assert_allclose(m.forward(ids), src.forward(ids), atol=1e-5, rtol=0)


@pytest.mark.fuzz
def test_random_tokenizer_metadata_gives_a_tokenizer_or_a_value_error(tmp_path):
    """A seeded generator of small vocabularies, merges, types, scores and special ids, the cases
    byte mutation seldom reaches: each builds a tokenizer that encodes and decodes, or is a ValueError."""
    rng = np.random.default_rng(7)
    alphabet = ["a", "b", "ab", "\u2581", "\u2581a", "<s>", "</s>", "<unk>", "", "  ", "<0x41>", "<0xZZ>",
                "\u0120", "\u0120\u0120", "x y", "\u0000", "😀", "<|im_end|>", "a b", "ba"]
    pick = lambda seq: seq[int(rng.integers(0, len(seq)))]  # noqa: E731
    built = 0
    for i in range(300):
        p = str(tmp_path / f"{i}.gguf")
        w = gguf.GGUFWriter(p, "llama")
        w.add_tokenizer_model(pick(["gpt2", "llama"]))
        w.add_tokenizer_pre(pick(["gpt2", "smollm", "llama-bpe", "qwen2"]))
        n = int(rng.integers(1, 12))
        toks = [pick(alphabet) for _ in range(n)]
        w.add_token_list(toks)
        if rng.random() < 0.8:
            w.add_token_types([pick([0, 1, 2, 3, 4, 5, 6, 7, -1]) for _ in range(n + int(rng.random() < 0.1))])
        if rng.random() < 0.8:
            w.add_token_scores([pick([0.0, -1.0, 1e30, -1e30, 5.0]) for _ in range(n - int(rng.random() < 0.1))])
        if rng.random() < 0.5:
            w.add_token_merges([f"{pick(toks)} {pick(toks)}" for _ in range(int(rng.integers(0, 5)))])
        for k in ("bos", "eos", "unk"):
            if rng.random() < 0.5:
                getattr(w, f"add_{k}_token_id")(int(rng.integers(0, n + 1)))
        for k in ("add_bos_token", "add_eos_token", "add_space_prefix"):
            if rng.random() < 0.3:
                getattr(w, f"add_{k}")(bool(rng.random() < 0.5))
        _finish(w)
        with GGUFFile(p) as g:
            try:
                tok = gguf_tokenizer.tokenizer_from_gguf(g)
            except ValueError:
                continue
        for text in ["ab a", "", "<s>x</s>", "😀 ab", "  a\n"]:
            tok.decode(tok.encode(text))
        built += 1
    assert 0 < built < 300


def test_bpe_merges_equal_a_plain_loop(tmp_path):
    """The file's merges, checked in C++: the pairs a plain loop over the vocabulary gives (each
    piece a token, split at the first space, the joined text a token too), the pieces the
    vocabulary's own strings, a repeated token's first place kept; a bad merge is named."""
    rng = np.random.default_rng(5)
    chars = list("abĠé日😀")
    tokens = chars + ["".join(rng.choice(chars, rng.integers(2, 5))) for _ in range(300)] + ["", "a b"]
    tokens += tokens[5:15]  # repeats
    first = {}
    for i, t in enumerate(tokens):
        first.setdefault(t, i)
    merges = [f"{a} {b}" for a in tokens[:40] for b in tokens[:40] if a + b in first][:500]
    merges += [" a", "a  b"]  # an empty left piece; a right piece " b" (not a token here: refused below)
    def valid(m):
        a, sep, b = m.partition(" ")
        return bool(sep) and a in first and b in first and a + b in first

    good = [m for m in merges if valid(m)]
    assert len(good) > 100
    w = gguf.GGUFWriter(str(tmp_path / "m.gguf"), "llama")
    w.add_tokenizer_model("gpt2")
    w.add_token_list(tokens)
    w.add_token_merges(good)
    _finish(w)
    with GGUFFile(str(tmp_path / "m.gguf")) as g:
        got = gguf_tokenizer._merges(g, g.metadata["tokenizer.ggml.tokens"])
        toks = g.metadata["tokenizer.ggml.tokens"]
        assert list(got) == [tuple(m.partition(" ")[::2]) for m in good]
        assert len(got) == len(good) and got[-1] == tuple(good[-1].partition(" ")[::2])
        assert all(a is toks[first[a]] and b is toks[first[b]] for a, b in got)
    bad = next(m for m in merges if m not in good)
    w = gguf.GGUFWriter(str(tmp_path / "bad.gguf"), "llama")
    w.add_tokenizer_model("gpt2")
    w.add_token_list(tokens)
    w.add_token_merges(good[:3] + [bad])
    _finish(w)
    with GGUFFile(str(tmp_path / "bad.gguf")) as g:
        with pytest.raises(ValueError, match=r"bad\.gguf: GGUF merge 3 \(.*\) is not two vocabulary tokens"):
            gguf_tokenizer._merges(g, g.metadata["tokenizer.ggml.tokens"])


def _spm_merges_reference(tokens, scores, types):
    """SentencePiece BPE's merges as a plain loop: every split at a character into two vocabulary
    tokens, ranked by (-score, token id, left piece's first id)."""
    first = {}
    for i, t in enumerate(tokens):
        first.setdefault(t, i)
    ranked = []
    for i, t in enumerate(tokens):
        if types is not None and types[i] not in (gguf_tokenizer.NORMAL, gguf_tokenizer.USER_DEFINED):
            continue
        for k in range(1, len(t)):
            if t[:k] in first and t[k:] in first:
                ranked.append((-float(scores[i]), i, first[t[:k]], t[:k], t[k:]))
    ranked.sort(key=lambda r: r[:3])
    return [(a, b) for *_, a, b in ranked]


def test_sentencepiece_merges_equal_a_plain_loop():
    rng = np.random.default_rng(3)
    chars = list("ab▁é日\U0001f600")  # 1- to 4-byte characters: splits fall between characters only
    tokens = chars + ["".join(rng.choice(chars, rng.integers(2, 6))) for _ in range(400)]
    tokens += tokens[10:20]  # repeats: a piece's id is its first position
    scores = rng.integers(-20, 5, len(tokens)).astype(np.float32)  # ties, ranked by id
    types = rng.choice([gguf_tokenizer.NORMAL, gguf_tokenizer.CONTROL, gguf_tokenizer.USER_DEFINED,
                        gguf_tokenizer.BYTE], len(tokens))
    for t in (types, None):
        got = gguf_tokenizer._spm_merges(tokens, scores, t)
        want = _spm_merges_reference(tokens, scores, t)
        assert len(want) > 100 and list(got) == want and len(got) == len(want) and got[7] == want[7]
