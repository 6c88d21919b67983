"""Teacher-forced scores: Model.score equals the sum of log-softmax of transformers' logits at the
continuation's positions, splits text as lm-evaluation-harness does, reports is_greedy, scores
under a sampler chain's processed distribution; perplexity by sliding window equals the direct
computation for a text that fits, and Hugging Face's windowed loop for one that does not."""
import math

import numpy as np
import pytest

import decodelab
from decodelab import samplers, testing
from decodelab.eval.scoring import log_softmax


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    folder = testing.write_checkpoint(str(tmp_path_factory.mktemp("score")), "llama-tiny", seed=2,
                                      byte_tokenizer=True)
    return folder, decodelab.load(folder)


def _direct(model, ids):
    """Each token's log-probability after the ones before it (float64), from one forward pass."""
    lp = log_softmax(model.forward(ids)[:-1])
    return lp[np.arange(len(ids) - 1), ids[1:]]


@pytest.mark.reference
def test_score_equals_transformers(llama):
    from reference import hf_logits, hf_model

    folder, m = llama
    s = m.score("The cat sat", " on the mat")
    ctx = m.tokenizer.encode("The cat sat")
    assert s.token_ids == m.tokenizer.encode("The cat sat on the mat")[len(ctx):] and s.n_prompt_tokens == len(ctx)
    lp = log_softmax(hf_logits(hf_model(folder), ctx + s.token_ids))
    want = [lp[len(ctx) - 1 + i, t] for i, t in enumerate(s.token_ids)]
    np.testing.assert_allclose(s.token_logprobs, want, atol=1e-4, rtol=0)
    assert abs(s.total - sum(want)) < 1e-3
    assert math.isclose(s.perplexity, math.exp(-s.total / len(s.token_ids)))


def test_text_is_split_as_lm_eval_splits_it(llama):
    _, m = llama
    tok = m.tokenizer
    # trailing whitespace moves from the prompt to the continuation
    s = m.score("Question: 2+2? Answer: ", "4")
    ctx = tok.encode("Question: 2+2? Answer:")
    assert s.n_prompt_tokens == len(ctx)
    assert s.token_ids == tok.encode("Question: 2+2? Answer: 4")[len(ctx):]
    # ids are taken as they are
    ids = tok.encode("hello world")
    assert m.score(ids[:3], ids[3:]).token_ids == ids[3:]


def test_is_greedy_and_batches(llama):
    _, m = llama
    prompt = m.tokenizer.encode("Once upon")
    g = m.generate(prompt, max_new_tokens=6, eos_token_id=[])
    s = m.score(prompt, g.token_ids)
    assert s.is_greedy
    np.testing.assert_allclose(s.token_logprobs, _direct(m, prompt + g.token_ids)[len(prompt) - 1:], atol=1e-9)
    other = list(g.token_ids)
    other[2] = (other[2] + 1) % m.config.vocab_size
    assert not m.score(prompt, other).is_greedy
    batch = m.score_batch([(prompt, g.token_ids), (prompt, other)])
    assert [b.total for b in batch] == [s.total, m.score(prompt, other).total]


def test_score_under_a_sampler_chain(llama):
    _, m = llama
    prompt = m.tokenizer.encode("Once upon")
    g = m.generate(prompt, max_new_tokens=5, eos_token_id=[])
    raw = m.forward(prompt + g.token_ids)[len(prompt) - 1:-1]
    hot = m.score(prompt, g.token_ids, sampler=samplers.Chain([samplers.Temperature(2.0), samplers.Dist(0)]))
    want = log_softmax(raw / np.float32(2.0))[np.arange(5), g.token_ids]
    np.testing.assert_allclose(hot.token_logprobs, want, atol=1e-5)
    # greedy tokens survive top-k 1; any other token is removed (-inf)
    assert m.score(prompt, g.token_ids, sampler=samplers.TopK(1)).total == 0.0
    other = list(g.token_ids)
    other[0] = (other[0] + 1) % m.config.vocab_size
    assert m.score(prompt, other, sampler=samplers.TopK(1)).token_logprobs[0] == -math.inf


def test_perplexity_direct_and_by_sliding_window(llama):
    _, m = llama
    ids = np.random.default_rng(4).integers(3, m.config.vocab_size, size=120).tolist()  # the context is 128
    direct = math.exp(-_direct(m, ids).mean())
    assert math.isclose(m.perplexity(ids), direct, rel_tol=1e-9)
    assert math.isclose(m.perplexity(ids, window=120, stride=50), direct, rel_tol=1e-9)
    ids = np.random.default_rng(5).integers(3, m.config.vocab_size, size=300).tolist()  # past the context
    # Hugging Face's loop: windows of 64 every 24 tokens, each scoring the tokens past the last window's end
    nll, n, prev = 0.0, 0, 0
    for begin in range(0, len(ids), 24):
        end = min(begin + 64, len(ids))
        lp = _direct(m, ids[begin:end])
        new = end - max(prev, begin + 1)
        nll -= lp[-new:].sum()
        n += new
        prev = end
        if end == len(ids):
            break
    assert n == len(ids) - 1
    assert math.isclose(m.perplexity(ids, window=64, stride=24), math.exp(nll / n), rel_tol=1e-9)
    assert m.perplexity(ids) > 0  # windows of the whole context, end to end


def test_a_full_window_scores_one_token_past_it(llama):
    """The model reads prompt + continuation but the last token, so a 128-token window scores 129
    tokens (lm-eval's rolling windows are that long): the last one's log-probability comes from the
    logits after the 128th token."""
    m = llama[1]
    ids = [int(t) for t in np.random.default_rng(3).integers(1, m.config.vocab_size, 129)]
    s = m.score(ids[:100], ids[100:])
    assert len(s.token_logprobs) == 29
    z = m.forward(ids[:128])[-1].astype(np.float64)
    want = z[ids[128]] - z.max() - np.log(np.exp(z - z.max()).sum())
    assert s.token_logprobs[-1] == pytest.approx(want, abs=1e-5)


@pytest.mark.parametrize("call,message", [
    (lambda m: m.score("abc", ""), "the continuation is empty"),
    (lambda m: m.score("abc", [1, 2]), "both be text or both be token ids"),
    (lambda m: m.score([], [1]), "at least one token"),
    (lambda m: m.score([1], [99999]), "outside the vocabulary"),
    (lambda m: m.score([1] * 100, [1] * 30), "130 tokens, more than the context window of 128 plus the last"),
    (lambda m: m.score_batch("abc"), "pairs must be a list"),
    (lambda m: m.score_batch([("a",)]), r"pairs\[0\] must be a \(prompt, continuation\) pair"),
    (lambda m: m.score("a", "b", sampler="top_k"), "sampler must be a decodelab.samplers.Sampler"),
    (lambda m: m.perplexity([5]), "at least two tokens"),
    (lambda m: m.perplexity([5, 6, 7], window=1), "window"),
])
def test_bad_scoring_calls(llama, call, message):
    with pytest.raises(ValueError, match=message):
        call(llama[1])
