"""Speculative decoding: greedy output equal to plain greedy token for token (draft models and
prompt lookup, k = 1..8, stop strings, streams, EOS inside a draft, rounds ended early by
draft_p_min); sampled output drawn from
the same distribution as plain sampling (chi-square over many seeds, chains with penalties and
truncation); Generation.speculation's counts; options refused with a clear error."""
import numpy as np
import pytest

import decodelab
from decodelab import samplers

scipy_stats = pytest.importorskip("scipy.stats", reason="the chi-square test needs scipy (a test extra)")

TINY16 = dict(arch="llama", hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, vocab_size=16, max_position_embeddings=64, tie_word_embeddings=False)


@pytest.fixture(scope="module")
def drafts(stories_bin, tmp_path_factory):
    """Drafts for stories260K: itself in int8 (a good draft), and random weights with its 512-token
    vocabulary (a bad one, so most drafts are rejected)."""
    cfg, tensors = decodelab.testing.random_weights(dict(TINY16, vocab_size=512, max_position_embeddings=512), seed=3)
    bad = decodelab.testing.write_hf_folder(str(tmp_path_factory.mktemp("bad") / "m"), cfg, tensors)
    return {"int8": decodelab.load(stories_bin, dtype="int8"), "random": decodelab.load(bad),
            "prompt_lookup": "prompt_lookup"}


@pytest.mark.parametrize("which", ["int8", "random", "prompt_lookup"])
@pytest.mark.parametrize("k", [1, 2, 3, 5, 8])
def test_greedy_is_plain_greedy_token_for_token(stories, drafts, which, k):
    prompt = "Once upon a time, there was a little girl named Lily. Lily"
    want = stories.generate(prompt, max_new_tokens=60)
    got = stories.generate(prompt, max_new_tokens=60, draft=drafts[which], num_draft_tokens=k)
    assert got.token_ids == want.token_ids and got.text == want.text and got.finish_reason == want.finish_reason
    s = got.speculation
    assert s.drafted == sum(len(r.draft) for r in s.rounds) and s.accepted == sum(r.accepted for r in s.rounds)
    # Every round adds its accepted drafts and one token of the model's own; the first token is plain.
    assert len(got.token_ids) == 1 + sum(r.accepted + 1 for r in s.rounds)
    assert all(len(r.draft) <= k for r in s.rounds)
    if which == "int8":
        assert s.acceptance_rate > 0.8 and s.tokens_per_round > 1.5
    assert s.acceptance_rate == s.accepted / s.drafted


def _probs(model, ids):
    logits = model.prefill(ids, model.new_cache()).astype(np.float64)
    e = np.exp(logits - logits.max())
    return e / e.sum()


def test_draft_p_min_ends_a_round_before_a_doubtful_token(stories, drafts):
    """With draft_p_min, every drafted token is the draft's greedy choice at probability >= p_min,
    and a round shorter than k ends where the draft's next choice falls below it; the output stays
    plain greedy's, and the random draft, sure of nothing, drafts almost nothing."""
    prompt = "Once upon a time, there was a little girl named Lily. Lily"
    ids = list(stories.tokenizer.encode(prompt))
    want = stories.generate(ids, max_new_tokens=60)
    k, p_min, draft = 6, 0.6, drafts["int8"]
    got = stories.generate(ids, max_new_tokens=60, draft=draft, num_draft_tokens=k, draft_p_min=p_min)
    assert got.token_ids == want.token_ids
    gen, pos, short = want.token_ids, 1, 0
    for r in got.speculation.rounds:
        ctx = ids + gen[:pos]
        for j, d in enumerate(r.draft):
            q = _probs(draft, ctx + r.draft[:j])
            assert d == q.argmax() and q[d] >= p_min, (pos, j, q.max())
        if len(r.draft) < k and len(gen) - pos > k + 1:
            assert _probs(draft, ctx + r.draft).max() < p_min, pos
            short += 1
        pos += r.accepted + 1
    assert short > 0 and pos == len(gen)
    plain = stories.generate(ids, max_new_tokens=60, draft=draft, num_draft_tokens=k).speculation
    assert got.speculation.acceptance_rate >= plain.acceptance_rate
    bad = stories.generate(ids, max_new_tokens=60, draft=drafts["random"], num_draft_tokens=k, draft_p_min=0.5)
    assert bad.token_ids == want.token_ids and bad.speculation.drafted < 5


def test_stop_strings_streams_eos_inside_a_draft_and_logprobs(stories, drafts):
    prompt = "Once upon a time, there was a little girl named Lily."
    plain = stories.generate(prompt, max_new_tokens=50)
    eos = plain.token_ids[17]  # a token the greedy text reaches, inside some round's draft
    for d in drafts.values():
        kw = dict(max_new_tokens=50, draft=d, num_draft_tokens=6)
        for opts in (dict(stop=["."]), dict(eos_token_id=eos), dict(logprobs=3), dict(logprobs=2, stop=[" the"])):
            want = stories.generate(prompt, max_new_tokens=50, **opts)
            got = stories.generate(prompt, **kw, **opts)
            assert got.token_ids == want.token_ids and got.text == want.text, opts
            assert got.finish_reason == want.finish_reason and got.stop_reason == want.stop_reason
            if "logprobs" in opts:  # k + 1 rows in one pass: the same ranking, values to float rounding
                for a, b in zip(got.logprobs, want.logprobs):
                    assert [t.token for t in a.top] == [t.token for t in b.top]
                    np.testing.assert_allclose([t.logprob for t in a.top], [t.logprob for t in b.top], atol=1e-5)
        pieces = list(stories.stream(prompt, **kw, stop=["."]))
        assert "".join(pieces) == stories.generate(prompt, max_new_tokens=50, stop=["."]).text


@pytest.fixture(scope="module")
def tiny16(tmp_path_factory):
    """A target over a 16-token vocabulary (few categories for the chi-square test) and a draft
    that mostly agrees with it: the same weights with noise added to its output head."""
    cfg, tensors = decodelab.testing.random_weights(TINY16, seed=1)
    # Sharper logits than random init gives, so the chains' truncation and penalties matter.
    head = tensors["lm_head.weight"] * 20
    noise = np.random.default_rng(2).standard_normal(head.shape).astype(head.dtype) * float(np.std(head))
    out = []
    for h in (head, head + noise):
        folder = str(tmp_path_factory.mktemp("t16") / "m")
        out.append(decodelab.load(decodelab.testing.write_hf_folder(folder, cfg, dict(tensors, **{"lm_head.weight": h}))))
    return out


def _positions(model, prompt, n_seeds, **kw):
    gens = [model.generate(prompt, max_new_tokens=4, seed=s, eos_token_id=[], **kw) for s in range(n_seeds)]
    toks = np.array([g.token_ids for g in gens])
    return toks[:, 1:], gens  # the first token is chosen as without a draft; the rest through rounds


@pytest.mark.slow
@pytest.mark.parametrize("chain", [dict(temperature=1.3, repetition_penalty=1.5, top_k=10),
                                   dict(temperature=0.8, top_p=0.9, presence_penalty=1.0, min_p=0.02)])
@pytest.mark.parametrize("which", ["model", "model with draft_p_min", "prompt_lookup"])
def test_sampled_tokens_follow_the_plain_distribution(tiny16, chain, which):
    """Tokens 2-4 over 1500 seeds, with and without a draft: a chi-square test per position cannot
    tell the two apart (p > 0.001), with many drafts both accepted and rejected. Accepting
    drafts more often than p / q allows fails it; so would a round length that broke exactness."""
    target, other = tiny16
    prompt = [3, 7, 3, 7, 3, 9, 3, 7, 3]  # repeats, so prompt lookup finds drafts
    draft = "prompt_lookup" if which == "prompt_lookup" else other
    extra = {"draft_p_min": 0.2} if which.endswith("draft_p_min") else {}
    plain, _ = _positions(target, prompt, 1500, **chain)
    spec, gens = _positions(target, prompt, 1500, draft=draft, num_draft_tokens=3, **extra, **chain)
    for pos in range(3):
        table = np.array([np.bincount(plain[:, pos], minlength=16), np.bincount(spec[:, pos], minlength=16)])
        table = table[:, table.sum(0) > 0]
        p = scipy_stats.chi2_contingency(table)[1]
        assert p > 1e-3, (pos, table)
    drafted = sum(g.speculation.drafted for g in gens)
    accepted = sum(g.speculation.accepted for g in gens)
    assert accepted > 50 and drafted - accepted > 50, (drafted, accepted)


def test_speculation_is_none_without_a_draft_and_per_sequence_with_n(stories, drafts):
    assert stories.generate("Once", max_new_tokens=5).speculation is None
    g = stories.generate("Once upon a time", max_new_tokens=20, temperature=0.8, seed=2, n=3, draft=drafts["int8"])
    assert len(g.sequences) == 3 and all(s.speculation is not None for s in g.sequences)
    assert len({id(s.speculation) for s in g.sequences}) == 3
    # Each sample equals the same sample drawn alone with the draft (the seed keys sample i).
    solo = stories.generate("Once upon a time", max_new_tokens=20, temperature=0.8, seed=2, n=3,
                            draft=drafts["int8"])
    assert [s.token_ids for s in g.sequences] == [s.token_ids for s in solo.sequences]


def test_the_caches_return_their_blocks(stories, drafts):
    before = stories.memory_report()["float32"]["blocks_in_use"]
    stories.generate("Once upon a time", max_new_tokens=100, draft=drafts["int8"], num_draft_tokens=8)
    assert stories.memory_report()["float32"]["blocks_in_use"] == before


def test_bad_drafts_and_options_are_refused(stories, drafts, tiny16):
    with pytest.raises(ValueError, match="vocabulary has 16 tokens, this model's 512"):
        stories.generate("Once", draft=tiny16[0])
    with pytest.raises(ValueError, match="beam search does not take a draft"):
        stories.generate("Once", num_beams=2, draft="prompt_lookup")
    with pytest.raises(ValueError, match="num_draft_tokens must be in \\[1, 64\\], got 0"):
        stories.generate("Once", draft="prompt_lookup", num_draft_tokens=0)
    with pytest.raises(ValueError, match="num_draft_tokens needs a draft"):
        stories.generate("Once", num_draft_tokens=3)
    with pytest.raises(ValueError, match="draft must be a decodelab Model or 'prompt_lookup', got 'ngram'"):
        stories.generate("Once", draft="ngram")
    with pytest.raises(ValueError, match="needs a chain ending in Greedy or Dist.*mirostat"):
        stories.generate("Once", sampler=samplers.Chain([samplers.Mirostat(5.0, 0.1, seed=1)]),
                         draft="prompt_lookup")
    with pytest.raises(ValueError, match="draft_p_min needs a draft model .*got draft='prompt_lookup'"):
        stories.generate("Once", draft="prompt_lookup", draft_p_min=0.5)
    with pytest.raises(ValueError, match="draft_p_min needs a draft model"):
        stories.generate("Once", draft_p_min=0.5)
    with pytest.raises(ValueError, match="draft_p_min must be <= 1.0, got 1.5"):
        stories.generate("Once", draft=drafts["int8"], draft_p_min=1.5)
    with pytest.raises(ValueError, match="trace is not recorded with a draft"):
        stories.generate("Once", trace=True, draft=drafts["int8"])
    assert stories.generate("Once", max_new_tokens=0, draft="prompt_lookup").token_ids == []
