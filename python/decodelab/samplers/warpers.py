"""Warpers: temperature and the truncation samplers (top-k, top-p, min-p, typical-p, epsilon and eta
cutoffs, top-n-sigma, XTC, top-H). Each keeps or rescales tokens by their own probabilities."""
from __future__ import annotations

import numpy as np

from .. import options
from .._native import _core
from .base import Sampler, _float, _int, _keep

__all__ = ["Temperature", "TopK", "TopP", "MinP", "TypicalP", "EpsilonCutoff", "EtaCutoff", "TopNSigma", "XTC", "TopH"]


class Temperature(Sampler):
    """Divide the logits by T: below 1 sharpens, above 1 flattens.

    Range: T >= 0; T = 0 keeps only the most likely token (greedy). No-op: T = 1.
    Source: Ackley et al. 1985; transformers ``TemperatureLogitsWarper``.

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

    Range: k >= 0. No-op: k = 0 or k >= vocabulary size. ``min_tokens_to_keep`` raises k to at
    least that many (transformers). Source: Fan et al. 2018; transformers ``TopKLogitsWarper``.

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
    in transformers' ascending stable sort. The ``min_tokens_to_keep`` ranked first always stay.

    Range: 0 < p <= 1. No-op: p = 1.
    Source: Holtzman et al. 2020; transformers ``TopPLogitsWarper``.

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

    Range: 0 <= p <= 1. No-op: p = 0.
    Source: Nguyen et al. 2024; transformers ``MinPLogitsWarper``.

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

    Range: 0 < p <= 1. No-op: p = 1.
    Source: Meister et al. 2022; transformers ``TypicalLogitsWarper``. The entropy, the distances
    and the running mass are float64 here; transformers computes them in float32, which over a
    vocabulary of tens of thousands can keep one token more or less at the edge of the set.

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

    Range: 0 <= epsilon < 1. No-op: epsilon = 0.
    Source: Hewitt et al. 2022; transformers ``EpsilonLogitsWarper``.

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

    Range: 0 <= eta < 1. No-op: eta = 0.
    Source: Hewitt et al. 2022; transformers ``EtaLogitsWarper``.

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

    Range: n >= 0. No-op: n = 0.
    Source: Tang et al. 2024, "Top-nσ"; llama.cpp ``top_n_sigma``.

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

    Range: probability in [0, 1], threshold in [0, 1] (above 0.5 it never acts). No-op:
    probability = 0. Source: llama.cpp ``xtc`` (p-e-w, 2024).

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
    -p log p stays within ``top_h`` times their entropy (the first always stays).

    Range: 0 < top_h <= 1. No-op: none (1 keeps the 100 most likely). Source: Potraghloo et al. 2025; transformers ``TopHLogitsWarper``.

    >>> logits = np.log([0.5, 0.2, 0.2, 0.1])
    >>> probs(TopH(0.5).apply(logits))
    [1.0, 0.0, 0.0, 0.0]
    >>> probs(TopH(0.9).apply(logits))
    [0.556, 0.222, 0.222, 0.0]
    """

    def __init__(self, top_h: float):
        self.top_h = _float("top_h", top_h)
        self._core = _core.sampler_top_h(self.top_h)
