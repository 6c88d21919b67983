"""The options of each call shape (DecodeOptions, BeamOptions) built from generate()'s resolved
keywords and checked again by the engine; the dtype names' one table; the temperature-0 rule."""
import numpy as np
import pytest

import decodelab
from decodelab import _core
from decodelab import samplers as S


def _resolve(m, **run):
    return m._options(run, {})


def test_run_options_build_each_call_shape(stories):
    m = stories
    o = _resolve(m, max_new_tokens=7, eos_token_id=[3, 5], logprobs=2, logprobs_mode="processed", trace="full",
                 seed=11)
    d = o.decode_options(sequence=4)
    assert (d.max_new_tokens, d.eos_ids, d.sequence, d.logprobs, d.logprobs_processed, d.trace, d.trace_top) == \
        (7, [3, 5], 4, 2, True, 2, _core.DecodeOptions().trace_top)
    assert o.decode_options(logprobs=0).logprobs == 0
    b = _resolve(m, max_new_tokens=5, num_beams=3, num_return_sequences=2, length_penalty=0.5,
                 early_stopping="never", seed=9, trace=True).beam_options(do_sample=True)
    assert (b.num_beams, b.max_new_tokens, b.length_penalty, b.early_stopping, b.num_return_sequences, b.do_sample,
            b.seed, b.trace) == (3, 5, 0.5, -1, 2, True, 9, True)
    assert "num_beams=3" in repr(b) and "sequence=4" in repr(d)


def test_the_engine_checks_options_built_by_hand(stories):
    m = stories
    prompt = np.asarray([1, 2, 3], dtype=np.int64)
    chain = S.Chain([S.Greedy()])._core
    for field, value, msg in [("trace", 3, "trace must be 0, 1 or 2, got 3"),
                              ("trace_top", -1, "trace_top must be >= 0, got -1"),
                              ("logprobs", -2, "logprobs must be -1"),
                              ("max_new_tokens", -1, "max_new_tokens must be >= 0, got -1")]:
        o = _core.DecodeOptions()
        o.max_new_tokens = 4
        setattr(o, field, value)
        with pytest.raises(ValueError, match=msg):
            m._engine.generate(prompt, chain, m._engine.new_cache(16, "float32", False), o)
        with pytest.raises(ValueError, match=msg):
            _core.Decoder(m._engine, prompt, chain, m._engine.new_cache(16, "float32", False), o)
    for field, value, msg in [("early_stopping", 2, "early_stopping must be 1"),
                              ("length_penalty", float("nan"), "length_penalty must be finite"),
                              ("num_beams", 0, "num_beams must be >= 1")]:
        o = _core.BeamOptions()
        o.max_new_tokens = 4
        setattr(o, field, value)
        with pytest.raises(ValueError, match=msg):
            m._engine.beam_search(prompt, S.Chain([])._core, m._engine.new_cache(16, "float32", False), o)
    # The same options, valid, give generate()'s tokens.
    o = _core.DecodeOptions()
    o.max_new_tokens = 6
    r = m._engine.generate(prompt, chain, m._engine.new_cache(16, "float32", False), o)
    assert r["token_ids"] == m.generate([1, 2, 3], max_new_tokens=6, eos_token_id=[]).token_ids


def test_dtype_names_come_from_one_table(stories_bin):
    assert _core.WEIGHT_DTYPES == ("float32", "bfloat16", "int8", "w8a8", "int4")
    assert _core.KV_DTYPES == ("float32", "bfloat16", "int8")
    assert _core.weight_dtype("bf16") == "bfloat16" and _core.kv_dtype("fp32") == "float32"
    with pytest.raises(ValueError, match="cache dtype must be 'float32', 'bfloat16' or 'int8', got 'w8a8'"):
        _core.kv_dtype("w8a8")
    m = decodelab.load(stories_bin, dtype="bf16")
    assert m.dtype == "bfloat16"
    for name in _core.KV_DTYPES:
        assert m.new_cache(8, dtype=name).dtype == name
    with pytest.raises(ValueError, match="dtype must be one of 'float32', 'bfloat16', 'int8', 'w8a8', 'int4', got 3"):
        decodelab.load(stories_bin, dtype=3)


def test_temperature_zero_rule_lives_in_build_chain():
    # Greedy by default where asked (generate()), sampling otherwise.
    assert isinstance(S.build_chain(greedy_default=True).stages[-1], S.Greedy)
    assert isinstance(S.build_chain().stages[-1], S.Dist)
    # A preset's warpers give way to temperature=0; a warper given by keyword is refused.
    chain = S.build_chain(preset="factual", temperature=0)
    assert [type(s) for s in chain.stages] == [S.Greedy]
    with pytest.raises(ValueError, match="top_k has no effect with temperature=0"):
        S.build_chain(preset="factual", temperature=0, top_k=5)
    with pytest.raises(ValueError, match="top_p has no effect with temperature=0"):
        S.build_chain(greedy_default=True, top_p=0.9)
    with pytest.raises(ValueError, match="preset must be one of 'factual', 'balanced', 'creative', got 'x'"):
        S.build_chain(preset="x")
