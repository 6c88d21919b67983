"""Model.profile(): each pass's ops add up to the pass, counted once per layer; weight bytes,
multiply-adds and cache bytes equal what the model's shapes give; only the calling thread's passes
count; misuse raises."""
import threading

import numpy as np
import pytest

import decodelab
from decodelab import profiling
from decodelab._native import _core

LINEAR_OPS = ("qkv_proj", "out_proj", "mlp_in", "mlp_out")


def _shapes(cfg):
    """Weights per op of one layer, and the head's: (in, out) pairs."""
    D, H, hd = cfg.hidden_size, cfg.intermediate_size, cfg.head_dim
    q, kv = cfg.n_heads * hd, cfg.n_kv_heads * hd
    return ({"qkv_proj": [(D, q), (D, kv), (D, kv)], "out_proj": [(q, D)],
             "mlp_in": [(D, H), (D, H)] if cfg.arch != "gpt2" else [(D, H)], "mlp_out": [(H, D)]},
            [(D, cfg.vocab_size)])


def _rows(prof, phase):
    return {r.op: r for r in prof.ops(phase)}


def test_generate_profile_counts_every_op_of_every_pass(stories):
    cfg = stories.config
    L = cfg.n_layers
    with stories.profile() as prof:
        g = stories.generate("Once upon a time", max_new_tokens=12, eos_token_id=[])
    n_prompt = len(g.prompt_token_ids)
    assert prof.passes == {"prompt": 1, "decode": 11}
    assert prof.rows == {"prompt": n_prompt, "decode": 11}
    dec = _rows(prof, "decode")
    for op in ("norm", "residual"):
        assert dec[op].calls == 2 * L * 11, op
    for op in ("qkv_proj", "rope", "attention", "out_proj", "mlp_in", "activation", "mlp_out"):
        assert dec[op].calls == L * 11, op
    assert dec["head"].calls == 11 and dec["embed"].calls == 11
    assert dec["kv_store"].calls == (L + 1) * 11  # each layer's store, and the pass's commit
    assert dec["sampling"].calls == 12  # every token, the first one's after the prompt too
    # The ops of a pass are consecutive wall-time slices of it: together no longer than the decode
    # time generate() measured around them, and most of it.
    assert 0.5 * g.decode_seconds < prof.seconds["decode"] <= g.decode_seconds * 1.05 + 1e-3
    assert sum(r.share for r in dec.values()) == pytest.approx(1.0)
    assert all(r.seconds >= 0 for r in dec.values())


@pytest.mark.parametrize("shape,dtype,per", [("llama-tiny", "float32", 4.0), ("gpt2-tiny", "float32", 4.0),
                                             ("llama-tiny", "bfloat16", 2.0)])
def test_weight_bytes_and_macs_follow_the_shapes(checkpoint, shape, dtype, per):
    m = decodelab.load(checkpoint(shape), dtype=dtype)
    cfg = m.config
    layer, head = _shapes(cfg)
    cache = m.new_cache()
    prompt = [3, 5, 7, 9, 11]
    with m.profile() as prof:
        m.prefill(prompt, cache)
        for t in (4, 6, 8):
            m.decode(t, cache)
    dec, pro = _rows(prof, "decode"), _rows(prof, "prompt")
    for op in LINEAR_OPS:
        params = cfg.n_layers * sum(i * o for i, o in layer[op])
        assert dec[op].weight_bytes == pytest.approx(3 * per * params, rel=1e-12), op
        assert dec[op].macs == pytest.approx(3 * params), op
        assert pro[op].macs == pytest.approx(len(prompt) * params), op  # every prompt row
    hp = sum(i * o for i, o in head)
    assert dec["head"].macs == pytest.approx(3 * hp)
    assert pro["head"].macs == pytest.approx(hp)  # the last row only
    # Attention: a step at context n reads n positions' keys and values in every layer, and each
    # query head does 2 x head_dim multiply-adds per position.
    kv_row = 2 * cfg.n_kv_heads * cfg.head_dim * 4  # fp32 cache
    contexts = [6, 7, 8]
    assert prof.kv_bytes["decode"] == pytest.approx(cfg.n_layers * kv_row * sum(contexts))
    assert dec["attention"].macs == pytest.approx(cfg.n_layers * 2 * cfg.n_heads * cfg.head_dim * sum(contexts))
    assert pro["attention"].macs == pytest.approx(cfg.n_layers * 2 * cfg.n_heads * cfg.head_dim * sum(range(1, 6)))
    assert dec["attention"].read_bytes == prof.kv_bytes["decode"]


def test_int8_cache_bytes_count_the_row_scales(checkpoint):
    m = decodelab.load(checkpoint("llama-tiny"))
    cfg = m.config
    cache = m.new_cache(dtype="int8")
    with m.profile() as prof:
        m.prefill([3, 4], cache)
        m.decode(5, cache)
    per_pos = 2 * (cfg.n_kv_heads * cfg.head_dim + 4 * cfg.n_kv_heads)  # values, and a scale per head row
    assert prof.kv_bytes["decode"] == pytest.approx(cfg.n_layers * per_pos * 3)


def test_int4_weights_count_steps_and_minima(checkpoint):
    m = decodelab.load(checkpoint("llama-tiny"), dtype="int4")
    cfg = m.config
    layer, _ = _shapes(cfg)
    cache = m.new_cache()
    with m.profile() as prof:
        m.prefill([3, 4], cache)
        m.decode(5, cache)
    for op in LINEAR_OPS:
        # 4 bits a weight and a half step and minimum per 32 inputs (GGUF's Q4_1)
        want = cfg.n_layers * sum(i * o / 2 + 4 * o * -(-i // 32) for i, o in layer[op])
        assert _rows(prof, "decode")[op].weight_bytes == pytest.approx(want), op


def test_batched_decode_is_one_decode_pass_of_many_rows(checkpoint):
    m = decodelab.load(checkpoint("llama-tiny"))
    caches = [m.new_cache() for _ in range(3)]
    for c, p in zip(caches, ([3, 4], [5, 6, 7], [8])):
        m.prefill(p, c)
    with m.profile() as prof:
        m.decode_batch([9, 10, 11], caches)
    assert prof.passes == {"prompt": 0, "decode": 1} and prof.rows["decode"] == 3
    # the per-sequence attention runs in one parallel loop: one mark per layer, RoPE and stores inside
    dec = _rows(prof, "decode")
    assert dec["attention"].calls == m.config.n_layers and "rope" not in dec
    cfg = m.config
    assert prof.kv_bytes["decode"] == pytest.approx(cfg.n_layers * 2 * cfg.n_kv_heads * cfg.head_dim * 4 * (3 + 4 + 2))


def test_sliding_window_limits_the_cache_bytes(checkpoint):
    m = decodelab.load(checkpoint("mistral-tiny"))
    cfg = m.config
    window = cfg.sliding_window
    assert window, "mistral-tiny has a sliding window"
    w = window if isinstance(window, int) else window[0]
    cache = m.new_cache()
    m.prefill(list(range(3, 3 + w + 5)), cache)
    with m.profile() as prof:
        m.decode(3, cache)
    kv_row = 2 * cfg.n_kv_heads * cfg.head_dim * 4
    assert prof.kv_bytes["decode"] == pytest.approx(cfg.n_layers * kv_row * w)


def test_only_the_calling_thread_is_profiled(stories):
    with stories.profile() as prof:
        t = threading.Thread(target=lambda: stories.generate("Once", max_new_tokens=4))
        t.start()
        t.join()
    assert prof.passes == {"prompt": 0, "decode": 0}
    assert prof.ops("decode") == [] and "no passes" in repr(prof)


def test_nothing_is_collected_outside_a_profile(stories):
    p = _core.OpProfiler()
    stories.generate("Once", max_new_tokens=4)
    r = p.result()
    assert r["passes"] == [0, 0] and not np.any(r["seconds"])


def test_nested_profiles_the_innermost_collects(stories):
    with stories.profile() as outer:
        stories.generate("Once", max_new_tokens=3, eos_token_id=[])
        with stories.profile() as inner:
            stories.generate("Once", max_new_tokens=5, eos_token_id=[])
        stories.generate("Once", max_new_tokens=3, eos_token_id=[])
    assert inner.passes["decode"] == 4
    assert outer.passes["decode"] == 4


def test_misuse_raises_with_the_reason(stories):
    p = _core.OpProfiler()
    with pytest.raises(ValueError, match="not running"):
        p.stop()
    p.start()
    try:
        with pytest.raises(ValueError, match="already running"):
            p.start()
        err = []

        def other():
            try:
                p.stop()
            except ValueError as e:
                err.append(str(e))
        t = threading.Thread(target=other)
        t.start()
        t.join()
        assert err and "thread that started it" in err[0]
        q = _core.OpProfiler()
        q.start()
        with pytest.raises(ValueError, match="reverse order"):
            p.stop()
        q.stop()
    finally:
        p.stop()
    assert not p.running
    with stories.profile() as prof:
        with pytest.raises(RuntimeError, match="after its with block"):
            prof.ops("decode")
    with pytest.raises(ValueError, match="phase must be one of prompt, decode"):
        prof.ops("train")
    assert not hasattr(prof, "no_such_field")  # a finished profile: plain AttributeError
    with pytest.raises(ValueError, match="probe_bandwidth must be True or False, got 'yes'"):
        stories.profile(probe_bandwidth="yes")


def test_bandwidth_probe_and_tables(stories):
    pytest.importorskip("pandas")
    with stories.profile(probe_bandwidth=True) as prof:
        stories.generate("Once upon a time", max_new_tokens=6, eos_token_id=[])
    assert prof.bandwidth > 1e8
    row = _rows(prof, "decode")["mlp_in"]
    assert prof.bandwidth_share(row) == pytest.approx(row.gb_per_s * 1e9 / prof.bandwidth)
    df = prof.to_pandas()
    assert set(df["phase"]) == {"prompt", "decode"} and "bandwidth_share" in df.columns
    text = repr(prof)
    assert "decode: 5 passes" in text and "read-bandwidth probe" in text and "mlp_in" in text


def test_plot(stories):
    pytest.importorskip("matplotlib")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    with stories.profile() as prof:
        stories.generate("Once", max_new_tokens=4, eos_token_id=[])
    fig = prof.plot("decode")
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()][:2] == ["embed", "norm"]
    plt.close(fig)
    assert isinstance(prof, profiling.Profile)
