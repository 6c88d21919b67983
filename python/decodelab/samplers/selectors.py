"""Selectors: the last stage of a chain, which picks the token (Greedy, Dist, Mirostat)."""
from __future__ import annotations

import numpy as np

from .. import options
from .._native import _core
from .base import Sampler, _float

__all__ = ["Greedy", "Dist", "Mirostat"]


class Mirostat(Sampler):
    """Mirostat 2.0: keep tokens whose surprise -log2 p is at most mu, draw one, then move mu by
    eta x (observed surprise - tau). mu starts at 2 tau; ``reset`` restores it. Picks the token.

    Range: tau > 0, 0 < eta <= 1. Source: Basu et al. 2021; llama.cpp ``mirostat_v2``.

    >>> logits = np.log([0.5, 0.2, 0.2, 0.1])
    >>> m = Mirostat(tau=1.0, eta=0.1, seed=0)
    >>> sum(p > 0 for p in probs(m.apply(logits)))
    1
    """

    def __init__(self, tau: float = 5.0, eta: float = 0.1, seed: int = 0):
        self.tau = _float("mirostat tau", tau)
        self.eta = _float("mirostat eta", eta)
        self._core = _core.sampler_mirostat_v2(self.tau, self.eta, options.checked_seed(seed))


class Greedy(Sampler):
    """Pick the most likely token (ties: the lowest id, as torch.argmax).

    >>> logits = np.log([0.5, 0.2, 0.2, 0.1])
    >>> probs(Greedy().apply(logits))
    [1.0, 0.0, 0.0, 0.0]
    """

    def __init__(self):
        self._core = _core.sampler_greedy()


class Dist(Sampler):
    """Draw a token from the distribution. The draw uses a counter-based generator keyed by
    (seed, sequence, step), so a result never depends on batch order or thread count.

    Range: 0 <= seed < 2**64. Source: llama.cpp ``dist``.

    >>> logits = np.log([0.5, 0.2, 0.2, 0.1])
    >>> draws = [int(np.argmax(Dist(seed=7).apply(logits, step=s))) for s in range(2000)]
    >>> (np.bincount(draws) / 2000).round(1).tolist()
    [0.5, 0.2, 0.2, 0.1]
    >>> draws[:8] == [int(np.argmax(Dist(seed=7).apply(logits, step=s))) for s in range(8)]
    True
    """

    def __init__(self, seed: int = 0):
        self.seed = options.checked_seed(seed)
        self._core = _core.sampler_dist(self.seed)
