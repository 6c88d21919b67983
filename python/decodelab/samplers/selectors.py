"""Selectors: the last stage of a chain, which picks the token (Greedy, Dist, Mirostat).

A selector's ``apply`` leaves only the picked token (its ``selects`` is True); generate() appends
``Dist(seed)`` to a chain that does not end in one.

Examples:
    >>> logits = np.log([0.5, 0.2, 0.2, 0.1])
    >>> [sum(p > 0 for p in probs(s.apply(logits))) for s in (Greedy(), Dist(seed=7), Mirostat(seed=7))]
    [1, 1, 1]
    >>> Greedy().selects, TopK(2).selects
    (True, False)
"""
from __future__ import annotations

from .. import options
from .._native import _core
from .base import Sampler, _float

__all__ = ["Greedy", "Dist", "Mirostat"]


class Mirostat(Sampler):
    """Mirostat 2.0: keep tokens whose surprise -log2 p is at most mu (the most likely always
    stays), draw one, then move mu by eta x (observed surprise - tau). mu starts at 2 tau and moves
    when ``accept`` is told the chosen token (generate() does this each step); ``reset`` restores
    it. Picks the token; the draw is keyed by (seed, sequence, step) as Dist's.

    Source: Basu et al. 2021; llama.cpp ``mirostat_v2``.

    Args:
        tau: the target surprise in bits. Range: finite tau > 0; default 5.0.
        eta: the learning rate of mu. Range: 0 < eta <= 1; default 0.1.
        seed: the random seed, an integer in [0, 2**64); default 0.

    Raises:
        ValueError: if ``tau`` <= 0 or not finite, ``eta`` is outside (0, 1], or ``seed`` is
            outside [0, 2**64).

    Examples:
        >>> logits = np.log([0.5, 0.2, 0.2, 0.1])
        >>> m = Mirostat(tau=1.0, eta=0.1, seed=0)
        >>> out = m.apply(logits)
        >>> sum(p > 0 for p in probs(out)), m.selects
        (1, True)
        >>> m.accept(int(np.argmax(out)))  # mu moves by eta x (surprise - tau)
        >>> m.reset()                      # mu back at 2 tau
    """

    def __init__(self, tau: float = 5.0, eta: float = 0.1, seed: int = 0):
        self.tau = _float("mirostat tau", tau)
        self.eta = _float("mirostat eta", eta)
        self._core = _core.sampler_mirostat_v2(self.tau, self.eta, options.checked_seed(seed))


class Greedy(Sampler):
    """Pick the most likely token (ties: the lowest id, as torch.argmax).

    Takes no arguments; ``build_chain`` ends a chain in Greedy for ``temperature=0``.

    Examples:
        >>> logits = np.log([0.5, 0.2, 0.2, 0.1])
        >>> probs(Greedy().apply(logits))
        [1.0, 0.0, 0.0, 0.0]
        >>> probs(Greedy().apply(np.log([0.4, 0.4, 0.2])))
        [1.0, 0.0, 0.0]
    """

    def __init__(self):
        self._core = _core.sampler_greedy()


class Dist(Sampler):
    """Draw a token from the distribution. The draw uses a counter-based generator keyed by
    (seed, sequence, step), so a result never depends on batch order or thread count.

    Source: llama.cpp ``dist``.

    Args:
        seed: the random seed. Range: an integer in [0, 2**64); default 0.

    Raises:
        ValueError: if ``seed`` is not an integer in [0, 2**64).

    Examples:
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
