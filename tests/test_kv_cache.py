"""KV-cache handles: paged blocks, fork (copy-on-write), truncate, reuse, capacity, bf16.

The tests of paging itself load with kv_block_size=16 (vLLM's default), so their block counts are
written out; the model default (64) and odd sizes are covered where results must not change."""
import numpy as np
import pytest

import decodelab
from decodelab import testing

LONG_LLAMA = dict(arch="llama", hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=512, max_position_embeddings=2048, tie_word_embeddings=False)


def _close(a, b, atol=1e-5):
    np.testing.assert_allclose(a, b, rtol=0, atol=atol)


@pytest.mark.parametrize("shape, seed, block", [("llama-tiny", 0, 16), ("gpt2-tiny", 1, 16), ("llama-tiny", 2, 64),
                                                ("gpt2-tiny", 3, 5), ("llama-tiny", 4, 1)])
def test_random_operation_sequences_equal_recomputation(checkpoint, shape, seed, block):
    m = decodelab.load(checkpoint(shape), kv_block_size=block)
    rng = np.random.default_rng(seed)
    V, ctx = m.config.vocab_size, m.config.max_position_embeddings
    first = rng.integers(0, V, size=int(rng.integers(1, 40))).tolist()
    handles = [(m.new_cache(), [])]
    out = m.prefill(first, handles[0][0])
    handles[0][1].extend(first)
    _close(out, m.forward(first)[-1])
    for _ in range(60):
        i = int(rng.integers(len(handles)))
        cache, toks = handles[i]
        op = rng.choice(["decode", "decode", "prefill", "fork", "truncate"])
        if op == "fork" and len(handles) < 6:
            handles.append((cache.fork(), list(toks)))
            continue
        if op == "truncate" and len(toks) > 1:
            n = int(rng.integers(1, len(toks)))
            cache.truncate(n)
            del toks[n:]
            continue
        new = rng.integers(0, V, size=1 if op != "prefill" else int(rng.integers(2, 20))).tolist()
        if len(toks) + len(new) > ctx:
            continue
        got = m.decode(new[0], cache) if len(new) == 1 else m.prefill(new, cache)
        toks.extend(new)
        assert cache.token_ids == toks and len(cache) == len(toks)
        _close(got, m.forward(toks)[-1])
    # Every handle still reproduces its own sequence after all the sharing and copying.
    for cache, toks in handles:
        for layer in range(m.config.n_layers):
            assert cache.keys(layer).shape == (m.config.n_kv_heads, len(toks), m.config.head_dim)


def test_fork_copies_no_token_and_diverges_copy_on_write(checkpoint):
    m = decodelab.load(checkpoint(LONG_LLAMA), kv_block_size=16)
    ids = np.random.default_rng(0).integers(0, 512, size=1000).tolist()
    base = m.new_cache()
    m.prefill(ids, base)
    before = m.memory_report()["float32"]["blocks_in_use"]
    fork = base.fork()
    assert m.memory_report()["float32"]["blocks_in_use"] == before  # no block was copied
    assert fork.block_table == base.block_table and fork.shared_blocks == len(base.block_table)
    a = m.decode(7, base)
    b = m.decode(9, fork)
    # Only the partly filled last block (1000 % 16 = 8 tokens) was copied, once.
    assert m.memory_report()["float32"]["blocks_in_use"] == before + 1
    assert base.block_table[:-1] == fork.block_table[:-1] and base.block_table[-1] != fork.block_table[-1]
    _close(a, m.forward(ids + [7])[-1])
    _close(b, m.forward(ids + [9])[-1])
    np.testing.assert_array_equal(base.keys(0)[:, :1000], fork.keys(0)[:, :1000])


def test_four_forks_use_far_less_than_four_caches(checkpoint):
    m = decodelab.load(checkpoint(LONG_LLAMA), kv_block_size=16)
    rng = np.random.default_rng(1)
    ids = rng.integers(0, 512, size=1000).tolist()
    single = m.new_cache()
    m.prefill(ids, single)
    for t in rng.integers(0, 512, size=100).tolist():
        m.decode(t, single)
    single_bytes = single.nbytes
    del single
    base = m.new_cache()
    m.prefill(ids, base)
    forks = [base.fork() for _ in range(4)]
    for f in forks:
        for t in rng.integers(0, 512, size=100).tolist():
            m.decode(t, f)
    report = m.memory_report()["float32"]
    in_use = report["bytes_in_use"]
    # 63 prompt blocks shared + per fork one copied block and 6 new ones = 91 blocks, against
    # 4 x 69 = 276 for four separate caches.
    assert in_use == (63 + 4 * 7) * report["block_bytes"]
    assert in_use < 0.4 * 4 * single_bytes
    assert report["bytes_referenced"] == base.nbytes + sum(f.nbytes for f in forks)


@pytest.mark.slow
@pytest.mark.parametrize("shape", ["gpt2-124m", "llama-110m"])
def test_nbytes_equals_formula(checkpoint, shape):
    m = decodelab.load(checkpoint(shape))
    c, bs = m.config, m.kv_block_size
    assert bs == 64  # the default
    # bytes per row of head_dim values: int8 adds its fp32 scale
    for dtype, row in (("float32", 4 * c.head_dim), ("bfloat16", 2 * c.head_dim), ("int8", c.head_dim + 4)):
        cache = m.new_cache(dtype=dtype)
        m.prefill(list(range(64)), cache)
        assert cache.nbytes == 2 * c.n_layers * c.n_kv_heads * 64 * row
        m.decode(1, cache)  # the 65th token opens a second block
        assert cache.nbytes == 2 * c.n_layers * c.n_kv_heads * 2 * bs * row
    if shape == "gpt2-124m":
        assert (c.n_layers, c.n_kv_heads, c.head_dim) == (12, 12, 64)
    else:
        assert (c.n_layers, c.n_kv_heads, c.head_dim) == (12, 4, 64)


def test_memory_report_counts_shared_blocks_once(checkpoint):
    m = decodelab.load(checkpoint("llama-tiny"), kv_block_size=16)
    a = m.new_cache()
    m.prefill(list(range(48)), a)
    b = a.fork()
    r = m.memory_report()["float32"]
    assert r["blocks_shared"] == 3 and r["bytes_in_use"] == 3 * r["block_bytes"]
    assert r["bytes_referenced"] == a.nbytes + b.nbytes == 2 * r["bytes_in_use"]
    del a, b
    r = m.memory_report()["float32"]
    assert r["blocks_in_use"] == 0 and r["blocks_allocated"] >= 3  # freed blocks are kept for reuse


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int8"])
def test_blocks_from_several_chunks_stay_apart(checkpoint, dtype):
    # One block per sequence (block_size 2048: 1 MiB in fp32); the pool carves blocks from chunks of
    # at least 2 MiB that double, so eleven sequences take blocks from more than one chunk (fp32:
    # 2 + 4 + 5 of 8; bf16 and int8: two chunks), and freed blocks are handed out again. Every
    # sequence must read back exactly what a pool of its own holds.
    path = checkpoint(LONG_LLAMA)
    m, ref = decodelab.load(path, kv_block_size=2048), decodelab.load(path, kv_block_size=2048)
    rng = np.random.default_rng(5)
    seqs = [rng.integers(0, 512, size=int(rng.integers(5, 40))).tolist() for _ in range(14)]
    caches = []
    for s in seqs[:11]:
        caches.append(m.new_cache(dtype=dtype))
        m.prefill(s, caches[-1])
    r = m.memory_report()[dtype]
    assert r["blocks_allocated"] == 11 and r["blocks_in_use"] == 11
    del caches[3:6]  # three blocks back to the free list, then to the next three sequences
    for s in seqs[11:]:
        caches.append(m.new_cache(dtype=dtype))
        m.prefill(s, caches[-1])
    assert m.memory_report()[dtype]["blocks_allocated"] == 11
    for cache, s in zip(caches, seqs[:3] + seqs[6:]):
        m.decode(7, cache)
        alone = ref.new_cache(dtype=dtype)
        ref.prefill(s, alone)
        ref.decode(7, alone)
        for layer in range(m.config.n_layers):
            np.testing.assert_array_equal(cache.keys(layer), alone.keys(layer))
            np.testing.assert_array_equal(cache.values(layer), alone.values(layer))


def test_generate_reuses_the_cached_prefix(stories):
    prefix = stories.tokenizer.encode("Once upon a time, there was a little girl named Lily. She loved to play")
    cache = stories.new_cache()
    stories.prefill(prefix, cache)
    g = stories.generate(prefix + stories.tokenizer.encode(" outside", add_special_tokens=False),
                         max_new_tokens=30, cache=cache)
    fresh = stories.generate(g.prompt_token_ids, max_new_tokens=30)
    assert g.reused_prompt_tokens == len(prefix) and g.token_ids == fresh.token_ids
    assert cache.token_ids == g.prompt_token_ids + g.token_ids[:-1]
    # A prompt that departs from the cache keeps the common prefix and prefills the rest.
    other = prefix[:5] + stories.tokenizer.encode(" dog", add_special_tokens=False)
    g2 = stories.generate(other, max_new_tokens=20, cache=cache)
    assert g2.reused_prompt_tokens == 5
    assert g2.token_ids == stories.generate(other, max_new_tokens=20).token_ids
    # The same prompt again: everything but the last token is reused.
    g3 = stories.generate(other, max_new_tokens=20, cache=cache)
    assert g3.reused_prompt_tokens == len(other) - 1 and g3.token_ids == g2.token_ids


def test_capacity_error_and_growth(checkpoint):
    m = decodelab.load(checkpoint("llama-tiny"))
    c = m.new_cache(capacity=20)
    m.prefill(list(range(20)), c)
    with pytest.raises(ValueError, match="exceed the cache capacity of 20 .*grow=True"):
        m.decode(1, c)
    g = m.new_cache(capacity=20, grow=True)
    m.prefill(list(range(20)), g)
    m.decode(1, g)
    assert g.capacity == 40 and len(g) == 21
    m.prefill(list(range(100)), g)
    assert g.capacity == 128  # doubled to 160, held at the context window
    with pytest.raises(ValueError, match="exceed the context window of 128"):
        m.prefill(list(range(8)), g)
    with pytest.raises(ValueError, match="more than the cache capacity of 20"):
        m.generate([1, 2, 3], max_new_tokens=30, cache=m.new_cache(capacity=20))


@pytest.mark.parametrize("dtype,bound,stored", [("bfloat16", 1e-2, np.uint16), ("int8", 2e-2, np.int8)])
def test_reduced_cache_logit_error_is_small(checkpoint, dtype, bound, stored):
    m = decodelab.load(checkpoint("llama-tiny"))
    ids = np.random.default_rng(3).integers(0, 512, size=100).tolist()
    full = m.forward(ids)
    c = m.new_cache(dtype=dtype)
    rows = [m.prefill(ids[:1], c)] + [m.decode(t, c) for t in ids[1:]]
    err = np.abs(np.stack(rows) - full).max()
    assert 0 < err < bound  # rounded keys/values: a small but real change
    assert c.dtype == dtype and c.block(0).dtype == stored
    assert dtype in m.memory_report()


@pytest.mark.parametrize("shape", ["llama-tiny", "gpt2-tiny"])
def test_int8_cache_rows_are_rounded_fp32_rows(checkpoint, shape):
    """Each int8 row is round(x / scale) with scale = max |x| / 127: keys() and values() give back
    scale * value, and block() / block_scales() are the stored integers and scales. The first
    layer's rows (the later ones see the rounding of the layers before) are within half a step of
    the fp32 cache's."""
    m = decodelab.load(checkpoint(shape), kv_block_size=16)
    ids = list(range(3, 40))
    c32, c8 = m.new_cache(), m.new_cache(dtype="int8")
    m.prefill(ids, c32)
    m.prefill(ids, c8)
    for exact, rounded in ((c32.keys(0), c8.keys(0)), (c32.values(0), c8.values(0))):
        step = np.abs(exact).max(axis=-1, keepdims=True) / 127
        assert np.all(np.abs(rounded - exact) <= 0.5 * step * (1 + 1e-5))
        assert np.abs(rounded - exact).max() > 0  # the rounding is real
        np.testing.assert_allclose(np.abs(rounded).max(axis=-1, keepdims=True), 127 * step, rtol=1e-6)
    for layer in range(m.config.n_layers):
        for rounded, kind in ((c8.keys(layer), 0), (c8.values(layer), 1)):
            for b in range(2):  # 37 tokens: blocks 0 and 1 full, rows 0..15 each
                q = c8.block(b)[layer, kind].astype(np.float32)
                scale = c8.block_scales(b)[layer, kind]
                assert np.all(np.abs(q).max(axis=-1) == 127) and np.all(scale > 0)
                np.testing.assert_array_equal(q * scale[..., None], rounded[:, 16 * b:16 * b + 16])
    assert c8.block_scales(0).shape == (m.config.n_layers, 2, m.config.n_kv_heads, 16)
    assert not c8.block_scales(0).flags.writeable
    with pytest.raises(IndexError, match=r"block 3 is out of range \[0, 3\)"):
        c8.block_scales(3)


def test_views(checkpoint):
    m = decodelab.load(checkpoint("llama-tiny"), kv_block_size=16)
    c = m.new_cache()
    m.prefill(list(range(10)), c)
    k = c.keys(1)
    blk = c.block(0)
    assert blk.shape == (2, 2, 2, 16, 16) and not blk.flags.writeable
    assert np.shares_memory(k, blk)  # one block: keys() is a view of it
    np.testing.assert_array_equal(k, blk[1, 0, :, :10, :])
    m.prefill(list(range(10)), c)  # 20 tokens: two blocks, keys() gathers a copy
    k2 = c.keys(1)
    assert k2.shape == (2, 20, 16) and not np.shares_memory(k2, c.block(0))
    np.testing.assert_array_equal(k2[:, 16:], c.block(1)[1, 0, :, :4, :])
    with pytest.raises(IndexError, match=r"block 2 is out of range \[0, 2\)"):
        c.block(2)


def test_truncate_and_clear(checkpoint):
    m = decodelab.load(checkpoint("gpt2-tiny"), kv_block_size=16)
    c = m.new_cache()
    ids = list(range(100, 140))
    m.prefill(ids, c)
    with pytest.raises(ValueError, match=r"truncate\(41\) is outside \[0, 40\]"):
        c.truncate(41)
    with pytest.raises(ValueError, match=r"truncate\(-1\)"):
        c.truncate(-1)
    c.truncate(17)
    assert len(c) == 17 and len(c.block_table) == 2 and c.token_ids == ids[:17]
    _close(m.decode(5, c), m.forward(ids[:17] + [5])[-1])
    c.clear()
    assert len(c) == 0 and c.nbytes == 0
    _close(m.prefill([3, 4], c), m.forward([3, 4])[-1])


def test_repr_tells_what_the_cache_holds(checkpoint):
    m = decodelab.load(checkpoint("llama-tiny"), kv_block_size=16)
    c = m.new_cache(capacity=64)
    m.prefill(list(range(20)), c)
    f = c.fork()
    r = repr(f)
    assert "20/64 tokens" in r and "2 layers x 2 kv heads x head_dim 16" in r and "float32" in r
    assert "2 blocks of 16 (2 shared)" in r and f"{f.nbytes} bytes" in r


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_block_size_does_not_change_logits(checkpoint, dtype):
    """A prompt, one-token steps and a batched step give the same logits whatever the cache's block
    size: bit for bit for multiples of 4 (the decode kernels take a block's rows 4 at a time, so the
    sums run in the same order), to float rounding for others."""
    ids = np.random.default_rng(8).integers(0, 512, size=150).tolist()
    out = {}
    for bs in (1, 7, 16, 64, 4096):
        m = decodelab.load(checkpoint("llama-tiny"), kv_block_size=bs)
        assert m.kv_block_size == bs
        a, b = m.new_cache(dtype=dtype), m.new_cache(dtype=dtype)
        rows = [m.prefill(ids[:100], a), m.prefill(ids[:37], b)]
        rows += [m.decode(t, a) for t in ids[100:120]]
        rows.append(m.decode_batch([3, 4], [a, b]))
        out[bs] = np.concatenate([np.atleast_2d(r) for r in rows])
        assert len(a.block_table) == -(-121 // bs)
    for bs, rows in out.items():
        if bs % 4 == 0:
            np.testing.assert_array_equal(rows, out[16], err_msg=f"kv_block_size={bs}")
        else:
            np.testing.assert_allclose(rows, out[16], rtol=0, atol=1e-6, err_msg=f"kv_block_size={bs}")


def test_bad_block_size(checkpoint):
    path = checkpoint("llama-tiny")
    for bad in (0, -16, 4097):
        with pytest.raises(ValueError, match=f"kv_block_size must be in \\[1, 4096\\], got {bad}"):
            decodelab.load(path, kv_block_size=bad)
    for bad in (16.0, "16", True):
        with pytest.raises(TypeError, match="kv_block_size must be an int"):
            decodelab.load(path, kv_block_size=bad)


def test_bad_cache_dtype(checkpoint):
    m = decodelab.load(checkpoint("llama-tiny"))
    with pytest.raises(ValueError, match="cache dtype must be 'float32', 'bfloat16' or 'int8', got 'int4'"):
        m.new_cache(dtype="int4")
    with pytest.raises(ValueError, match="block_scales\\(\\) is for int8 caches; this one is bfloat16"):
        c = m.new_cache(dtype="bfloat16")
        m.prefill([1, 2], c)
        c.block_scales(0)
    with pytest.raises(ValueError, match="decode takes one token id"):
        m.decode([1, 2], m.new_cache())


@pytest.mark.parametrize("shape", ["llama-tiny", "gpt2-tiny"])
def test_decode_batch_equals_one_by_one(checkpoint, shape):
    m = decodelab.load(checkpoint(shape), kv_block_size=16)
    rng = np.random.default_rng(4)
    seqs = [rng.integers(0, 512, size=n).tolist() for n in (3, 17, 40)]
    caches = []
    for s in seqs:
        c = m.new_cache()
        m.prefill(s, c)
        caches.append(c)
    caches.append(caches[1].fork())  # a fork shares blocks with its parent: copy-on-write per row
    seqs.append(list(seqs[1]))
    nxt = [5, 6, 7, 8]
    got = m.decode_batch(nxt, caches)
    for i, (s, t) in enumerate(zip(seqs, nxt)):
        _close(got[i], m.forward(s + [t])[-1], atol=1e-4)
        assert caches[i].token_ids == s + [t]
    with pytest.raises(ValueError, match="a cache appears twice"):
        m.decode_batch([1, 2], [caches[0], caches[0]])


@pytest.mark.parametrize("shape", ["llama-tiny", "gpt2-tiny"])
def test_decode_batch_on_int8_caches(checkpoint, shape):
    """Batched decode over int8 caches, one of them a fork that shares its parent's blocks: a fork
    given the parent's next token gives the parent's logits bit for bit (its copied block carries
    the row scales); every row is within a rounding step of one-at-a-time decode on its own cache
    and close to the fp32 forward."""
    m = decodelab.load(checkpoint(shape), kv_block_size=16)
    rng = np.random.default_rng(5)
    seqs = [rng.integers(0, 512, size=n).tolist() for n in (3, 17, 40)]
    caches, alone = [], []
    for s in seqs:
        for group in (caches, alone):
            c = m.new_cache(dtype="int8")
            m.prefill(s, c)
            group.append(c)
    caches.append(caches[1].fork())
    seqs.append(list(seqs[1]))
    nxt = [5, 6, 7, 6]  # the fork takes its parent's token
    got = m.decode_batch(nxt, caches)
    np.testing.assert_array_equal(got[3], got[1])
    assert caches[1].shared_blocks == 1 and caches[3].token_ids == caches[1].token_ids  # the first block still shared
    for i, (s, t) in enumerate(zip(seqs[:3], nxt[:3])):
        _close(got[i], m.decode(t, alone[i]), atol=1e-3)
        _close(got[i], m.forward(s + [t])[-1], atol=2e-2)


def _check_steps_against_forward(m, dtype, ids, median_tol=2e-5):
    """A 3-token prompt, then one-token steps over the rest of ids (the decode attention kernels),
    against a full forward pass (the prefill kernels): fp32 caches to 2e-5; bf16 and int8 caches
    within 2e-2 and not exact (keys and values rounded), and close against a full pass that
    rounds them the same way (see below; median_tol: the median row's largest difference there,
    which grows with the number of positions that may flip)."""
    full = m.forward(ids)
    c = m.new_cache(dtype=dtype)
    rows = np.stack([m.prefill(ids[:3], c)] + [m.decode(t, c) for t in ids[3:]])
    err = np.abs(rows - full[2:]).max()
    if dtype == "float32":
        assert err < 2e-5
    else:
        assert 0 < err < 2e-2
        # The two paths compute keys and values in different summation orders, so a value on a
        # rounding boundary may round either way (an int8 step is 1/127 of its row's largest):
        # after one such flip the later rows move by ~1e-4. Most rows still agree to fp32 rounding.
        same = m._engine.forward(np.asarray(ids, dtype=np.int64), m.new_cache(dtype=dtype), True)
        per_row = np.abs(rows - same[2:]).max(axis=1)
        assert per_row.max() < 1e-3 and np.median(per_row) < median_tol


@pytest.mark.parametrize("head_dim", [8, 12, 24, 48, 64, 80, 128])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int8"])
def test_decode_attention_head_sizes(checkpoint, head_dim, dtype):
    """One-token steps (the decode attention kernels; vector ones when head_dim % 8 == 0, and for a
    bf16 cache the even/odd ones when head_dim % 16 == 0; for an int8 cache on AVX-512, when
    head_dim % 16 == 0, kernels that take the columns 64 at a time: 48 and 80 end on a part of 64)
    against a full forward pass (the prefill kernels), over several cache blocks, with
    grouped-query heads."""
    shape = dict(arch="llama", hidden_size=2 * head_dim, intermediate_size=96, num_hidden_layers=2,
                 num_attention_heads=2, num_key_value_heads=1, vocab_size=256, max_position_embeddings=128,
                 tie_word_embeddings=False)
    m = decodelab.load(checkpoint(shape), kv_block_size=16)
    assert m.config.head_dim == head_dim
    _check_steps_against_forward(m, dtype, np.random.default_rng(head_dim).integers(0, 256, size=53).tolist())


# Gemma 2 (4 query heads on 2 KV heads, soft-capped scores, every other layer a sliding window)
# long enough for grouped-query decode attention to split its context into chunks of 256 positions.
LONG_GEMMA2 = dict(testing.SHAPES["gemma2-tiny"], max_position_embeddings=640, sliding_window=300)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int8"])
def test_decode_attention_over_several_chunks(checkpoint, dtype):
    """Decode attention splits a grouped-query model's context into chunks of 256 positions, which
    the threads share, and merges the chunks' softmax sums and weighted values: one-token steps over
    three chunks, with soft caps and a window whose edge falls inside a chunk, against a full pass;
    a 5-token prompt after 500 cached positions (the decode kernels take up to 7 queries); and the
    same bits on one thread and two."""
    path = checkpoint(LONG_GEMMA2)
    m = decodelab.load(path, kv_block_size=16, threads=2)
    ids = np.random.default_rng(7).integers(0, 512, size=600).tolist()
    _check_steps_against_forward(m, dtype, ids, median_tol=1e-4)
    c = m.new_cache(dtype=dtype)
    m.prefill(ids[:500], c)
    rows = m._engine.forward(np.asarray(ids[500:505], dtype=np.int64), c, True)
    want = m.forward(ids[:505])[500:]
    assert np.abs(rows - want).max() < (2e-5 if dtype == "float32" else 2e-2)
    # Token by token from the start (prompts of 8 or more take the prompt kernels, whose sums the
    # thread count may reorder).
    one = decodelab.load(path, kv_block_size=16, threads=1)
    ca, cb = one.new_cache(dtype=dtype), m.new_cache(dtype=dtype)
    for tok in ids[:580]:
        np.testing.assert_array_equal(one.decode(tok, ca), m.decode(tok, cb))


@pytest.mark.parametrize("n_heads,n_kv_heads", [(4, 4), (2, 1), (3, 1), (4, 1), (5, 1), (8, 1), (6, 2)])
@pytest.mark.parametrize("head_dim", [24, 64])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int8"])
def test_decode_attention_query_groups(checkpoint, n_heads, n_kv_heads, head_dim, dtype):
    """One-token steps against a full forward pass for every way the decode kernels take the query
    heads that share a key/value head (one at a time; 2, 3 or 4 in one pass; 5 = 4 + 1; 8 = 4 + 4),
    with fp32 and bf16 caches (head size 64: the even/odd bf16 kernels; 24: in order)."""
    shape = dict(arch="llama", hidden_size=n_heads * head_dim, intermediate_size=96, num_hidden_layers=2,
                 num_attention_heads=n_heads, num_key_value_heads=n_kv_heads, vocab_size=256,
                 max_position_embeddings=128, tie_word_embeddings=False)
    m = decodelab.load(checkpoint(shape), kv_block_size=16)
    assert (m.config.n_heads, m.config.n_kv_heads, m.config.head_dim) == (n_heads, n_kv_heads, head_dim)
    ids = np.random.default_rng(n_heads * 100 + head_dim).integers(0, 256, size=45).tolist()
    _check_steps_against_forward(m, dtype, ids)
