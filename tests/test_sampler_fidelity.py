"""Samplers mean what the system they name means: the cases transformers', llama.cpp's and vLLM's own
test suites pin down (ties with the top token, dividing by the temperature, ranking by logit, the
DRY exponent clamp, min_tokens_to_keep, penalty windows), and a randomized comparison with
transformers' processors over vocabularies up to 50,257 with ties, -inf and extreme scales."""
import math

import numpy as np
import pytest

import decodelab
import decodelab.samplers as S

torch = pytest.importorskip("torch")
hf = pytest.importorskip("transformers.generation.logits_process")


def _hf(proc, x, context=(1,)):
    ids = torch.tensor([list(context)], dtype=torch.long)
    return proc(ids, torch.from_numpy(np.asarray(x, dtype=np.float32)[None].copy()))[0].numpy()


def kept(x):
    return ~(np.isnan(x) | np.isneginf(x))


def test_epsilon_and_eta_keep_every_token_tied_with_the_top():
    # transformers never removes a token whose score equals the top score.
    flat = np.zeros(1000, dtype=np.float32)
    assert kept(S.EpsilonCutoff(0.01).apply(flat)).sum() == 1000
    assert kept(_hf(hf.EpsilonLogitsWarper(0.01), flat)).sum() == 1000
    assert kept(S.EtaCutoff(0.01).apply(flat)).sum() == kept(_hf(hf.EtaLogitsWarper(0.01), flat)).sum()
    # A tie at the top of a peaked distribution: both stay, the tail goes.
    x = np.array([5.0, 5.0] + [0.0] * 200, dtype=np.float32)
    assert kept(S.EpsilonCutoff(0.01).apply(x)).tolist() == [True, True] + [False] * 200


def test_temperature_divides_bit_for_bit_as_transformers():
    x = (np.random.default_rng(0).standard_normal(50257) * 4).astype(np.float32)
    for t in (0.1, 0.3, 0.7, 1.3, 2.9, 1e-3):
        got = S.Temperature(t).apply(x)
        assert np.array_equal(got, _hf(hf.TemperatureLogitsWarper(t), x)), t
        assert np.array_equal(got, x / np.float32(t))
    # Multiplying by 1/T differs in the last bits for some of these.
    assert not np.array_equal(x * np.float32(1 / 0.3), x / np.float32(0.3))


def test_top_p_ranks_by_logit_when_probabilities_round_equal():
    # Tokens 0 and 1: different logits, one float32 probability (exp(tiny - 3) == exp(-3)).
    x = np.array([1.4e-45, 0.0, 3.0], dtype=np.float32)
    p = S.softmax(x)
    assert p[0] == p[1] and x[0] > x[1]
    want = _hf(hf.TopPLogitsWarper(0.93), x)
    assert kept(want).tolist() == [True, False, True]  # the higher logit stays
    assert kept(S.TopP(0.93).apply(x)).tolist() == [True, False, True]


def test_dry_clamps_its_exponent_as_llama_cpp():
    # A run of 600 repeated tokens: 1.75 ** 598 overflows float32; llama.cpp stops the exponent
    # at floor(88.7228391 / ln 1.75) = 158 and the penalty stays finite.
    x = np.zeros(4, dtype=np.float32)
    ctx = [1, 2] * 300 + [1]
    out = S.DRY(multiplier=1.0, base=1.75, allowed_length=2).apply(x, ctx)
    assert np.isfinite(out).all()
    e = math.floor(np.float32(88.7228391) / np.log(np.float32(1.75)))
    assert e == 158
    np.testing.assert_allclose(out[2], -np.float32(1.75 ** e), rtol=1e-6)
    # Every token penalised: some candidate is still left to sample.
    ctx2 = [0, 1, 2, 3] * 100 + [0, 1, 2]
    left = S.Chain([S.DRY(multiplier=2.0, base=3.0, allowed_length=1), S.TopK(1)]).apply(x, ctx2)
    assert kept(left).sum() >= 1


@pytest.mark.parametrize("make", [lambda n: S.DRY(1.0, last_n=n), lambda n: S.RepetitionPenalty(1.2, last_n=n)])
def test_a_zero_penalty_window_is_refused_with_the_reason(make):
    with pytest.raises(ValueError, match=r"last_n must be -1 \(the whole context\) or > 0.*llama.cpp reads 0 as 'off'"):
        make(0)
    x = np.zeros(4, dtype=np.float32)
    # -1 is the whole context, the default.
    np.testing.assert_array_equal(make(-1).apply(x, [1, 2, 1, 2, 1]), make(10**6).apply(x, [1, 2, 1, 2, 1]))


# --- min_tokens_to_keep ------------------------------------------------------------------------

WARPERS = [(S.TopK, hf.TopKLogitsWarper, (1, 3)), (S.TopP, hf.TopPLogitsWarper, (0.05, 0.5, 0.9)),
           (S.MinP, hf.MinPLogitsWarper, (0.2, 0.9, 1.0)), (S.TypicalP, hf.TypicalLogitsWarper, (0.05, 0.5, 0.9)),
           (S.EpsilonCutoff, hf.EpsilonLogitsWarper, (0.01, 0.3)), (S.EtaCutoff, hf.EtaLogitsWarper, (0.01, 0.3))]


@pytest.mark.parametrize("ours,theirs,args", WARPERS, ids=lambda v: getattr(v, "__name__", ""))
@pytest.mark.parametrize("keep", [1, 2, 5])
def test_min_tokens_to_keep_matches_transformers(ours, theirs, args, keep):
    rng = np.random.default_rng(keep)
    for a in args:
        for scale in (0.3, 4.0, 40.0):
            x = (rng.standard_normal(300) * scale).astype(np.float32)
            got, want = ours(a, min_tokens_to_keep=keep).apply(x), _hf(theirs(a, min_tokens_to_keep=keep), x)
            assert kept(got).tolist() == kept(want).tolist(), (a, scale)
            assert kept(got).sum() >= min(keep, 300)


def test_min_tokens_to_keep_is_checked_and_named():
    with pytest.raises(ValueError, match="top_p min_tokens_to_keep must be >= 1, got 0"):
        S.TopP(0.5, min_tokens_to_keep=0)
    assert repr(S.TopP(0.5, min_tokens_to_keep=3)) == "TopP(0.5, min_tokens_to_keep=3)"
    assert repr(S.TopP(0.5)) == "TopP(0.5)"


def test_beam_sampling_keeps_one_more_than_the_eos_ids(stories):
    # transformers' beam sampling passes min_tokens_to_keep = number of EOS ids + 1 to its warpers.
    g = stories.generate("Once upon a time", max_new_tokens=4, num_beams=2, temperature=1.0, top_p=0.01,
                         seed=3, eos_token_id=[2, 5])
    assert "TopP(0.01, min_tokens_to_keep=3)" in g.sampler
    g = stories.generate("Once upon a time", max_new_tokens=4, temperature=1.0, top_p=0.01, seed=3)
    assert "min_tokens_to_keep" not in g.sampler and "0.01" in g.sampler


# --- randomized comparison ---------------------------------------------------------------------

def _vectors(seed):
    """Logit vectors of GPT-2's vocabulary and smaller ones: continuous, quantized (many ties),
    with -inf holes, and at scales from 1e-3 to 1e3."""
    rng = np.random.default_rng(seed)
    for n in (7, 300, 50257):
        for scale in (1e-3, 1.0, 30.0, 1e3):
            x = rng.standard_normal(n) * scale
            yield f"n={n} scale={scale}", x.astype(np.float32)
            yield f"n={n} scale={scale} ties", (np.round(x / scale * 2) * scale / 2).astype(np.float32)
            holes = x.astype(np.float32)
            holes[rng.random(n) < 0.3] = -np.inf
            holes[int(np.argmax(x))] = float(np.max(x))
            yield f"n={n} scale={scale} -inf", holes


def _same_up_to_ties(got, want, *keys):
    """The same kept set, except that a token may trade places with one of an equal key (logit,
    float32 probability, transformers' float32 typicality) on the other side of the cut:
    transformers orders ties by torch.sort, which is not stable past a few dozen elements."""
    kg, kw = kept(got), kept(want)
    if kg.sum() != kw.sum():
        return False
    for i in np.flatnonzero(kg != kw):
        if not any(kw[k == k[i]].any() and (~kw[k == k[i]]).any() for k in keys):
            return False
    return True


def _tied_at(p, k):
    """Whether the k-th largest probability equals the next one, so "the k largest" is ambiguous."""
    top = np.sort(p)[::-1]
    return len(top) > k and top[k - 1] == top[k]


def _typical_distance(x):
    """|-log p - H| as transformers' TypicalLogitsWarper computes it, in float32."""
    lp = torch.log_softmax(torch.from_numpy(x), -1)
    return torch.abs(-lp - (-(lp * lp.exp()).nansum())).numpy()


@pytest.mark.parametrize("seed", [0, 1])
def test_randomized_against_transformers_processors(seed):
    rng = np.random.default_rng(100 + seed)
    checked = 0
    for label, x in _vectors(seed):
        n = len(x)
        keep = int(rng.integers(1, 4))
        t = float(rng.choice([0.2, 0.7, 1.0, 1.9]))
        k = int(rng.integers(1, n + 1))
        p = float(rng.choice([0.05, 0.3, 0.9, 0.99]))
        eps = float(rng.choice([1e-4, 3e-3, 0.05]))
        cases = [(S.Temperature(t), hf.TemperatureLogitsWarper(t)),
                 (S.TopK(k, keep), hf.TopKLogitsWarper(k, min_tokens_to_keep=keep)),
                 (S.TopP(p, keep), hf.TopPLogitsWarper(p, min_tokens_to_keep=keep)),
                 (S.MinP(p / 2, keep), hf.MinPLogitsWarper(p / 2, min_tokens_to_keep=keep)),
                 (S.TypicalP(p, keep), hf.TypicalLogitsWarper(p, min_tokens_to_keep=keep)),
                 (S.EpsilonCutoff(eps, keep), hf.EpsilonLogitsWarper(eps, min_tokens_to_keep=keep)),
                 (S.EtaCutoff(eps, keep), hf.EtaLogitsWarper(eps, min_tokens_to_keep=keep))]
        ctx = rng.integers(0, n, size=30).tolist()
        r = float(rng.choice([0.5, 1.3, 3.0]))
        cases += [(S.RepetitionPenalty(r), hf.RepetitionPenaltyLogitsProcessor(r)),
                  (S.NoRepeatNGram(2), hf.NoRepeatNGramLogitsProcessor(2))]
        for ours, theirs in cases:
            p32 = S.softmax(x)
            if isinstance(ours, S.MinP) and keep > 1 and _tied_at(p32, keep):
                continue  # transformers picks among equal float32 probabilities by torch.topk, -inf ones too
            if isinstance(ours, (S.TypicalP, S.TopP)) and "scale=0.001" in label:
                # Near-uniform: the cut moves with float32 rounding, not with the rule. torch's float32
                # softmax over 50,257 such logits sums to 1 - 5e-5, enough to move top-p's cut by a
                # few tokens, and typicality distances near 1e-4 come from terms near 10.
                continue
            got, want = ours.apply(x, ctx), _hf(theirs, x, ctx)
            assert _same_up_to_ties(got, want, x, p32, _typical_distance(x)), (label, ours)
            m = kept(got) & kept(want)
            assert np.array_equal(got[m], want[m]), (label, ours)  # bit for bit
            checked += 1
    assert checked >= 280  # of 36 vectors x 9 samplers


# --- the processors transformers has beyond the common ones -------------------------------------

def test_sequence_bias_and_bad_words_match_transformers():
    rng = np.random.default_rng(5)
    for trial in range(40):
        n = int(rng.integers(5, 60))
        x = (rng.standard_normal(n) * 3).astype(np.float32)
        ctx = rng.integers(0, 4, size=int(rng.integers(1, 12))).tolist()  # small alphabet: prefixes match
        seqs = {tuple(int(t) for t in rng.integers(0, 4 if k > 1 else n, size=k)) for k in rng.integers(1, 4, size=6)}
        bias = {s: float(rng.choice([-2.5, 0.5, 3.0, -np.inf])) for s in seqs}
        got = S.SequenceBias(bias).apply(x, ctx)
        want = _hf(hf.SequenceBiasLogitsProcessor([[list(s), b] for s, b in bias.items()]), x, ctx)
        np.testing.assert_array_equal(got, want)
        bad = [list(s) for s in seqs]
        eos = int(rng.integers(0, n))
        np.testing.assert_array_equal(S.BadWords(bad, eos_token_ids=[eos]).apply(x, ctx),
                                      _hf(hf.NoBadWordsLogitsProcessor(bad, eos_token_id=eos), x, ctx))
    with pytest.raises(ValueError, match="sequence_bias token id 7 is outside the vocabulary"):
        S.SequenceBias({(7,): 1.0}).apply(np.zeros(4))
    with pytest.raises(ValueError, match="bad_words_ids sequence 1 is empty"):
        S.BadWords([[1], []])


def test_length_and_forcing_processors_match_transformers():
    rng = np.random.default_rng(6)
    x = (rng.standard_normal(50) * 3).astype(np.float32)
    x[7] = -np.inf
    for length in range(1, 12):
        ctx = rng.integers(0, 50, size=length).tolist()
        for n_prompt in (0, 1, 3):
            if n_prompt > length:
                continue
            got = S.ExponentialDecayLengthPenalty(2, 1.3, eos_token_ids=[3, 7, 9]).apply(x, ctx, n_prompt=n_prompt)
            want = _hf(hf.ExponentialDecayLengthPenalty((2, 1.3), [3, 7, 9], n_prompt), x, ctx)
            np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(S.ForcedBOS(4).apply(x, ctx), _hf(hf.ForcedBOSTokenLogitsProcessor(4), x, ctx))
        np.testing.assert_array_equal(S.ForcedEOS(6, [2, 5]).apply(x, ctx),
                                      _hf(hf.ForcedEOSTokenLogitsProcessor(6, [2, 5]), x, ctx))


@pytest.mark.parametrize("h", [0.1, 0.4, 0.8, 0.95])
def test_top_h_matches_transformers(h):
    rng = np.random.default_rng(int(h * 100))
    for n in (3, 100, 5000):
        for scale in (0.3, 2.0, 10.0):
            x = (rng.standard_normal(n) * scale).astype(np.float32)
            np.testing.assert_array_equal(kept(S.TopH(h).apply(x)), kept(_hf(hf.TopHLogitsWarper(h), x)))


@pytest.mark.parametrize("scheme,width", [("lefthash", 1), ("selfhash", 1), ("selfhash", 3)])
def test_watermark_equals_transformers_bit_for_bit(scheme, width):
    rng = np.random.default_rng(width)
    vocab = 1000
    theirs = hf.WatermarkLogitsProcessor(vocab, "cpu", greenlist_ratio=0.3, bias=1.5, seeding_scheme=scheme,
                                         context_width=width)
    ours = S.Watermark(vocab, greenlist_ratio=0.3, bias=1.5, seeding_scheme=scheme, context_width=width)
    for _ in range(5):
        x = (rng.standard_normal(vocab) * 2).astype(np.float32)
        ctx = rng.integers(0, vocab, size=int(rng.integers(width, 8))).tolist()
        np.testing.assert_array_equal(ours.apply(x, ctx), _hf(theirs, x, ctx))
    # The detector's counts equal transformers' WatermarkDetector's.
    from transformers import LlamaConfig
    from transformers.generation import WatermarkDetector as HFDetector

    from decodelab.samplers.watermark import WatermarkDetector

    cfg = LlamaConfig(vocab_size=vocab, bos_token_id=1)
    wcfg = dict(greenlist_ratio=0.3, bias=1.5, seeding_scheme=scheme, context_width=width, hashing_key=15485863)
    for ignore in (False, True):
        ref = HFDetector(cfg, "cpu", wcfg, ignore_repeated_ngrams=ignore)
        det = WatermarkDetector(vocab, 0.3, seeding_scheme=scheme, context_width=width, bos_token_id=1,
                                ignore_repeated_ngrams=ignore)
        ids = [1] + rng.integers(0, 20, size=60).tolist()  # small alphabet: repeated n-grams
        want = ref(torch.tensor([ids]), return_dict=True)
        got = det(ids)
        assert (got.num_tokens_scored, got.num_green_tokens) == (want.num_tokens_scored[0], want.num_green_tokens[0])
        assert got.z_score == pytest.approx(float(want.z_score[0]), abs=1e-9)


def test_watermark_settings_are_checked():
    with pytest.raises(ValueError, match="watermark greenlist_ratio must be in \\(0, 1\\), got 1"):
        S.Watermark(100, greenlist_ratio=1.0)
    with pytest.raises(ValueError, match="seeding_scheme must be 'lefthash' or 'selfhash', got 'x'"):
        S.Watermark(100, seeding_scheme="x")
    with pytest.raises(ValueError, match="watermark vocab_size 100 differs from the model's 4 logits"):
        S.Watermark(100).apply(np.zeros(4), [1])
    from decodelab.samplers.watermark import WatermarkDetector
    with pytest.raises(ValueError, match="need at least 2 tokens to score"):
        WatermarkDetector(100)([5])


# --- classifier-free guidance -------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.reference
@pytest.mark.parametrize("scale,negative", [(2.5, None), (3.0, "The sad dog"), (0.5, "Once")])
def test_guidance_gives_transformers_greedy_tokens(stories, stories_hf, scale, negative):
    from transformers import AutoModelForCausalLM

    hfm = AutoModelForCausalLM.from_pretrained(stories_hf, dtype=torch.float32).eval()
    prompt = stories.tokenizer.encode("Once upon a time, there was a little girl")
    g = stories.generate(prompt, max_new_tokens=30, guidance_scale=scale, negative_prompt=negative, eos_token_id=[])
    kw = {}
    if negative is not None:
        kw["negative_prompt_ids"] = torch.tensor([stories.tokenizer.encode(negative)])
    with torch.no_grad():
        out = hfm.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=30, min_new_tokens=30,
                           guidance_scale=scale, pad_token_id=0, **kw)
    assert g.token_ids == out[0, len(prompt):].tolist()
    assert g.token_ids != stories.generate(prompt, max_new_tokens=30, eos_token_id=[]).token_ids


def test_guidance_stage_is_traced_and_checked(stories):
    g = stories.generate("Once upon a time", max_new_tokens=3, guidance_scale=2.0, negative_prompt="The end",
                         trace=True)
    assert g.trace[0].stages[1].name.startswith("classifier_free_guidance(2")
    # Guidance 1 is the plain run; a stream guides as generate does.
    plain = stories.generate("Once upon a time", max_new_tokens=12)
    assert stories.generate("Once upon a time", max_new_tokens=12, guidance_scale=1.0).token_ids == plain.token_ids
    guided = stories.generate("Once upon a time", max_new_tokens=12, guidance_scale=2.5, negative_prompt="Tom")
    assert "".join(stories.stream("Once upon a time", max_new_tokens=12, guidance_scale=2.5,
                                  negative_prompt="Tom")) == guided.text
    with pytest.raises(ValueError, match="negative_prompt needs guidance_scale != 1"):
        stories.generate("Once", negative_prompt="x")
    with pytest.raises(ValueError, match="guidance_scale guides one sequence: num_beams and n must be 1"):
        stories.generate("Once", guidance_scale=2.0, num_beams=2)
    with pytest.raises(ValueError, match="token id 9999 at index 0 is outside the vocabulary"):
        stories.generate("Once", guidance_scale=2.0, negative_prompt=[9999])
