"""decodelab.eval.metrics against hand-computed values on tiny inputs, and compare() on stories260K:
greedy decoding has the lowest distinct-2 of greedy, top-p and min-p, and the same seeds give the
same table."""
import doctest
import math

import pytest

from decodelab.eval import metrics


@pytest.mark.slow
def test_the_docstring_examples():
    assert doctest.testmod(metrics, optionflags=doctest.ELLIPSIS).failed == 0


def test_distinct_n_by_hand():
    texts = ["the cat sat on the mat", "the cat ran"]
    # bigrams: the cat, cat sat, sat on, on the, the mat | the cat, cat ran -> 6 distinct of 7
    assert metrics.distinct_n(texts, 2) == 6 / 7
    # unigrams: the cat sat on mat ran -> 6 distinct over 9 tokens (Li et al. 2016)
    assert metrics.distinct_n(texts, 1, mode="li2016") == 6 / 9
    # per text: 5/6 unigrams of the first (the twice), 3/3 of the second
    assert metrics.distinct_n(texts, 1, mode="per_text") == (5 / 6 + 1) / 2
    assert metrics.distinct_n([[1, 2, 1, 2]], 2) == 2 / 3  # token ids: (1,2) (2,1) (1,2)
    assert metrics.distinct_n(["a"], 2) == 0.0  # no bigram at all


def test_repetition_and_lengths_by_hand():
    assert metrics.repetition_rate(["a a a", "a b c"], 2) == (1 - 1 / 2 + 0) / 2
    assert metrics.repetition_rate([[5, 5, 5, 5]], 1) == 0.75
    s = metrics.length_stats(["a", "a b c"])
    assert s == {"mean": 2.0, "median": 2.0, "std": 1.0, "min": 1.0, "max": 3.0}


def test_self_bleu_by_hand():
    pytest.importorskip("nltk", reason="self-BLEU uses nltk")
    same = ["the cat sat on the mat"] * 3
    assert metrics.self_bleu(same) == pytest.approx(1.0)
    apart = ["the cat sat on the mat", "a dog ran in a park"]
    assert metrics.self_bleu(apart) < 0.1
    # one shared bigram: BLEU-2 of "x y z" against "x y w" = sqrt(2/3 * 1/2)
    assert metrics.self_bleu(["x y z", "x y w"], n=2) == pytest.approx(math.sqrt(2 / 3 * 1 / 2))


def test_compare_on_stories(stories):
    strategies = {"greedy": {"temperature": 0}, "top_p": {"temperature": 1.0, "top_p": 0.9},
                  "min_p": {"temperature": 1.0, "min_p": 0.05}}
    prompts = ["Once upon a time", "The little dog"]
    table = metrics.compare(stories, prompts, strategies, n=6, max_new_tokens=48, progress=False)
    assert list(table.index) == ["greedy", "top_p", "min_p"]
    assert table["distinct_2"].idxmin() == "greedy"
    assert table.loc["greedy", "self_bleu"] == pytest.approx(1.0)  # six identical samples per prompt
    assert (table["mean_token_prob"] > 0).all() and (table["tokens_per_second"] > 0).all()
    again = metrics.compare(stories, prompts, strategies, n=6, max_new_tokens=48, progress=False)
    cols = [c for c in table.columns if c != "tokens_per_second"]
    assert table[cols].equals(again[cols])
    fig = metrics.plot_compare(table)
    assert len(fig.axes) == 4


@pytest.mark.parametrize("call,message", [
    (lambda: metrics.distinct_n("abc", 2), "texts must be a list"),
    (lambda: metrics.distinct_n(["a"], 0), "n must be an integer >= 1"),
    (lambda: metrics.distinct_n(["a"], 1, mode="li"), "mode must be one of corpus, li2016, per_text"),
    (lambda: metrics.self_bleu(["a b"]), "at least two texts"),
    (lambda: metrics.length_stats([]), "at least one text"),
    (lambda: metrics.mean_entropy([object()]), "generate"),
])
def test_bad_metric_calls(call, message):
    with pytest.raises(ValueError, match=message):
        call()
