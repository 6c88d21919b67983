"""Samplers: hand-computed expectations, edge cases, parity with transformers' logits processors
and vLLM's penalty formulas, seeded determinism and the sampled frequencies."""
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st
from transformers.generation import logits_process as hf

import decodelab
import decodelab.samplers as S

FOUR = np.log([0.5, 0.2, 0.2, 0.1])


def kept(x):
    return ~(np.isnan(x) | np.isneginf(x))


def test_every_sampler_documents_range_noop_and_example():
    for name in S.__all__:
        obj = getattr(S, name)
        if isinstance(obj, type) and issubclass(obj, S.Sampler) and obj not in (S.Sampler, S.Chain):
            doc = obj.__doc__ or ""
            assert ">>> " in doc, name
            assert ("Range" in doc or obj in (S.Greedy, S.SuppressTokens)) and ("No-op" in doc or obj.selects), name


# --- hand-computed expectations and edge cases ---------------------------------------------------

def test_top_k_edges():
    assert S.probs(S.TopK(0).apply(FOUR)) == [0.5, 0.2, 0.2, 0.1]          # 0 disables
    assert S.probs(S.TopK(10).apply(FOUR)) == [0.5, 0.2, 0.2, 0.1]         # k > vocab
    assert S.probs(S.TopK(1).apply(FOUR)) == [1.0, 0.0, 0.0, 0.0]
    assert S.probs(S.TopK(2).apply(FOUR)) == [0.556, 0.222, 0.222, 0.0]    # ties with the k-th kept


def test_top_p_edges():
    assert S.probs(S.TopP(1.0).apply(FOUR)) == [0.5, 0.2, 0.2, 0.1]
    assert S.probs(S.TopP(1e-9).apply(FOUR)) == [1.0, 0.0, 0.0, 0.0]       # tiny p keeps the top token
    # [0.5, 0.3, 0.2], p = 0.6: the crossing token is kept -> 2 tokens (REFERENCE.md)
    assert kept(S.TopP(0.6).apply(np.log([0.5, 0.3, 0.2]))).sum() == 2
    assert kept(S.TopP(0.5).apply(np.log([0.5, 0.3, 0.2]))).sum() == 1


def test_temperature_edges():
    assert S.probs(S.Temperature(0).apply(FOUR)) == [1.0, 0.0, 0.0, 0.0]
    near = S.Temperature(1e-6).apply(FOUR)
    assert np.all(np.isfinite(near)) and S.probs(near) == [1.0, 0.0, 0.0, 0.0]
    assert S.probs(S.Temperature(1.0).apply(FOUR)) == [0.5, 0.2, 0.2, 0.1]
    hot = S.probs(S.Temperature(100.0).apply(FOUR))
    assert max(hot) - min(hot) < 0.01


def test_greedy_ties_nan_and_inf():
    assert int(np.argmax(S.Greedy().apply([1.0, 3.0, 3.0]))) == 1          # lowest id wins a tie
    g = S.Greedy().apply([np.nan, 1.0, 0.5])
    assert kept(g).tolist() == [False, True, False]                          # NaN counts as removed
    g = S.Greedy().apply([0.0, np.inf, 5.0])
    assert kept(g).tolist() == [False, True, False]
    assert S.probs([0.0, np.inf, np.inf]) == [0.0, 0.5, 0.5]                 # +inf takes all the mass
    with pytest.raises(ValueError, match="no candidate token has a finite logit"):
        S.Greedy().apply([-np.inf, np.nan])
    with pytest.raises(ValueError, match="no candidate token"):
        S.Dist(0).apply([-np.inf, -np.inf])


@pytest.mark.parametrize("n", [17, 50257])
def test_greedy_over_a_vocabulary_keeps_the_first_largest(n):
    """Greedy over vocabularies past one vector: ties across and within vectors and in the tail,
    NaN and -inf anywhere, -0.0 against 0.0. It keeps the lowest id of the largest value, untouched."""
    rng = np.random.default_rng(n)
    for top in {0, 15, 16, n // 2, n - 17, n - 2, n - 1}:
        x = rng.standard_normal(n).astype(np.float32)
        x[rng.integers(0, n, size=n // 9 + 1)] = np.nan
        x[rng.integers(0, n, size=n // 9 + 1)] = -np.inf
        x[top] = 7.5
        later = [i for i in (top + 1, top + 16, n - 1) if top < i < n]
        x[later] = 7.5                                             # ties after it lose
        g = S.Greedy().apply(x)
        assert kept(g).tolist() == [i == top for i in range(n)], top
        assert g[top] == 7.5
    zeros = np.full(n, -np.inf, np.float32)
    zeros[[3, 9]] = [-0.0, 0.0]
    assert np.flatnonzero(kept(S.Greedy().apply(zeros))).tolist() == [3]
    with pytest.raises(ValueError, match="no candidate token has a finite logit"):
        S.Greedy().apply(np.where(np.arange(n) % 2, np.nan, -np.inf))


@pytest.mark.parametrize("order", ["random", "ascending", "descending"])
@pytest.mark.parametrize("k", [1, 2, 40, 1000, 50000])
def test_top_k_keeps_every_candidate_at_or_above_the_kth(order, k):
    """top_k over 50,257 logits in any order, with NaN, -inf and repeated values: it keeps exactly
    the candidates at or above the k-th largest candidate (ties with it included)."""
    rng = np.random.default_rng(k)
    x = np.round(rng.standard_normal(50257) * 3, 1).astype(np.float32)  # many ties
    if order != "random":
        x = np.sort(x) if order == "ascending" else -np.sort(x)
    x[rng.integers(0, x.size, 500)] = np.nan
    x[rng.integers(0, x.size, 500)] = -np.inf
    cand = x[~(np.isnan(x) | np.isneginf(x))]
    kth = np.sort(cand)[::-1][min(k, cand.size) - 1]
    want = ~(np.isnan(x) | np.isneginf(x)) & (x >= kth)
    np.testing.assert_array_equal(kept(S.TopK(k).apply(x)), want)


@pytest.mark.parametrize("top", [0, 20, 47, 49])
def test_cutoffs_keep_the_most_likely_token_anywhere(top):
    """Epsilon cutoffs above every probability, and min_p near 1, keep the most likely token
    wherever it sits (in a vector of 16 or in the tail) and remove every other; NaN stays removed."""
    x = np.linspace(0.0, 1.0, 50).astype(np.float32)
    x[top] = 3.0
    x[(top + 7) % 50] = np.nan
    for s in (S.EpsilonCutoff(0.5), S.EpsilonCutoff(0.99), S.MinP(0.999)):
        assert np.flatnonzero(kept(s.apply(x))).tolist() == [top], s


def test_removed_tokens_have_exactly_zero_probability():
    x = S.TopK(2).apply(np.log([0.5, 0.2, 0.2, 0.1]).astype(np.float32) * 3)
    p = S.softmax(x)
    assert (p[~kept(x)] == 0).all() and p.sum() == pytest.approx(1.0)
    recs = S.Chain([S.TopK(1), S.Dist(0)]).trace(np.arange(50, dtype=np.float32))
    assert recs[1].top_probs[1:] == [0.0] * (len(recs[1].top_probs) - 1)


def test_everything_filtered_keeps_the_top_token():
    x = np.log([0.4, 0.35, 0.25])
    for s in (S.MinP(1.0), S.EpsilonCutoff(0.99), S.EtaCutoff(0.99), S.TopP(1e-6), S.TypicalP(1e-6),
              S.TopNSigma(1e-6)):
        assert kept(s.apply(x)).sum() >= 1, s
    assert kept(S.MinP(1.0).apply(x)).tolist() == [True, False, False]
    assert kept(S.EpsilonCutoff(0.99).apply(x)).tolist() == [True, False, False]


def test_penalties_by_hand():
    x = np.array([2.0, -1.0, 0.5, 0.0], dtype=np.float32)
    # Repetition: each distinct context token once; negative logits multiplied, positive divided.
    np.testing.assert_allclose(S.RepetitionPenalty(2.0).apply(x, [0, 1, 1]), [1.0, -2.0, 0.5, 0.0])
    np.testing.assert_allclose(S.RepetitionPenalty(2.0, last_n=1).apply(x, [0, 1, 1]), [2.0, -2.0, 0.5, 0.0])
    # Presence / frequency count only the output (after n_prompt).
    np.testing.assert_allclose(S.PresencePenalty(0.5).apply(x, [2, 0, 0, 3], n_prompt=1), [1.5, -1.0, 0.5, -0.5])
    np.testing.assert_allclose(S.FrequencyPenalty(0.5).apply(x, [2, 0, 0, 3], n_prompt=1), [1.0, -1.0, 0.5, -0.5])
    f = S.FrequencyPenalty(0.5)  # one object, called again: no count carried over
    for _ in range(3):
        np.testing.assert_allclose(f.apply(x, [2, 0, 0, 3], n_prompt=1), [1.0, -1.0, 0.5, -0.5])
    np.testing.assert_allclose(f.apply(x, [0, 2, 2], n_prompt=1), [2.0, -1.0, -0.5, 0.0])
    np.testing.assert_allclose(S.LogitBias({1: 3.0, 3: -np.inf}).apply(x), [2.0, 2.0, 0.5, -np.inf])
    assert kept(S.SuppressTokens([0, 2]).apply(x)).tolist() == [False, True, False, True]
    assert kept(S.MinNewTokens(2, [3]).apply(x, [1, 1, 2], n_prompt=2)).tolist() == [True, True, True, False]
    assert kept(S.MinNewTokens(2, [3]).apply(x, [1, 1, 2, 0], n_prompt=2)).all()
    # No-repeat 3-gram: context ends "1 2"; "1 2 3" and "1 2 0" occurred.
    assert kept(S.NoRepeatNGram(3).apply(x, [1, 2, 3, 1, 2, 0, 1, 2])).tolist() == [False, True, True, False]


def test_dry_by_hand():
    x = np.zeros(5, dtype=np.float32)
    # Context ... 1 2 3 | 4 ... 1 2 3: the run "1 2 3" (length 3) was followed by 4.
    out = S.DRY(multiplier=0.8, base=1.75, allowed_length=2).apply(x, [1, 2, 3, 4, 0, 1, 2, 3])
    np.testing.assert_allclose(out, [0, 0, 0, 0, -0.8 * 1.75 ** 1], rtol=1e-6)
    # A sequence breaker (token 2) cuts the run to "3" alone: shorter than allowed_length.
    out = S.DRY(multiplier=0.8, base=1.75, allowed_length=2, sequence_breakers=[2]).apply(x, [1, 2, 3, 4, 0, 1, 2, 3])
    np.testing.assert_allclose(out, np.zeros(5))


def test_xtc_and_top_n_sigma_by_hand():
    x = np.log([0.4, 0.3, 0.2, 0.1])
    assert kept(S.XTC(1.0, 0.25).apply(x)).tolist() == [False, True, True, True]  # least likely above stays
    assert kept(S.XTC(1.0, 0.35).apply(x)).all()                                  # only one above: no-op
    assert kept(S.XTC(0.0, 0.1).apply(x)).all()
    z = np.array([3.0, 2.0, 1.0, 0.0], dtype=np.float32)                         # mean 1.5, std 1.118
    assert kept(S.TopNSigma(1.0).apply(z)).tolist() == [True, True, False, False]


@pytest.mark.parametrize("tau", [4.0, 6.0, 9.0])
def test_mirostat_draws_only_tokens_within_its_surprise_bound(tau):
    """Before it accepts anything mu is 2 tau: every draw has surprise -log2 p <= mu, or is the
    most likely token; over a GPT-2-sized vocabulary the draws are several different tokens."""
    x = (np.random.default_rng(int(tau)).standard_normal(50257) * 3).astype(np.float32)
    p = S.softmax(x).astype(np.float64)
    draws = {int(np.argmax(S.Mirostat(tau=tau, eta=0.1, seed=5).apply(x, step=i))) for i in range(200)}
    assert all(-np.log2(p[t]) <= 2 * tau or t == int(np.argmax(p)) for t in draws)
    assert len(draws) > 1


def test_mirostat_state_accept_reset_clone():
    m = S.Mirostat(tau=1.0, eta=0.5, seed=3)
    first = [int(np.argmax(m.apply(FOUR, step=i))) for i in range(1)]
    c = m.clone()
    m.accept(first[0])                     # mu moves: surprise of the token vs tau
    runs = []
    for s in (m, c):
        toks = []
        for i in range(30):
            t = int(np.argmax(s.apply(FOUR, step=i)))
            s.accept(t)
            toks.append(t)
        runs.append(toks)
    assert runs[0] != runs[1]              # the clone kept the earlier mu
    m.reset()
    c.reset()
    a = [int(np.argmax(m.apply(FOUR, step=i))) for i in range(5)]
    b = [int(np.argmax(c.apply(FOUR, step=i))) for i in range(5)]
    assert a == b


def test_apply_never_mutates_the_input():
    x = np.array([1.0, 2.0, 3.0, 4.0], dtype=np.float32)
    for s in (S.TopK(1), S.Temperature(0.5), S.Greedy(), S.Dist(1), S.Chain([S.MinP(0.5), S.Dist(0)])):
        s.apply(x, [0, 1])
        assert x.tolist() == [1.0, 2.0, 3.0, 4.0]


def test_order_changes_the_kept_set():
    # REFERENCE.md: probabilities [.5, .2, .15, .15], min_p=0.35, top_p=0.7: 2 kept in HF order,
    # 1 in vLLM order (min_p first, then top_p on the renormalised set).
    x = np.log([0.5, 0.2, 0.15, 0.15])
    n = {}
    for order in ("hf", "vllm"):
        chain = S.build_chain(order=order, temperature=1.0, min_p=0.35, top_p=0.7)
        n[order] = chain.trace(x)[-2].n_kept
    assert n == {"hf": 2, "vllm": 1}
    names = [s.name for s in S.build_chain(order="llama.cpp", temperature=0.7, top_k=40, top_p=0.9).stages]
    assert names == ["top_k(40)", "top_p(0.9)", "temperature(0.7)", "dist(seed=0)"]


def test_trace_records():
    chain = S.Chain([S.TopK(3), S.Temperature(0.5), S.TopP(0.8)])
    recs = chain.trace(FOUR)
    assert [r.name for r in recs] == ["input", "top_k(3)", "temperature(0.5)", "top_p(0.8)"]
    assert [r.n_kept for r in recs] == [4, 3, 3, 2]
    assert recs[1].mass_removed == pytest.approx(0.1, abs=1e-6)
    assert recs[0].entropy == pytest.approx(-sum(p * math.log(p) for p in [0.5, 0.2, 0.2, 0.1]), abs=1e-6)
    assert recs[-1].kept.tolist() == [True, False, True, False] or recs[-1].kept.tolist() == [True, True, False, False]
    assert np.isclose(recs[-1].probs.sum(), 1.0)


# --- invalid parameters ---------------------------------------------------------------------------

@pytest.mark.parametrize("make, msg", [
    (lambda: S.TopP(1.5), r"top_p must be in \(0, 1\], got 1.5"),
    (lambda: S.TopP(float("nan")), r"top_p must be finite in float32 .*, got nan"),
    (lambda: S.Temperature(-1), "temperature must be 0 \\(greedy\\) or a finite number >= 1e-06 .*, got -1"),
    (lambda: S.TopK(-3), r"top_k must be >= 0 \(0 disables it\), got -3"),
    (lambda: S.TopK(2.5), "top_k must be an integer, got 2.5"),
    (lambda: S.MinP(1.2), r"min_p must be in \[0, 1\], got 1.2"),
    (lambda: S.TypicalP(0), r"typical_p must be in \(0, 1\], got 0"),
    (lambda: S.RepetitionPenalty(0), "repetition_penalty must be in \\[0.001, 1000\\] .*, got 0"),
    (lambda: S.PresencePenalty(3), r"presence_penalty must be in \[-2, 2\], got 3"),
    (lambda: S.FrequencyPenalty(-2.5), r"frequency_penalty must be in \[-2, 2\], got -2.5"),
    (lambda: S.Dist(-1), "seed must be an integer >= 0, got -1"),
    (lambda: S.Mirostat(tau=0), "mirostat tau must be a finite number > 0, got 0"),
    (lambda: S.build_chain(order="beam"), "order must be one of 'hf', 'vllm', 'llama.cpp', got 'beam'"),
    (lambda: S.build_chain(order="vllm", temperature=1.0, typical_p=0.9),
     "typical_p is not part of the 'vllm' sampler order; use order='hf'"),
])
def test_invalid_parameters(make, msg):
    with pytest.raises(ValueError, match=msg):
        make()


def test_out_of_vocabulary_ids_in_samplers():
    with pytest.raises(ValueError, match=r"logit_bias token id 9 is outside the vocabulary \[0, 4\)"):
        S.LogitBias({9: 1.0}).apply(FOUR)
    with pytest.raises(ValueError, match=r"suppress_tokens token id 4"):
        S.SuppressTokens([4]).apply(FOUR)


# --- parity with transformers' processors and warpers -------------------------------------------

def _hf(proc, x, context=(1,)):
    ids = torch.tensor([list(context)], dtype=torch.long)
    return proc(ids, torch.from_numpy(np.asarray(x, dtype=np.float32)[None].copy()))[0].numpy()


def _same(ours, theirs):
    assert kept(ours).tolist() == kept(theirs).tolist()
    m = kept(ours)
    np.testing.assert_allclose(ours[m], theirs[m], rtol=1e-6, atol=1e-6)


logit_vectors = st.tuples(st.integers(0, 2**32 - 1), st.integers(2, 300), st.floats(0.1, 8.0)).map(
    lambda a: (np.random.default_rng(a[0]).standard_normal(a[1]) * a[2]).astype(np.float32))


@settings(max_examples=150, deadline=None, derandomize=True)
@given(logit_vectors, st.floats(0.05, 3.0), st.integers(1, 400), st.floats(0.01, 1.0), st.floats(0.0, 1.0))
def test_warpers_match_transformers(x, t, k, p, mp):
    _same(S.Temperature(t).apply(x), _hf(hf.TemperatureLogitsWarper(t), x))
    _same(S.TopK(k).apply(x), _hf(hf.TopKLogitsWarper(k), x))
    _same(S.TopP(p).apply(x), _hf(hf.TopPLogitsWarper(p), x))
    _same(S.MinP(mp).apply(x), _hf(hf.MinPLogitsWarper(mp), x))
    if p < 1.0:  # transformers takes typical_p in (0, 1); 1.0 is the no-op there as here
        _same(S.TypicalP(p).apply(x), _hf(hf.TypicalLogitsWarper(p), x))
    else:
        _same(S.TypicalP(p).apply(x), x)
    eps = min(mp, 0.999) * 0.5
    if eps > 0:
        _same(S.EpsilonCutoff(eps).apply(x), _hf(hf.EpsilonLogitsWarper(eps), x))
        _same(S.EtaCutoff(eps).apply(x), _hf(hf.EtaLogitsWarper(eps), x))


@settings(max_examples=150, deadline=None, derandomize=True)
@given(logit_vectors, st.integers(0, 2**32 - 1), st.floats(0.2, 5.0), st.integers(1, 4))
def test_processors_match_transformers(x, seed, r, n):
    V = len(x)
    rng = np.random.default_rng(seed)
    ctx = rng.integers(0, min(V, 6), size=int(rng.integers(1, 40))).tolist()  # small alphabet: repeats
    _same(S.RepetitionPenalty(r).apply(x, ctx), _hf(hf.RepetitionPenaltyLogitsProcessor(r), x, ctx))
    _same(S.NoRepeatNGram(n).apply(x, ctx), _hf(hf.NoRepeatNGramLogitsProcessor(n), x, ctx))
    sup = sorted(set(rng.integers(0, V, size=3).tolist()))
    _same(S.SuppressTokens(sup).apply(x, ctx), _hf(hf.SuppressTokensLogitsProcessor(sup), x, ctx))
    n_prompt = int(rng.integers(0, len(ctx) + 1))
    m = int(rng.integers(0, 5))
    _same(S.MinNewTokens(m, [0]).apply(x, ctx, n_prompt=n_prompt),
          _hf(hf.MinNewTokensLengthLogitsProcessor(n_prompt, m, 0), x, ctx))


@settings(max_examples=100, deadline=None, derandomize=True)
@given(logit_vectors, st.integers(0, 2**32 - 1), st.floats(-2, 2), st.floats(-2, 2))
def test_presence_frequency_match_vllm_formula(x, seed, pres, freq):
    rng = np.random.default_rng(seed)
    ctx = rng.integers(0, len(x), size=int(rng.integers(1, 30))).tolist()
    n_prompt = int(rng.integers(0, len(ctx) + 1))
    counts = np.bincount(ctx[n_prompt:], minlength=len(x)).astype(np.float32)
    # vLLM: logits -= frequency_penalty * counts + presence_penalty * (counts > 0), output only
    want = x - freq * counts - pres * (counts > 0)
    got = S.FrequencyPenalty(freq).apply(S.PresencePenalty(pres).apply(x, ctx, n_prompt=n_prompt), ctx,
                                         n_prompt=n_prompt)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("nsigma", [0.5, 1.0, 3.0])
def test_top_n_sigma_over_a_gpt2_sized_vocabulary(nsigma):
    """top-n-sigma over 50,257 logits with NaN and -inf: it keeps the finite logits at or above
    max - n x std (statistics over the finite ones, in float64), two of them placed near the bar."""
    rng = np.random.default_rng(int(nsigma * 10))
    x = (rng.standard_normal(50257) * 3).astype(np.float32)
    x[rng.integers(0, x.size, 300)] = np.nan
    x[rng.integers(0, x.size, 300)] = -np.inf
    fin = np.isfinite(x)
    v = x[fin].astype(np.float64)
    bar = v.max() - nsigma * np.sqrt(max(0.0, (v * v).mean() - v.mean() ** 2))
    edge = np.float32(bar)
    x[[5, 50000]] = [np.nextafter(edge, np.float32(-np.inf)), np.nextafter(edge, np.float32(np.inf))]
    fin = np.isfinite(x)
    v = x[fin].astype(np.float64)
    bar = v.max() - nsigma * np.sqrt(max(0.0, (v * v).mean() - v.mean() ** 2))
    np.testing.assert_array_equal(kept(S.TopNSigma(nsigma).apply(x)), fin & (x >= bar))


def test_softmax_does_not_depend_on_where_the_logits_lie():
    """The same logits at every offset within a cache line give the same probabilities to the bit
    (Eigen's scalar head before its first aligned element once made the last bit vary)."""
    x = (np.random.default_rng(5).standard_normal(1000) * 3).astype(np.float32)
    buf = np.zeros(1100, np.float32)
    want = None
    for off in range(16):
        buf[off:off + 1000] = x
        got = S.softmax(buf[off:off + 1000])
        want = got if want is None else want
        np.testing.assert_array_equal(got, want)


def _typical_reference(x, mass):
    """typical_p in float64 with a full stable sort: the semantics the engine keeps (transformers'
    float32 arithmetic differs from it at this size, so the comparison with it stays at 300 tokens)."""
    p = S.softmax(x).astype(np.float64)
    lp = np.log(np.where(p > 0, p, 1.0))
    H = -np.sum(p * lp)
    shift = np.where(p > 0, np.abs(-lp - H), np.inf)
    order = np.argsort(shift, kind="stable")
    cum = np.cumsum(p[order])
    last = min(int(np.sum(cum < mass)), len(x) - 1)
    remove = shift > shift[order[last]]
    remove[order[0]] = False
    return np.where(remove, -np.inf, x).astype(np.float32)


@pytest.mark.parametrize("scale", [0.5, 3.0, 10.0])
def test_typical_p_on_a_gpt2_sized_vocabulary(scale):
    """typical_p histograms the mass by distance and sorts one bucket; over 50,257 tokens it must
    keep what a full sort keeps."""
    x = (np.random.default_rng(int(scale * 10) + 1).standard_normal(50257) * scale).astype(np.float32)
    x[::1000] = -np.inf
    for mass in (0.05, 0.5, 0.9, 0.99, 0.9999):
        got = kept(S.TypicalP(mass).apply(x))
        # Sums in another order round differently: the set may end one token either side only
        # where the running mass lies within 1e-9 of p.
        assert np.all(kept(_typical_reference(x, mass - 1e-9)) <= got), mass
        assert np.all(got <= kept(_typical_reference(x, mass + 1e-9))), mass


# --- randomness ------------------------------------------------------------------------------------

def test_sampled_frequencies_match_the_processed_distribution():
    x = np.random.default_rng(0).standard_normal(12).astype(np.float32) * 2
    chain = S.Chain([S.TopK(6), S.Temperature(0.8), S.Dist(seed=11)])
    processed = S.Chain(chain.stages[:-1]).apply(x)
    p = S.softmax(processed).astype(np.float64)
    n = 30000
    draws = np.array([int(np.argmax(chain.apply(x, step=i))) for i in range(n)])
    obs = np.bincount(draws, minlength=12)
    support = p > 0
    assert set(np.nonzero(obs)[0]) <= set(np.nonzero(support)[0])
    exp = n * p[support]
    chi2 = float(((obs[support] - exp) ** 2 / exp).sum())
    assert chi2 < 20.52  # chi-square critical value, 5 degrees of freedom, alpha = 0.001


def test_same_seed_same_tokens_alone_and_in_a_batch(stories):
    prompts = ["Once upon a time", "The cat sat", "Tom had a big red ball", "One day, Lily"]
    opts = dict(max_new_tokens=40, temperature=1.0, top_p=0.95, seed=1234, eos_token_id=[])
    alone = stories.generate(prompts[2], **opts)
    batch = stories.generate(prompts, **opts)
    assert [g.token_ids for g in batch][2] == alone.token_ids
    assert stories.generate(prompts[2], **dict(opts, seed=99)).token_ids != alone.token_ids
    assert alone.seed == 1234
    other = decodelab.load(stories.path, threads=1)
    assert other.generate(prompts[2], **opts).token_ids == alone.token_ids
    # No seed: a fresh one, reported so the run can be repeated.
    g = stories.generate(prompts[0], max_new_tokens=10, temperature=1.0)
    assert stories.generate(prompts[0], max_new_tokens=10, temperature=1.0, seed=g.seed).token_ids == g.token_ids


def test_generate_keywords_equal_an_explicit_chain(stories):
    kw = stories.generate("Once upon a time", max_new_tokens=30, temperature=0.8, top_k=20, top_p=0.9,
                          repetition_penalty=1.2, seed=7, eos_token_id=[])
    chain = S.Chain([S.RepetitionPenalty(1.2), S.Temperature(0.8), S.TopK(20), S.TopP(0.9), S.Dist(7)])
    ex = stories.generate("Once upon a time", max_new_tokens=30, sampler=chain, eos_token_id=[])
    assert kw.token_ids == ex.token_ids
    assert kw.sampler == repr(chain)


def test_generate_refuses_ambiguous_or_ignored_options(stories):
    with pytest.raises(ValueError, match="top_p has no effect with temperature=0"):
        stories.generate("Hi", top_p=0.9)
    with pytest.raises(ValueError, match="pass either sampler= or sampling keywords"):
        stories.generate("Hi", sampler=S.Greedy(), temperature=1.0)
    with pytest.raises(ValueError, match="preset must be one of"):
        stories.generate("Hi", preset="wild")
    with pytest.raises(ValueError, match="logprobs_mode must be 'raw' or 'processed'"):
        stories.generate("Hi", logprobs=2, logprobs_mode="final")


def test_greedy_with_repetition_penalty_matches_transformers(stories, stories_hf):
    from reference import hf_model

    ref = hf_model(stories_hf)
    ids = stories.tokenizer.encode("Once upon a time")
    with torch.no_grad():
        want = ref.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                            do_sample=False, max_new_tokens=60, repetition_penalty=1.3, no_repeat_ngram_size=3,
                            eos_token_id=None, pad_token_id=0)[0, len(ids):].tolist()
    got = stories.generate(ids, max_new_tokens=60, repetition_penalty=1.3, no_repeat_ngram_size=3, eos_token_id=[])
    assert got.token_ids == want


def test_logprobs_raw_and_processed(stories):
    ids = stories.tokenizer.encode("Once upon a time")
    g = stories.generate(ids, max_new_tokens=6, temperature=0.7, top_k=5, seed=3, logprobs=3, eos_token_id=[])
    full = stories.forward(ids + g.token_ids[:-1])
    raw = full - np.log(np.exp(full - full.max(1, keepdims=True)).sum(1, keepdims=True)) - full.max(1, keepdims=True)
    for i, lp in enumerate(g.logprobs):
        row = raw[len(ids) - 1 + i]
        assert lp.token == g.token_ids[i]
        assert lp.logprob == pytest.approx(row[lp.token], abs=1e-4)
        assert [t.token for t in lp.top] == np.argsort(-row)[:3].tolist()
    p = stories.generate(ids, max_new_tokens=6, temperature=0.7, top_k=5, seed=3, logprobs=3,
                         logprobs_mode="processed", eos_token_id=[])
    assert p.token_ids == g.token_ids
    for i, lp in enumerate(p.logprobs):
        # The processed distribution: temperature 0.7, then the top 5 renormalised.
        z = full[len(ids) - 1 + i] / 0.7
        top5 = np.argsort(-z)[:5]
        logp = z[top5] - np.log(np.exp(z[top5] - z[top5].max()).sum()) - z[top5].max()
        want = dict(zip(top5.tolist(), logp.tolist()))
        assert lp.logprob == pytest.approx(want[lp.token], abs=1e-4)
        assert [t.token for t in lp.top] == top5[:3].tolist()
        assert [t.logprob for t in lp.top] == pytest.approx(logp[:3].tolist(), abs=1e-4)


def test_generation_trace(stories):
    g = stories.generate("Once upon a time", max_new_tokens=5, temperature=0.9, top_k=10, min_p=0.05, seed=1,
                         trace=True, eos_token_id=[])
    assert len(g.trace) == 5
    step = g.trace[0]
    assert [s.name for s in step.stages] == ["raw", "temperature(0.9)", "top_k(10)", "min_p(0.05)", "dist(seed=1)"]
    assert step.stages[0].n_kept == 512 and step.stages[2].n_kept == 10 and step.stages[-1].n_kept == 1
    assert step.stages[-1].top_ids[0] == g.token_ids[0] == step.token
    assert step.rank_processed >= 1 and step.logprob_processed >= step.logprob_raw - 1e-6
    df = g.trace.to_dataframe()
    assert len(df) == 5 * 5 and set(df.columns) >= {"step", "stage", "n_kept", "entropy", "mass_removed"}
    full = stories.generate("Once upon a time", max_new_tokens=2, temperature=0.9, seed=1, trace="full")
    assert full.trace[0].stages[1].logits.shape == (512,)


def test_plot_stages(stories):
    import matplotlib

    matplotlib.use("Agg")
    import decodelab.viz.plot

    recs = S.Chain([S.Temperature(0.7), S.TopK(5), S.Dist(0)]).trace(stories.forward([1, 403])[-1])
    fig = decodelab.viz.plot.stages(recs, tokenizer=stories.tokenizer, top=8)
    assert len(fig.axes) == 4
    g = stories.generate("Once", max_new_tokens=2, temperature=0.8, seed=0, trace=True)
    assert len(decodelab.viz.plot.stages(g.trace[0]).axes) == 3  # raw, temperature, dist


@pytest.mark.parametrize("scale", [0.5, 3.0, 10.0])
def test_top_p_and_min_p_match_transformers_on_a_gpt2_sized_vocabulary(scale):
    x = (np.random.default_rng(int(scale * 10)).standard_normal(50257) * scale).astype(np.float32)
    for p in (0.05, 0.5, 0.9, 0.99):
        _same(S.TopP(p).apply(x), _hf(hf.TopPLogitsWarper(p), x))
        _same(S.MinP(p / 10).apply(x), _hf(hf.MinPLogitsWarper(p / 10), x))
    for k in (1, 40, 1000):
        _same(S.TopK(k).apply(x), _hf(hf.TopKLogitsWarper(k), x))
        # top_p over what top_k left: few candidates (sorted directly) or many (the histogram)
        for p in (0.5, 0.9):
            _same(S.Chain([S.TopK(k), S.TopP(p)]).apply(x),
                  _hf(hf.TopPLogitsWarper(p), _hf(hf.TopKLogitsWarper(k), x)))
