"""Continuous batching (decodelab.serve.engine, the C++ Scheduler): seeded requests give the same bits
alone and among others for fp32, bf16 and int8 weights; prompts prefill in chunks beside running
decodes; cancellation frees blocks; the queue is bounded; prompt prefixes are reused by content."""
import numpy as np
import pytest

import decodelab
from decodelab import _core
from decodelab.serve.engine import BatchEngine, QueueFull

# Wide enough that every linear layer takes the threaded paths at two threads, small enough to be quick.
SHAPE = dict(arch="llama", hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=1000, max_position_embeddings=512, tie_word_embeddings=False)
DTYPES = ["float32", "bfloat16", "int8", "w8a8", "int4"]


@pytest.fixture(scope="module", params=DTYPES)
def wide(request, tmp_path_factory):
    cfg, tensors = decodelab.testing.random_weights(SHAPE, seed=1)
    path = decodelab.testing.write_hf_folder(str(tmp_path_factory.mktemp("wide") / "m"), cfg, tensors)
    return decodelab.load(path, dtype=request.param, threads=2)


@pytest.mark.slow
def test_fixed_rows_give_each_row_the_same_bits_at_every_batch_size(wide):
    """The scheduler's decode pass: row b of a batch of B is the same bits for B = 1..100 (past
    kFixedRowsMax, in passes), while the default one-row kernels may sum in another order."""
    rng = np.random.default_rng(0)
    caches = []
    for b in range(100):
        c = wide.new_cache()
        wide.prefill(rng.integers(0, 1000, size=3 + b % 9).tolist(), c)
        caches.append(c)
    toks = rng.integers(0, 1000, size=100).tolist()
    alone = [wide.decode_batch([toks[b]], [caches[b].fork()], fixed_rows=True)[0] for b in range(100)]
    for B in (2, 3, 5, 16, 47, 48, 49, 64, 100):
        out = wide.decode_batch(toks[:B], [c.fork() for c in caches[:B]], fixed_rows=True)
        for b in range(B):
            assert np.array_equal(out[b], alone[b]), (B, b)


def test_seeded_requests_give_the_same_bits_alone_and_among_others(wide):
    """Each seeded request alone, then all 40 at once (mixed prompt and output lengths, chunked
    prompts, requests joining and leaving): the same tokens and the same logprobs to the bit."""
    rng = np.random.default_rng(1)
    prompts = [rng.integers(0, 1000, size=int(n)).tolist() for n in rng.integers(1, 90, size=40)]
    lengths = [int(n) for n in rng.integers(1, 30, size=40)]
    opts = dict(temperature=1.0, top_k=50, logprobs=1, eos_token_id=[])
    with BatchEngine(wide, max_running=24, prefill_chunk=32, prefill_budget=48) as eng:
        alone = [eng.submit(p, max_new_tokens=n, seed=i, **opts).result(60) for i, (p, n) in
                 enumerate(zip(prompts, lengths))]
        reqs = [eng.submit(p, max_new_tokens=n, seed=i, **opts) for i, (p, n) in enumerate(zip(prompts, lengths))]
        together = [r.result(60) for r in reqs]
        s = eng.stats()
    assert s["decode_rows"] > 3 * s["steps"] / 2  # batches really formed
    for a, t in zip(alone, together):
        assert t.token_ids == a.token_ids and len(t.token_ids) == len(a.logprobs)
        assert [x.logprob for x in t.logprobs] == [x.logprob for x in a.logprobs]


def test_batch_engine_equals_generate_on_stories(stories):
    """stories260K: the engine's greedy and seeded runs give generate()'s tokens, with stop strings
    and logprobs, and the stream pieces join to the text."""
    with BatchEngine(stories) as eng:
        for kw in (dict(), dict(temperature=0.8, seed=3), dict(temperature=0.8, seed=4, stop=["."], logprobs=2)):
            want = stories.generate("Once upon a time", max_new_tokens=40, **kw)
            r = eng.submit("Once upon a time", max_new_tokens=40, **kw)
            pieces = list(r)
            got = r.result()
            assert got.token_ids == want.token_ids and got.text == want.text == "".join(p.text for p in pieces)
            assert got.finish_reason == want.finish_reason and got.stop_reason == want.stop_reason
            if "logprobs" in kw:
                assert [x.top for x in got.logprobs] == [x.top for x in want.logprobs]


def test_a_request_with_a_listener_is_not_iterated(stories):
    # Its events go to the listener, so iterating it would wait forever: it says so instead.
    events = []
    with BatchEngine(stories) as eng:
        r = eng.submit("Once upon a time", max_new_tokens=5, listener=events.append)
        with pytest.raises(ValueError, match="listener"):
            next(iter(r))
        assert len(r.result(timeout=60).token_ids) <= 5
    assert events[-1][0] == "done" and all(kind == "piece" for kind, _ in events[:-1])


def test_a_long_prompt_prefills_in_chunks_while_others_decode(stories):
    """A 300-token prompt in chunks of 16 (budget 16 per step) takes 19 steps; the request already
    decoding gets a token at every one of them."""
    s = _core.Scheduler(stories._engine, prefill_chunk=16, prefill_budget=16)
    opts = stories._options(dict(max_new_tokens=60, eos_token_id=[]), {}).decode_options()
    chain = decodelab.samplers.Chain([decodelab.samplers.Greedy()])
    a = s.add(np.array([1, 400, 300]), chain.clone()._core, opts)
    s.step()
    b = s.add(np.arange(300) % 500 + 1, chain.clone()._core, opts)
    got = {a: 0, b: 0}
    steps = 0
    while not got[b]:
        ups = s.step()
        steps += 1
        assert any(u[0] == a and len(u[1]) == 1 for u in ups)  # a never waits for b's prompt
        for rid, toks, *_ in ups:
            got[rid] += len(toks)
    assert steps == 19 and s.stats()["prefilling"] == 0


def test_cancel_frees_blocks_and_the_queue_is_bounded(stories):
    idle = stories.memory_report().get("float32", {}).get("blocks_in_use", 0)
    with BatchEngine(stories, max_running=2, max_waiting=3) as eng:
        reqs = [eng.submit("Once upon a time", max_new_tokens=500, eos_token_id=[], seed=i) for i in range(5)]
        with pytest.raises(QueueFull, match="3 requests wait already"):
            for _ in range(10):
                eng.submit("Once", max_new_tokens=500, seed=9)
        assert isinstance(QueueFull("x"), RuntimeError)
        for r in reqs:
            r.cancel()
        gens = [r.result(30) for r in reqs]
        assert {g.finish_reason for g in gens} == {"cancelled"} and all(len(g.token_ids) < 500 for g in gens)
        assert eng.stats()["running"] == 0
    assert stories.memory_report()["float32"]["blocks_in_use"] == idle


def test_bad_requests_raise_value_error_naming_the_value(stories):
    with BatchEngine(stories) as eng:
        with pytest.raises(ValueError, match="context window"):
            eng.submit([1] * 500, max_new_tokens=100)
        with pytest.raises(ValueError, match="temperature"):
            eng.submit("Once", temperature=-1)
        with pytest.raises(ValueError, match="n is not supported"):
            eng.submit("Once", n=2)
        with pytest.raises(ValueError, match="guidance_scale"):
            eng.submit("Once", guidance_scale=2.0)
        with pytest.raises(ValueError, match="draft is not supported by the batch engine"):
            eng.submit("Once", draft="prompt_lookup")
        assert eng.submit("Once", max_new_tokens=3, temperature=0).result(10).finish_reason == "length"
    with pytest.raises(ValueError, match="max_running must be >= 1, got 0"):
        BatchEngine(stories, max_running=0)


def test_prompt_prefixes_are_reused_by_content(stories):
    """A prompt that starts with a finished prompt's full blocks starts from them: 2 blocks of 64
    reused, the same greedy tokens, fewer prompt tokens run. Seeded requests never reuse."""
    base = list(np.random.default_rng(3).integers(3, 500, size=150))
    with BatchEngine(stories, prefix_cache_blocks=8) as eng:
        first = eng.submit(base, max_new_tokens=20).result(30)
        again = eng.submit(base[:140] + [7, 8, 9], max_new_tokens=20, temperature=0).result(30)
        seeded = eng.submit(base, max_new_tokens=20, temperature=0, seed=1).result(30)
        s = eng.stats()
    assert first.reused_prompt_tokens == 0 and again.reused_prompt_tokens == 128
    assert seeded.reused_prompt_tokens == 0 and s["cached_blocks"] == 2
    assert s["reused_tokens"] == 128 and s["prompt_tokens"] == 150 + (143 - 128) + 150
    want = stories.generate(base[:140] + [7, 8, 9], max_new_tokens=20)
    assert again.token_ids == want.token_ids
