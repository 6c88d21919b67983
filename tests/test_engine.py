"""Engine invariants: cached decoding equals recomputation, stop conditions, threads, Ctrl-C."""
import _thread
import json
import shutil
import threading

import numpy as np
import pytest

import decodelab
import decodelab.testing


@pytest.mark.parametrize("shape", ["llama-tiny", "llama-tiny-tied", "gpt2-tiny"])
def test_cached_decode_equals_full_forward_at_every_position(checkpoint, shape):
    m = decodelab.load(checkpoint(shape))
    ids = np.random.default_rng(7).integers(0, m.config.vocab_size, size=m.config.max_position_embeddings).tolist()
    full = m.forward(ids)
    cache = m.new_cache()
    rows = [m.prefill(ids[:1], cache)] + [m.decode(t, cache) for t in ids[1:]]
    np.testing.assert_allclose(np.stack(rows), full, rtol=0, atol=1e-5)
    assert len(cache) == len(ids) and cache.token_ids == ids


def test_stories260k_cached_equals_full(stories):
    ids = stories.tokenizer.encode("Once upon a time, there was a big dog.")
    g = stories.generate(ids, max_new_tokens=200, eos_token_id=[])
    seq = ids + g.token_ids[:-1]
    full = stories.forward(seq)
    # Each generated token is the argmax of the full-recompute logits at the previous position.
    assert np.argmax(full[len(ids) - 1:], axis=1).tolist() == g.token_ids


def test_stories260k_tells_a_story(stories):
    g = stories.generate("Once upon a time", max_new_tokens=40)
    assert g.text.startswith(", there was a little girl named Lily")
    assert g.prompt_token_ids[0] == 1 and g.finish_reason == "length" and len(g.token_ids) == 40


def test_eos_stops_and_can_be_disabled(stories):
    first = stories.generate("Once upon a time", max_new_tokens=5, eos_token_id=[]).token_ids
    g = stories.generate("Once upon a time", max_new_tokens=5, eos_token_id=first[2])
    assert g.token_ids == first[:3] and g.finish_reason == "stop"
    g = stories.generate("Once upon a time", max_new_tokens=5, eos_token_id=[first[4], first[1]])
    assert g.token_ids == first[:2] and g.finish_reason == "stop"
    with pytest.raises(ValueError, match=r"token id 999999 at index 0 is outside the vocabulary \[0, 512\)"):
        stories.generate("Once upon a time", max_new_tokens=5, eos_token_id=[999999, first[1]])
    g = stories.generate("Once upon a time", max_new_tokens=0)
    assert g.token_ids == [] and g.text == "" and g.finish_reason == "length"


def test_default_eos_comes_from_config_and_generation_config(checkpoint, tmp_path):
    src = checkpoint("llama-tiny")
    first = decodelab.load(src).generate([1, 2, 3], max_new_tokens=4, eos_token_id=[]).token_ids
    d = tmp_path / "m"
    shutil.copytree(src, d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["eos_token_id"] = first[1]
    (d / "config.json").write_text(json.dumps(cfg))
    g = decodelab.load(d).generate([1, 2, 3], max_new_tokens=4)
    assert g.token_ids == first[:2] and g.finish_reason == "stop"
    # generation_config.json, as transformers writes it, takes precedence over config.json.
    (d / "generation_config.json").write_text(json.dumps({"eos_token_id": [first[0]]}))
    g = decodelab.load(d).generate([1, 2, 3], max_new_tokens=4)
    assert g.token_ids == first[:1] and g.finish_reason == "stop"


def test_thread_count_does_not_change_tokens(checkpoint):
    path = checkpoint("gpt2-tiny")
    a = decodelab.load(path, threads=1)
    b = decodelab.load(path, threads=2)
    ids = list(range(100, 120))
    np.testing.assert_allclose(a.forward(ids), b.forward(ids), rtol=0, atol=1e-5)
    assert a.generate(ids, max_new_tokens=50).token_ids == b.generate(ids, max_new_tokens=50).token_ids
    b.threads = 1
    assert b.threads == 1


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int8", "w8a8"])
def test_decode_steps_are_bit_identical_on_any_thread_count(checkpoint, dtype):
    """Token-at-a-time steps run the row kernels, whose output groups are shared among the threads
    as they go (the 50,257-row head here is large enough to be split): which thread computes a
    group must not change a bit of the logits."""
    path = checkpoint("gpt2-tiny")
    a = decodelab.load(path, dtype=dtype, threads=1)
    b = decodelab.load(path, dtype=dtype, threads=2)
    ca, cb = a.new_cache(), b.new_cache()
    for tok in [100, 7, 2048, 50000, 3]:
        np.testing.assert_array_equal(a.decode(tok, ca), b.decode(tok, cb))


# An odd number of 4-row weight groups in every layer (q 75, k and v 15, MLP 101, head 128 with a
# short last one) and enough weights for the threads to share the groups: AVX-512 builds multiply
# two groups at once in the batched tiles, and such a pair must not reach past its layer's end.
ODD_GROUPS = dict(arch="llama", hidden_size=300, intermediate_size=404, num_hidden_layers=1, num_attention_heads=5,
                  num_key_value_heads=1, vocab_size=509, max_position_embeddings=64, tie_word_embeddings=False)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("threads", [1, 2])
def test_batched_rows_equal_single_rows_with_odd_group_counts(tmp_path, dtype, threads):
    cfg, tensors = decodelab.testing.random_weights(ODD_GROUPS, seed=11)
    m = decodelab.load(decodelab.testing.write_hf_folder(str(tmp_path / "m"), cfg, tensors), dtype=dtype,
                       threads=threads)
    ids = np.random.default_rng(12).integers(0, cfg["vocab_size"], size=24).tolist()
    full = m.forward(ids)  # 24 rows at once: the register tiles, fewer than gemm_min_rows
    cache = m.new_cache()
    rows = [m.prefill(ids[:1], cache)] + [m.decode(t, cache) for t in ids[1:]]
    np.testing.assert_allclose(np.stack(rows), full, rtol=0, atol=1e-5)


def test_cache_views_are_read_only_and_shaped(checkpoint):
    m = decodelab.load(checkpoint("llama-tiny"))
    cache = m.new_cache(capacity=16)
    m.prefill([1, 2, 3, 4, 5], cache)
    k = cache.keys(0)
    v = cache.values(1)
    assert k.shape == (2, 5, 16) and v.shape == (2, 5, 16)
    assert not k.flags.writeable
    with pytest.raises(ValueError):
        k[0, 0, 0] = 1.0
    # One block of 64 tokens (the default): 2 (K and V) x layers x kv_heads x 64 x head_dim x 4 bytes
    assert m.kv_block_size == 64 and cache.nbytes == 2 * 2 * 2 * 64 * 16 * 4
    cache.clear()
    assert len(cache) == 0 and cache.token_ids == []


def test_forward_does_not_mutate_input(checkpoint):
    m = decodelab.load(checkpoint("llama-tiny"))
    ids = np.array([3, 4, 5], dtype=np.int64)
    m.forward(ids)
    assert ids.tolist() == [3, 4, 5]


# Large enough that 8000 tokens take seconds on one thread, so the interrupt at 0.2 s always lands
# inside generate() (with hidden size 64 they had come to take about that long).
SLOW_SHAPE = dict(arch="llama", hidden_size=256, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=512, max_position_embeddings=8192, tie_word_embeddings=False)


def test_keyboard_interrupt_stops_generation_and_model_stays_usable(checkpoint, sigint):
    shape = SLOW_SHAPE
    m = decodelab.load(checkpoint(shape), threads=1)
    before = m.generate([1, 2, 3], max_new_tokens=30, eos_token_id=[]).token_ids
    timer = threading.Timer(0.2, _thread.interrupt_main)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            m.generate([1, 2, 3], max_new_tokens=8000, eos_token_id=[])
    finally:
        timer.cancel()
    assert m.generate([1, 2, 3], max_new_tokens=30, eos_token_id=[]).token_ids == before


def test_timings_reported(stories):
    g = stories.generate("Once upon a time", max_new_tokens=20, eos_token_id=[])
    assert g.prefill_seconds > 0 and g.decode_seconds > 0
    assert g.prompt_tokens == 5 and g.generated_tokens == 20


def _padded(n_floats):
    # Each layer's copy starts on a 64-byte boundary of the model's block.
    return (4 * n_floats + 63) // 64 * 64


def _read_per_step(tensors, tied_name):
    # The tensors a decode step reads in full: every linear layer and the output head.
    names = [n for n in tensors if n.endswith(("_proj.weight", "c_attn.weight", "c_proj.weight", "c_fc.weight",
                                               "lm_head.weight"))]
    if not any(n == "lm_head.weight" for n in names):
        names.append(tied_name)
    return names


def test_fp32_weights_used_in_place_with_zero_copy(checkpoint, stories_bin):
    m = decodelab.load(checkpoint("llama-tiny"), zero_copy=True)
    assert m.weight_bytes["converted"] == 0 and m.weight_bytes["mapped"] > 0
    s = decodelab.load(stories_bin, zero_copy=True)
    assert s.weight_bytes == {"mapped": 1056540, "converted": 0, "quantized": 0}
    # bf16 weights are converted to fp32 once: every parameter, 4 bytes each.
    b = decodelab.load(checkpoint("llama-tiny", dtype="bfloat16"), zero_copy=True)
    n_params = sum(t.size for t in decodelab.testing.random_weights("llama-tiny")[1].values())
    assert b.weight_bytes["converted"] == 4 * n_params


def test_fp32_weights_copied_once_by_default(checkpoint):
    # By default the linear layers and the head (here tied to the embedding table or not, as the
    # tiny config says) are copied into one block, each padded to 64 bytes; nothing else is.
    m = decodelab.load(checkpoint("llama-tiny"))
    tensors = decodelab.testing.random_weights("llama-tiny")[1]
    names = _read_per_step(tensors, "model.embed_tokens.weight")
    assert m.weight_bytes["converted"] == sum(_padded(tensors[n].size) for n in names)
    # Packed layers: only the norm vectors are copied (read with pread, not through the mapping).
    vectors = sum(4 * t.size for t in tensors.values() if t.ndim == 1)
    assert vectors > 0 and decodelab.load(checkpoint("llama-tiny"), dtype="int8").weight_bytes["converted"] == vectors


@pytest.mark.parametrize("name", ["llama-tiny", "gpt2-tiny"])
def test_copied_and_mapped_fp32_weights_give_the_same_logits(checkpoint, name):
    ids = [int(i) for i in np.random.default_rng(3).integers(3, 200, 40)]
    copied, mapped = decodelab.load(checkpoint(name)), decodelab.load(checkpoint(name), zero_copy=True)
    assert np.array_equal(copied.forward(ids), mapped.forward(ids))
    a, b = copied.new_cache(), mapped.new_cache()
    copied.prefill(ids[:30], a), mapped.prefill(ids[:30], b)
    assert np.array_equal(copied.decode_batch(ids[30:33], [a, a.fork(), a.fork()]),
                          mapped.decode_batch(ids[30:33], [b, b.fork(), b.fork()]))


def test_zero_copy_must_be_a_bool(checkpoint):
    with pytest.raises(TypeError, match="zero_copy must be True or False, got 'yes'"):
        decodelab.load(checkpoint("llama-tiny"), zero_copy="yes")


def test_gpt2_conv1d_weights_are_transposed_once(checkpoint):
    # GPT-2 stores Conv1D weights (in, out); fp32 decode uses an (out, in) copy of each, made once
    # at load, and with zero_copy nothing else is copied. Quantized loads convert from the mapping
    # directly.
    m = decodelab.load(checkpoint("gpt2-tiny"), zero_copy=True)
    tensors = decodelab.testing.random_weights("gpt2-tiny")[1]
    conv = sum(t.size for n, t in tensors.items() if n.endswith(("c_attn.weight", "c_proj.weight", "c_fc.weight")))
    assert m.weight_bytes["converted"] == 4 * conv
    # By default the transposed copies and the tied head go into the model's block instead.
    names = _read_per_step(tensors, "transformer.wte.weight")
    assert decodelab.load(checkpoint("gpt2-tiny")).weight_bytes["converted"] == sum(_padded(tensors[n].size) for n in names)
    # Packed layers: the norm and bias vectors alone are copied (read with pread).
    vectors = sum(4 * t.size for t in tensors.values() if t.ndim == 1)
    assert vectors > 0 and decodelab.load(checkpoint("gpt2-tiny"), dtype="int8").weight_bytes["converted"] == vectors


@pytest.mark.parametrize("n", [5, 12, 20, 60, 300])
def test_same_input_gives_bitwise_same_logits(stories, n):
    # Every scratch buffer is 64-byte aligned with aligned per-thread strides, so which thread or
    # which allocation serves a call does not change the order of any sum.
    ids = [int(i) for i in np.random.default_rng(n).integers(3, 512, n)]
    first = stories.forward(ids)
    assert np.array_equal(first, stories.forward(ids))
    c = stories.new_cache()
    stories.prefill(ids[:-1], c)
    again = stories.decode(ids[-1], c)
    c2 = stories.new_cache()
    stories.prefill(ids[:-1], c2)
    assert np.array_equal(again, stories.decode(ids[-1], c2))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int8"])
def test_concurrent_calls_on_separate_caches_match_serial_ones(checkpoint, dtype):
    # Scratch is lent by the model to one call at a time; calls from several Python threads (the
    # engine releases the GIL) must each get their own, or their activations would mix.
    m = decodelab.load(checkpoint("llama-tiny"), dtype=dtype)
    rng = np.random.default_rng(3)
    prompts = [rng.integers(0, m.config.vocab_size, size=n).tolist() for n in (40, 23, 31, 17, 40, 9)]

    def run(ids):
        c = m.new_cache()
        rows = [m.prefill(ids, c)]
        for t in ids[:6]:
            rows.append(m.decode(t, c))
        return np.stack(rows)

    serial = [run(p) for p in prompts]
    results = [None] * len(prompts)
    errors = []

    def worker(i):
        try:
            for _ in range(5):
                results[i] = run(prompts[i])
                if not np.array_equal(results[i], serial[i]):
                    return
        except Exception as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for got, want in zip(results, serial):
        np.testing.assert_array_equal(got, want)


def test_rope_past_the_table_matches_full_forward(tmp_path):
    # RoPE rows past the first 8192 positions are computed per pass rather than tabled: cached
    # decode steps across that edge must give the logits a full forward pass gives there.
    from decodelab import testing

    shape = dict(testing.SHAPES["llama-tiny"], max_position_embeddings=8300)
    m = decodelab.load(testing.write_checkpoint(str(tmp_path / "long"), shape), threads=1)
    rng = np.random.default_rng(0)
    ids = rng.integers(0, m.config.vocab_size, size=8200).tolist()
    full = m.forward(ids)
    cache = m.new_cache()
    m.prefill(ids[:8188], cache)
    steps = np.stack([m.decode(t, cache) for t in ids[8188:]])
    np.testing.assert_allclose(steps, full[8188:], rtol=0, atol=1e-4)
    assert not np.allclose(full[8195], full[8196])


def test_attentions_are_checked_and_held_to_the_memory_budget(monkeypatch):
    """forward(attentions=...) takes a bool, refuses a plan over the memory budget by name, and the
    binding refuses a cache that already holds positions."""
    model = decodelab.load("stories260K")
    with pytest.raises(ValueError, match="attentions must be True or False"):
        model.forward([1, 2], attentions=1)
    monkeypatch.setenv("DECODELAB_MEMORY_BUDGET", str(10_000))
    with pytest.raises(ValueError, match=r"attentions=True over 40 tokens \(5 layers x 8 heads\)"):
        model.forward(list(range(1, 41)), attentions=True)
    cache = model._engine.new_cache(8, "float32", False)
    model._engine.forward(np.asarray([1, 2], dtype=np.int64), cache, True)
    with pytest.raises(ValueError, match="need an empty cache"):
        model._engine.forward_hidden(np.asarray([3], dtype=np.int64), cache, True)
