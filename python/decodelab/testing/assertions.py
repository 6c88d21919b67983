"""Assertions for tests that compare samplers: the same kept set, distributions close in total
variation, and seeded draws that follow a sampler's processed distribution (a chi-square test).
Each raises AssertionError with what differs; inputs are logits (removed tokens NaN or -inf).

Examples:
    >>> from decodelab.testing import assert_same_kept_set
    >>> from decodelab.samplers import MinP, TopK
    >>> x = np.array([3.0, 2.0, 1.0, -1.0])
    >>> assert_same_kept_set(TopK(2).apply(x), MinP(0.3).apply(x))  # both keep tokens 0 and 1
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from .. import samplers as S

__all__ = ["assert_same_kept_set", "total_variation", "assert_distribution_close", "assert_samples_follow"]


def _logits(name: str, x) -> np.ndarray:
    a = np.asarray(x, dtype=np.float32)
    if a.ndim != 1:
        raise ValueError(f"{name} must be a 1-D logits vector, got shape {a.shape}")
    return a


def _kept(a: np.ndarray) -> np.ndarray:
    return ~(np.isnan(a) | np.isneginf(a))


def assert_same_kept_set(actual, expected, *, what: str = "") -> None:
    """Assert that two logits vectors leave the same tokens in (neither NaN nor -inf).

    The values of the kept logits do not matter, only which tokens are kept.

    Args:
        actual: the logits under test, a 1-D array-like.
        expected: the reference logits, a 1-D array-like of the same length.
        what: a prefix for the failure message (e.g. "top_k=5: "); default "".

    Raises:
        ValueError: either input is not 1-D.
        AssertionError: the lengths differ, or the kept sets differ; the message names up to 10
            token ids kept but not expected and up to 10 expected but removed.

    Examples:
        >>> from decodelab.testing import assert_same_kept_set
        >>> assert_same_kept_set([1.0, 2.0, -np.inf], [0.5, 0.7, np.nan])
        >>> assert_same_kept_set([1.0, 2.0, -np.inf], [1.0, -np.inf, -np.inf], what="top_k=1: ")
        Traceback (most recent call last):
        ...
        AssertionError: top_k=1: kept sets differ: 2 kept vs 1 expected; kept but not expected: [1]; ...
    """
    a, e = _logits("actual", actual), _logits("expected", expected)
    if a.shape != e.shape:
        raise AssertionError(f"{what}vocabularies differ: {a.shape[0]} and {e.shape[0]} logits")
    ka, ke = _kept(a), _kept(e)
    if np.array_equal(ka, ke):
        return
    extra, missing = np.flatnonzero(ka & ~ke), np.flatnonzero(ke & ~ka)
    raise AssertionError(f"{what}kept sets differ: {int(ka.sum())} kept vs {int(ke.sum())} expected; "
                         f"kept but not expected: {extra[:10].tolist()}{' ...' if len(extra) > 10 else ''}; "
                         f"expected but removed: {missing[:10].tolist()}{' ...' if len(missing) > 10 else ''}")


def total_variation(p, q) -> float:
    """The total variation distance of two probability vectors: 0.5 x sum |p - q|.

    The largest difference in probability that any set of tokens can show, in [0, 1] for
    probability vectors; computed in float64.

    Args:
        p: a probability vector, array-like.
        q: another, of the same length.

    Returns:
        The distance as a float.

    Examples:
        >>> from decodelab.testing import total_variation
        >>> total_variation([0.5, 0.5, 0.0], [0.75, 0.25, 0.0])
        0.25
        >>> total_variation([1.0, 0.0], [0.0, 1.0])
        1.0
    """
    return 0.5 * float(np.abs(np.asarray(p, dtype=np.float64) - np.asarray(q, dtype=np.float64)).sum())


def assert_distribution_close(actual, expected, max_tv: float = 1e-3, *, what: str = "") -> None:
    """Assert that softmax(actual) and softmax(expected) are within ``max_tv`` in total variation.

    Total variation is the largest difference in probability any set of tokens can show.

    Args:
        actual: the logits under test, a 1-D array-like (removed tokens NaN or -inf).
        expected: the reference logits, a 1-D array-like of the same length.
        max_tv: the largest total variation allowed, in [0, 1]; default 1e-3.
        what: a prefix for the failure message; default "".

    Raises:
        ValueError: either input is not 1-D.
        AssertionError: the lengths differ, or the distance exceeds ``max_tv``; the message gives
            the distance and the five tokens whose probabilities differ most.

    Examples:
        >>> from decodelab.testing import assert_distribution_close
        >>> assert_distribution_close([0.0, 1.0, -np.inf], [0.0, 1.0001, -np.inf])
        >>> assert_distribution_close([0.0, 1.0], [0.0, 1.1])
        Traceback (most recent call last):
        ...
        AssertionError: total variation 0.0192 exceeds 0.001; largest differences (token: actual vs expected) ...
    """
    a, e = _logits("actual", actual), _logits("expected", expected)
    if a.shape != e.shape:
        raise AssertionError(f"{what}vocabularies differ: {a.shape[0]} and {e.shape[0]} logits")
    p, q = S.softmax(a), S.softmax(e)
    tv = total_variation(p, q)
    if tv <= max_tv:
        return
    worst = np.argsort(-np.abs(p - q), kind="stable")[:5]
    rows = ", ".join(f"{int(i)}: {p[i]:.4g} vs {q[i]:.4g}" for i in worst)
    raise AssertionError(f"{what}total variation {tv:.4g} exceeds {max_tv:g}; largest differences "
                         f"(token: actual vs expected) {rows}")


def assert_samples_follow(sampler, logits, n: int = 4000, alpha: float = 1e-3, *, context: Sequence[int] = (),
                          n_prompt: int = 0, expected: Optional["S.Sampler"] = None, what: str = "") -> None:
    """Assert that seeded draws of ``sampler`` follow its processed distribution (a chi-square test).

    Draw n tokens with ``sampler`` (a Chain ending in a selector, or processing stages to which
    Dist(0) is added; draw i uses step i of its seeded stream) and test them against the processed
    distribution, softmax of ``expected`` (by default the sampler's own stages before its
    selector) applied to ``logits``: Pearson's chi-square over the tokens expected at least 5
    times, the rest pooled, failing when its p-value is below ``alpha``. Any draw of a token the
    distribution gives probability 0 fails at once. Needs scipy.

    Args:
        sampler: a Sampler or Chain, with or without a selector at its end.
        logits: the next-token logits, a 1-D array-like.
        n: how many draws, at least 50; default 4000.
        alpha: the significance level, in (0, 1); default 1e-3 (a correct sampler fails one run in
            a thousand seeds, but a fixed seed fails or passes every time).
        context: the token ids so far, for stages that read them (penalties); default ().
        n_prompt: how many leading ids of ``context`` are the prompt; default 0.
        expected: the Sampler whose processed distribution the draws should follow; default None
            (the sampler's own stages before its selector).
        what: a prefix for the failure message; default "".

    Raises:
        ImportError: scipy is not installed.
        ValueError: ``logits`` is not 1-D, or n is below 50.
        AssertionError: a draw chose a token of probability 0, or the chi-square p-value is below
            ``alpha``; the message gives the statistic and the worst bins.

    Examples:
        >>> from decodelab.testing import assert_samples_follow
        >>> from decodelab.samplers import Chain, Dist, Temperature, TopK
        >>> logits = [2.0, 1.0, 0.5, 0.1]
        >>> assert_samples_follow(Chain([Temperature(0.8), TopK(3), Dist(7)]), logits, n=500)
        >>> assert_samples_follow(TopK(2), logits, n=500, expected=TopK(3))
        Traceback (most recent call last):
        ...
        AssertionError: draws do not follow the distribution: chi-square ...
    """
    try:
        from scipy.stats import chisquare
    except ImportError:
        raise ImportError("assert_samples_follow needs scipy (pip install scipy)") from None
    x = _logits("logits", logits)
    chain = sampler if isinstance(sampler, S.Chain) else S.Chain([sampler])
    if not chain.selects:
        chain = S.Chain(chain.stages + [S.Dist(0)])
    if expected is None:
        expected = S.Chain(chain.stages[:-1])
    if n < 50:
        raise ValueError(f"n must be at least 50 draws for a chi-square test, got {n}")
    p = S.softmax(expected.apply(x, context, n_prompt=n_prompt)).astype(np.float64)
    p /= p.sum()
    counts = np.zeros(len(x), dtype=np.int64)
    for step in range(n):
        out = chain.apply(x, context, n_prompt=n_prompt, step=step)
        counts[int(np.argmax(_kept(out)))] += 1
    outside = counts[p == 0].sum()
    if outside:
        bad = np.flatnonzero((p == 0) & (counts > 0))[:10].tolist()
        raise AssertionError(f"{what}{int(outside)} of {n} draws chose tokens the expected distribution "
                             f"gives probability 0: {bad}")
    big = p * n >= 5
    obs = np.append(counts[big], counts[~big].sum())
    exp = np.append(p[big] * n, p[~big].sum() * n)
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    if len(obs) < 2:
        return  # one outcome: nothing to test beyond the support check above
    stat, pval = chisquare(obs, exp)
    if pval < alpha:
        dev = np.argsort(-np.abs(obs - exp) / np.sqrt(exp))[:3]
        rows = ", ".join(f"{int(obs[i])} drawn vs {exp[i]:.1f} expected" for i in dev)
        raise AssertionError(f"{what}draws do not follow the distribution: chi-square {stat:.1f} over {len(obs)} "
                             f"bins, p = {pval:.2e} < alpha = {alpha:g} (worst bins: {rows})")
