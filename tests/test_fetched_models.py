"""The real GGUF files users pick, as ../shared/models/fetch downloads them (.ci/run fetches them
first): Qwen2.5-Coder-0.5B-Instruct and Gemma 3 270M, Q4_K_M. At dtype="float32" decodelab reads
exactly the values the file encodes, and transformers (from_pretrained(..., gguf_file=...), which
dequantizes to fp32) is the reference: logits over 64 positions, whole and through the cache, and
32 greedy tokens; the files' tokenizers against transformers' GGUF tokenizer."""
import os

import numpy as np
import pytest

import decodelab
from decodelab import testing

pytest.importorskip("gguf", reason="the gguf package (a test extra) reads GGUF for transformers")
pytest.importorskip("accelerate", reason="transformers needs accelerate to load a GGUF file (a test extra)")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

# Code, as the Coder model is meant for, and prose for the base Gemma; each cut to 64 ids.
TEXT = ('def fibonacci(n):\n    """Return the n-th Fibonacci number, counting from fibonacci(0) = 0."""\n'
        "    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n\n\n"
        "The capital of France is Paris. It lies on the Seine, in the north of the country, and is known "
        "for its museums.")


def _path(name):
    path = testing.fetched_model(name)
    if path is None:
        pytest.skip(f"{testing.FETCHED[name]} not in {testing.model_cache()}: run ../shared/models/fetch "
                    "(.ci/run does)")
    return path


@pytest.fixture(scope="module", params=["qwen2.5-coder-0.5b", "gemma-3-270m"])
def pair(request):
    path = _path(request.param)
    ours = decodelab.load(path, dtype="float32")
    theirs = transformers.AutoModelForCausalLM.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path),
                                                               dtype=torch.float32).eval()
    return request.param, ours, theirs


@pytest.mark.slow
@pytest.mark.reference
def test_float32_logits_equal_transformers(pair):
    name, ours, theirs = pair
    ids = ours.tokenizer.encode(TEXT)[:64]
    assert len(ids) == 64
    with torch.no_grad():
        ref = theirs(torch.tensor([ids])).logits[0].numpy()
    np.testing.assert_allclose(ours.forward(ids), ref, atol=1e-3, rtol=0, err_msg=name)
    cache = ours.new_cache()  # a prompt, then one token at a time
    rows = [ours.prefill(ids[:32], cache)] + [ours.decode(t, cache) for t in ids[32:]]
    np.testing.assert_allclose(np.stack(rows), ref[31:], atol=1e-3, rtol=0, err_msg=name)


@pytest.mark.slow
@pytest.mark.reference
def test_float32_greedy_tokens_equal_transformers(pair):
    name, ours, theirs = pair
    ids = ours.tokenizer.encode(TEXT)[:24]
    with torch.no_grad():
        ref = theirs.generate(torch.tensor([ids]), max_new_tokens=32, do_sample=False, min_new_tokens=32)[0, 24:]
    got = ours.generate(ids, max_new_tokens=32, eos_token_id=[]).token_ids
    assert got == ref.tolist(), name


# Text as users write it: indents, runs of newlines and tabs (Gemma 3 holds them as user-defined
# tokens, which decode as text), Qwen's user-defined <tool_call> tokens, plain prose.
TEXTS = ["def f(x):\n    return x\n\nprint(f(1))", "Hello, world!\n\n\n  indented\ttab",
         '<tool_call>{"a": 1}</tool_call>', "The capital of France is Paris.", "x  =\t\tk\n\n\n  end"]


@pytest.mark.slow
@pytest.mark.reference
@pytest.mark.parametrize("name", ["qwen2.5-coder-0.5b", "gemma-3-270m"])
def test_tokenizer_equals_transformers_gguf_tokenizer(name):
    path = _path(name)
    theirs = transformers.AutoTokenizer.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path))
    ours = decodelab.load(path).tokenizer
    for text in TEXTS:
        ids = ours.encode(text)
        assert ids == theirs(text)["input_ids"], (name, text)
        assert ours.decode(ids) == theirs.decode(ids, skip_special_tokens=True) == text, (name, text)

