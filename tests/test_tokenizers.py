"""Tokenizers: GPT-2 byte-level BPE equals GPT2TokenizerFast; llama2.c BPE round-trips UTF-8."""
import os

import pytest
from hypothesis import given, settings, strategies as st

from decodelab.text.tokenizer import HFTokenizer, Llama2cTokenizer

TEXTS = [
    "Hello, world!",
    "  leading and trailing spaces   ",
    "whitespace\t\truns\n\n\n   and\r\nnewlines",
    "emoji 😀👍🏽🇫🇷 and family 👨‍👩‍👧",
    "中文字符和日本語のテキスト、한국어",
    "def f(x):\n    return x ** 2  # comment\n",
    "numbers 1234567890 3.14159 -42",
    "<|endoftext|> inside text",
    "Ünïcödé àçcénts — dashes … ellipsis",
    "",
]


@pytest.fixture(scope="module")
def gpt2_pair(gpt2_tokenizer_dir):
    from transformers import GPT2TokenizerFast

    vj = os.path.join(gpt2_tokenizer_dir, "vocab.json")
    mt = os.path.join(gpt2_tokenizer_dir, "merges.txt")
    return HFTokenizer.from_gpt2_files(vj, mt), GPT2TokenizerFast.from_pretrained(gpt2_tokenizer_dir)


@pytest.mark.parametrize("text", TEXTS)
def test_gpt2_encoding_equals_transformers(gpt2_pair, text):
    ours, ref = gpt2_pair
    assert ours.encode(text) == ref.encode(text)
    assert ours.decode(ours.encode(text)) == ref.decode(ref.encode(text), skip_special_tokens=True)


def test_gpt2_special_ids(gpt2_pair):
    ours, _ = gpt2_pair
    assert ours.eos_token_id == 50256
    assert ours.vocab_size == 50257


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_gpt2_round_trip_arbitrary_unicode(gpt2_pair, text):
    ours, ref = gpt2_pair
    ids = ours.encode(text)
    assert ids == ref.encode(text)
    if "<|endoftext|>" not in text:
        assert ours.decode(ids) == text


@pytest.fixture(scope="module")
def tok512(stories_bin):
    return Llama2cTokenizer(os.path.join(os.path.dirname(stories_bin), "tok512.bin"), 512)


def test_llama2c_encode_structure(tok512):
    ids = tok512.encode("Once upon a time")
    assert ids[0] == tok512.bos_token_id
    # The pieces spell the text behind SentencePiece's dummy leading space ...
    assert b"".join(tok512.pieces[i] for i in ids[1:]) == b" Once upon a time"
    # ... and the merge loop ran to completion: no adjacent pair merges into a vocabulary piece.
    for a, b in zip(ids[1:], ids[2:]):
        assert tok512.pieces[a] + tok512.pieces[b] not in tok512._lookup
    assert tok512.decode(ids) == "Once upon a time"


def test_llama2c_byte_fallback(tok512):
    text = "中😀"
    assert all(ch.encode() not in tok512._lookup for ch in text)
    ids = tok512.encode(text, add_special_tokens=False)
    # Characters outside the 512-token vocabulary fall back to <0xNN> tokens (id = byte + 3),
    # after the dummy-prefix space.
    assert tok512.pieces[ids[0]] == b" "
    assert [i - 3 for i in ids[1:]] == list(text.encode("utf-8"))
    assert tok512.decode([tok512.bos_token_id] + ids) == text


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_llama2c_round_trip_arbitrary_utf8(tok512, text):
    assert tok512.decode(tok512.encode(text)) == text


def test_llama2c_tokenizer_truncated(tmp_path, stories_bin):
    with open(os.path.join(os.path.dirname(stories_bin), "tok512.bin"), "rb") as f:
        data = f.read()
    p = tmp_path / "tok.bin"
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="truncated"):
        Llama2cTokenizer(str(p), 512)


def _run_c_merges(tok, symbols):
    """run.c's loop, quadratic: scan every adjacent pair, merge the best (the leftmost of equals)."""
    toks = list(symbols)
    while True:
        best, best_i, best_id = None, -1, -1
        for i in range(len(toks) - 1):
            merged = tok._lookup.get(tok.pieces[toks[i]] + tok.pieces[toks[i + 1]])
            if merged is not None and (best is None or tok.scores[merged] > best):
                best, best_i, best_id = tok.scores[merged], i, merged
        if best_i < 0:
            return toks
        toks[best_i:best_i + 2] = [best_id]


LLAMA2C_TEXTS = ["Once upon a time", "", " ", "  leading and trailing  ", "Lily's dog, Max, said: \"Hi!\"\n\nThe end.",
                 "aaaaaaaaaaaaaaaaaaaaaaaa", "日本語 and émojis 🙂🙂", "\t\x00\x7f tabs", "the the the the the the"]


@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=200) | st.sampled_from(LLAMA2C_TEXTS))
@settings(max_examples=150, deadline=None)
def test_llama2c_heap_merges_equal_run_c(tok512, text):
    symbols = tok512.encode(text, add_special_tokens=False)
    # Re-run the merges from single characters (or bytes) with run.c's own loop.
    chars = []
    if text:
        chars.append(tok512._lookup[b" "])
        for ch in text:
            b = ch.encode("utf-8")
            chars.extend([tok512._lookup[b]] if b in tok512._lookup else [tok512._byte_token[x] for x in b])
    assert symbols == _run_c_merges(tok512, chars)


def test_llama2c_encode_grows_about_linearly(tok512):
    # run.c's loop took 16 s for 16,000 characters; the heap is O(n log n). Eight times the text
    # may take at most 24 times as long (a quadratic loop: 64; best of five, against timer noise
    # on a busy host, where four times the text once took 7.1 times as long).
    import time

    words = "Once upon a time there was a little girl named Lily who loved her red ball .".split()
    text = " ".join(words[i % len(words)] for i in range(1000))[:5000]

    def best(t):
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            tok512.encode(t)
            times.append(time.perf_counter() - t0)
        return min(times)

    small, large = best(text), best(text * 8)
    assert large < 24 * small, (small, large)
    assert large < 10.0
