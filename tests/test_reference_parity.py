"""Logits and greedy tokens equal transformers' on the same weights (fp32: max abs diff <= 1e-4)."""
import numpy as np
import pytest

import decodelab
from reference import hf_greedy, hf_logits, hf_model, max_abs_diff

pytestmark = pytest.mark.reference
TOL = 1e-4


def _prompt(vocab, n, seed):
    return np.random.default_rng(seed).integers(0, vocab, size=n).tolist()


def _check_forward_and_cached(folder, n_prompt=24, n_decode=8, seed=0):
    ours = decodelab.load(folder)
    ref = hf_model(folder)
    ids = _prompt(ours.config.vocab_size, n_prompt + n_decode, seed)
    want = hf_logits(ref, ids)
    got = ours.forward(ids)
    assert got.shape == want.shape
    assert max_abs_diff(got, want) <= TOL
    # Prefill the prompt, then decode the rest one token at a time through the KV cache.
    cache = ours.new_cache()
    step = ours.prefill(ids[:n_prompt], cache)
    assert max_abs_diff(step, want[n_prompt - 1]) <= TOL
    for i in range(n_prompt, len(ids)):
        step = ours.decode(ids[i], cache)
        assert max_abs_diff(step, want[i]) <= TOL, f"position {i}"
    return ours, ref


@pytest.mark.slow
def test_gpt2_124m_shape(checkpoint):
    _check_forward_and_cached(checkpoint("gpt2-124m"))


@pytest.mark.slow
def test_llama_110m_gqa_untied(checkpoint):
    ours, _ = _check_forward_and_cached(checkpoint("llama-110m"))
    assert ours.config.n_kv_heads < ours.config.n_heads and not ours.config.tie_word_embeddings


@pytest.mark.parametrize("shape", ["llama-tiny", "llama-tiny-tied", "gpt2-tiny"])
def test_tiny_shapes(checkpoint, shape):
    _check_forward_and_cached(checkpoint(shape), n_prompt=40, n_decode=20, seed=1)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("shape", ["llama-tiny", "gpt2-tiny"])
def test_reduced_precision_stored_weights(checkpoint, shape, dtype):
    # Stored f16 / bf16 weights are upcast to fp32 by both implementations.
    _check_forward_and_cached(checkpoint(shape, dtype=dtype), seed=2)


def test_sharded_checkpoint(checkpoint):
    _check_forward_and_cached(checkpoint("llama-tiny", shards=3), seed=3)


def test_stories260k_converted_forward(stories_hf, stories_bin):
    _check_forward_and_cached(stories_hf, n_prompt=64, n_decode=32, seed=4)
    # The converted folder (rotate_half RoPE, permuted rows) and the original .bin (interleaved
    # RoPE, rows in place) are the same model.
    ids = _prompt(512, 80, 5)
    a = decodelab.load(stories_bin).forward(ids)
    b = decodelab.load(stories_hf).forward(ids)
    assert max_abs_diff(a, b) <= TOL


@pytest.mark.slow
@pytest.mark.parametrize("prompt", ["Once upon a time", "Tom and Sue went to the park", "The little dog",
                                    "Lily liked to"])
def test_stories260k_greedy_tokens_equal_transformers(stories, stories_hf, prompt):
    ref = hf_model(stories_hf)
    ids = stories.tokenizer.encode(prompt)
    # EOS disabled on both sides so that every prompt runs 120 tokens.
    want = hf_greedy(ref, ids, 120, stop_on_eos=False)
    got = stories.generate(ids, max_new_tokens=120, eos_token_id=[])
    assert len(want) == 120
    assert got.token_ids == want
    assert got.finish_reason == "length"
    # With EOS on, both stop at the same place.
    want_eos = hf_greedy(ref, ids, 200, stop_on_eos=True)
    got_eos = stories.generate(ids, max_new_tokens=200)
    assert got_eos.token_ids == want_eos
    assert got_eos.finish_reason == ("stop" if want_eos[-1] == 2 else "length")
