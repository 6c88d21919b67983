"""Tokenizers: GPT-2 byte-level BPE equals GPT2TokenizerFast; llama2.c BPE round-trips UTF-8."""
import os

import pytest
from hypothesis import given, settings, strategies as st

from decodelab.tokenizer import HFTokenizer, Llama2cTokenizer

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
