"""Warpers: temperature and the truncation samplers (top-k, top-p, min-p, typical-p, epsilon and eta
cutoffs, top-n-sigma, XTC, top-H). Each keeps or rescales tokens by their own probabilities.

Every truncation filter keeps at least the most likely token, except XTC, which removes top choices
on purpose; removed tokens get -inf.

Examples:
    >>> logits = np.log([0.5, 0.2, 0.2, 0.1])
    >>> [sum(p > 0 for p in probs(s.apply(logits))) for s in (TopK(2), TopP(0.6), MinP(0.3))]
    [3, 2, 3]
"""
from __future__ import annotations

from .. import options
from .._native import _core
from .base import Sampler, _float, _int, _keep

__all__ = ["Temperature", "TopK", "TopP", "MinP", "TypicalP", "EpsilonCutoff", "EtaCutoff", "TopNSigma", "XTC", "TopH"]


class Temperature(Sampler):
    """Divide the logits by T: below 1 sharpens, above 1 flattens.

    Source: Ackley et al. 1985; transformers ``TemperatureLogitsWarper``.

    Args:
        t: the temperature T. Range: 0, which keeps only the most likely token (greedy), or a
            finite number >= 1e-6 (smaller ones overflow float32 logits). No-op: T = 1.

    Raises:
        ValueError: if ``t`` is not finite, or neither 0 nor >= 1e-6.

    Examples:
        >>> logits = np.log([0.5, 0.2, 0.2, 0.1])
        >>> probs(Temperature(0.5).apply(logits))
        [0.735, 0.118, 0.118, 0.029]
        >>> probs(Temperature(0).apply(logits))
        [1.0, 0.0, 0.0, 0.0]
    """

    def __init__(self, t: float):
        self.t = _float("temperature", t)
        self._core = _core.sampler_temperature(self.t)


class TopK(Sampler):
    """Keep the k most likely tokens; tokens tied with the k-th are kept too (as transformers).

    Source: Fan et al. 2018; transformers ``TopKLogitsWarper``.

    Args:
        k: how many tokens to keep. Range: k >= 0. No-op: k = 0 or k >= vocabulary size.
        min_tokens_to_keep: raises k to at least that many (transformers), >= 1; default 1.

    Raises:
        ValueError: if ``k`` < 0 or ``min_tokens_to_keep`` < 1.

    Examples:
        >>> logits = np.log([0.5, 0.2, 0.2, 0.1])
        >>> probs(TopK(2).apply(logits))
        [0.556, 0.222, 0.222, 0.0]
    """

    def __init__(self, k: int, min_tokens_to_keep: int = 1):
        self.k = _int("top_k", k)
        self.min_tokens_to_keep = _keep(min_tokens_to_keep)
        self._core = _core.sampler_top_k(self.k, self.min_tokens_to_keep)


class TopP(Sampler):
    """Nucleus sampling: keep the most likely tokens until their mass reaches p, including the
    token that crosses p (transformers' rule; some code drops it). Tokens rank by logit (two
    logits can share one float32 probability); among equal logits the higher id ranks first, as
    in transformers' ascending stable sort.

    Source: Holtzman et al. 2020; transformers ``TopPLogitsWarper``.

    Args:
        p: the probability mass to reach. Range: 0 < p <= 1. No-op: p = 1.
        min_tokens_to_keep: the tokens ranked first that always stay, >= 1; default 1.

    Raises:
        ValueError: if ``p`` is outside (0, 1] or ``min_tokens_to_keep`` < 1.

    Examples:
        >>> logits = np.log([0.5, 0.2, 0.2, 0.1])
        >>> probs(TopP(0.6).apply(logits))
        [0.714, 0.0, 0.286, 0.0]
    """

    def __init__(self, p: float, min_tokens_to_keep: int = 1):
        self.p = _float("top_p", p)
        self.min_tokens_to_keep = _keep(min_tokens_to_keep)
        self._core = _core.sampler_top_p(self.p, self.min_tokens_to_keep)


class MinP(Sampler):
    """Keep tokens whose probability is at least p times the top token's, and the
    ``min_tokens_to_keep`` of highest logit (equal logits: the lower id first, as transformers'
    stable descending sort).

    Source: Nguyen et al. 2024; transformers ``MinPLogitsWarper``.

    Args:
        p: the share of the top token's probability a token needs. Range: 0 <= p <= 1. No-op: p = 0.
        min_tokens_to_keep: the tokens of highest logit that always stay, >= 1; default 1.

    Raises:
        ValueError: if ``p`` is outside [0, 1] or ``min_tokens_to_keep`` < 1.

    Examples:
        >>> logits = np.log([0.5, 0.2, 0.2, 0.1])
        >>> probs(MinP(0.3).apply(logits))
        [0.556, 0.222, 0.222, 0.0]
    """

    def __init__(self, p: float, min_tokens_to_keep: int = 1):
        self.p = _float("min_p", p)
        self.min_tokens_to_keep = _keep(min_tokens_to_keep)
        self._core = _core.sampler_min_p(self.p, self.min_tokens_to_keep)


class TypicalP(Sampler):
    """Locally typical sampling: rank tokens by |-log p - H| and keep the smallest set whose
    mass reaches p; the ``min_tokens_to_keep`` most typical always stay.

    Source: Meister et al. 2022; transformers ``TypicalLogitsWarper``. The entropy, the distances
    and the running mass are float64 here; transformers computes them in float32, which over a
    vocabulary of tens of thousands can keep one token more or less at the edge of the set.

    Args:
        p: the probability mass to reach. Range: 0 < p <= 1. No-op: p = 1.
        min_tokens_to_keep: the most typical tokens that always stay, >= 1; default 1.

    Raises:
        ValueError: if ``p`` is outside (0, 1] or ``min_tokens_to_keep`` < 1.

    Examples:
        >>> logits = np.log([0.5, 0.2, 0.2, 0.1])
        >>> probs(TypicalP(0.5).apply(logits))
        [0.556, 0.222, 0.222, 0.0]
    """

    def __init__(self, p: float, min_tokens_to_keep: int = 1):
        self.p = _float("typical_p", p)
        self.min_tokens_to_keep = _keep(min_tokens_to_keep)
        self._core = _core.sampler_typical_p(self.p, self.min_tokens_to_keep)


class EpsilonCutoff(Sampler):
    """Remove tokens with probability below epsilon, but never one whose logit is at least the
    ``min_tokens_to_keep``-th largest: tokens tied with the top one all stay (transformers).

    Source: Hewitt et al. 2022; transformers ``EpsilonLogitsWarper``.

    Args:
        epsilon: the probability below which a token goes. Range: 0 <= epsilon < 1. No-op: epsilon = 0.
        min_tokens_to_keep: tokens whose logit is at least the ``min_tokens_to_keep``-th largest
            always stay, >= 1; default 1.

    Raises:
        ValueError: if ``epsilon`` is outside [0, 1) or ``min_tokens_to_keep`` < 1.

    Examples:
        >>> logits = np.log([0.5, 0.2, 0.2, 0.1])
        >>> probs(EpsilonCutoff(0.15).apply(logits))
        [0.556, 0.222, 0.222, 0.0]
    """

    def __init__(self, epsilon: float, min_tokens_to_keep: int = 1):
        self.epsilon = _float("epsilon", epsilon)
        self.min_tokens_to_keep = _keep(min_tokens_to_keep)
        self._core = _core.sampler_epsilon_cutoff(self.epsilon, self.min_tokens_to_keep)


class EtaCutoff(Sampler):
    """Remove tokens with probability below min(eta, sqrt(eta) * exp(-entropy)), with
    ``min_tokens_to_keep`` as EpsilonCutoff's.

    Source: Hewitt et al. 2022; transformers ``EtaLogitsWarper``.

    Args:
        eta: the cutoff parameter. Range: 0 <= eta < 1. No-op: eta = 0.
        min_tokens_to_keep: as EpsilonCutoff's, >= 1; default 1.

    Raises:
        ValueError: if ``eta`` is outside [0, 1) or ``min_tokens_to_keep`` < 1.

    Examples:
        >>> logits = np.log([0.5, 0.2, 0.2, 0.1])
        >>> probs(EtaCutoff(0.3).apply(logits))
        [0.556, 0.222, 0.222, 0.0]
    """

    def __init__(self, eta: float, min_tokens_to_keep: int = 1):
        self.eta = _float("eta", eta)
        self.min_tokens_to_keep = _keep(min_tokens_to_keep)
        self._core = _core.sampler_eta_cutoff(self.eta, self.min_tokens_to_keep)


class TopNSigma(Sampler):
    """Keep logits within n standard deviations of the largest (statistics over the candidates).

    Source: Tang et al. 2024, "Top-nσ"; llama.cpp ``top_n_sigma``.

    Args:
        n: how many standard deviations below the largest logit a token may lie. Range: finite
            n >= 0. No-op: n = 0 (it turns the filter off rather than keeping only the top token).

    Raises:
        ValueError: if ``n`` is negative or not finite.

    Examples:
        >>> logits = np.log([0.5, 0.2, 0.2, 0.1])
        >>> probs(TopNSigma(1.0).apply(logits))
        [1.0, 0.0, 0.0, 0.0]
        >>> probs(TopNSigma(2.0).apply(logits))
        [0.556, 0.222, 0.222, 0.0]
    """

    def __init__(self, n: float):
        self.n = _float("top_n_sigma", n)
        self._core = _core.sampler_top_n_sigma(self.n)


class XTC(Sampler):
    """Exclude Top Choices: with the given probability per step, remove every token at or above
    the threshold except the least likely of them (when at least two are).

    Source: llama.cpp ``xtc`` (p-e-w, 2024). Random: the draw is keyed by (seed, sequence, step).

    Args:
        probability: the chance per step that it acts. Range: [0, 1]. No-op: probability = 0.
        threshold: the probability at or above which a token counts as a top choice. Range:
            [0, 1] (above 0.5 it never acts, as two tokens cannot both reach it).
        seed: the random seed, an integer in [0, 2**64); default 0.

    Raises:
        ValueError: if ``probability`` or ``threshold`` is outside [0, 1], or ``seed`` outside
            [0, 2**64).

    Examples:
        >>> logits = np.log([0.5, 0.2, 0.2, 0.1])
        >>> probs(XTC(probability=1.0, threshold=0.15).apply(logits))
        [0.0, 0.667, 0.0, 0.333]
    """

    def __init__(self, probability: float, threshold: float, seed: int = 0):
        self.probability = _float("xtc probability", probability)
        self.threshold = _float("xtc threshold", threshold)
        self._core = _core.sampler_xtc(self.probability, self.threshold, options.checked_seed(seed))


class TopH(Sampler):
    """Top-H: among the 100 highest logits, keep tokens in rank order while the running sum of
    -p log p stays within ``top_h`` times their entropy (the first always stays). Probabilities
    and entropy are those of the 100 candidates' own softmax.

    Source: Potraghloo et al. 2025; transformers ``TopHLogitsWarper``.

    Args:
        top_h: the share of the candidates' entropy the kept tokens may take. Range:
            0 < top_h <= 1. No-op: none; 1 keeps at most the 100 most likely, and may drop the last of them, where the
            running sum reaches the entropy itself and float rounding decides.

    Raises:
        ValueError: if ``top_h`` is outside (0, 1].

    Examples:
        >>> logits = np.log([0.5, 0.2, 0.2, 0.1])
        >>> probs(TopH(0.5).apply(logits))
        [1.0, 0.0, 0.0, 0.0]
        >>> probs(TopH(0.9).apply(logits))
        [0.556, 0.222, 0.222, 0.0]
    """

    def __init__(self, top_h: float):
        self.top_h = _float("top_h", top_h)
        self._core = _core.sampler_top_h(self.top_h)
