"""Assertions for tests that compare samplers: the same kept set, distributions close in total
variation, and seeded draws that follow a sampler's processed distribution (a chi-square test).
Each raises AssertionError with what differs; inputs are logits (removed tokens NaN or -inf)."""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from .. import samplers as S


def _logits(name: str, x) -> np.ndarray:
    a = np.asarray(x, dtype=np.float32)
    if a.ndim != 1:
        raise ValueError(f"{name} must be a 1-D logits vector, got shape {a.shape}")
    return a


def _kept(a: np.ndarray) -> np.ndarray:
    return ~(np.isnan(a) | np.isneginf(a))


def assert_same_kept_set(actual, expected, *, what: str = "") -> None:
    """The same tokens left in (neither NaN nor -inf) in two logits vectors."""
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
    """0.5 x sum |p - q| of two probability vectors."""
    return 0.5 * float(np.abs(np.asarray(p, dtype=np.float64) - np.asarray(q, dtype=np.float64)).sum())


def assert_distribution_close(actual, expected, max_tv: float = 1e-3, *, what: str = "") -> None:
    """softmax(actual) and softmax(expected) within ``max_tv`` in total variation (the largest
    difference in probability any set of tokens can show)."""
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
    """Draw n tokens with ``sampler`` (a Chain ending in a selector, or processing stages to which
    Dist(0) is added; draw i uses step i of its seeded stream) and test them against the processed
    distribution, softmax of ``expected`` (by default the sampler's own stages before its
    selector) applied to ``logits``: Pearson's chi-square over the tokens expected at least 5
    times, the rest pooled, failing when its p-value is below ``alpha``. Needs scipy."""
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
