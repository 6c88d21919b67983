"""The sampler protocol: ``Sampler`` (``apply``, ``accept``, ``reset``, ``clone``), ``Chain`` (samplers
in order, itself a sampler) with its per-stage ``trace`` (``StageRecord``), the ``softmax`` and ``probs``
views of a logits vector, and the shared argument checks.

Examples:
    >>> logits = np.log([0.5, 0.2, 0.2, 0.1])
    >>> probs(Chain([TopK(3), Temperature(0.5)]).apply(logits))
    [0.758, 0.121, 0.121, 0.0]
"""
from __future__ import annotations

import dataclasses
from typing import Iterable, List, Optional, Sequence

import numpy as np

from .. import options
from .._native import _core

__all__ = ["Sampler", "Chain", "StageRecord", "probs", "softmax"]


def softmax(logits) -> np.ndarray:
    """Probabilities of a logits vector under the samplers' conventions.

    NaN and ``-inf`` logits get probability 0; ``+inf`` logits share all the probability.

    Args:
        logits: a 1-D array-like of numbers (any float or integer dtype), at least one entry.

    Returns:
        np.ndarray: float32 probabilities, the same length as ``logits``, summing to 1.

    Raises:
        ValueError: if ``logits`` is not 1-D or holds no token.

    Examples:
        >>> p = softmax(np.log([0.5, 0.2, 0.2, 0.1]))
        >>> p.dtype, [round(float(x), 3) for x in p]
        (dtype('float32'), [0.5, 0.2, 0.2, 0.1])
        >>> softmax([0.0, np.nan, -np.inf, 0.0]).tolist()
        [0.5, 0.0, 0.0, 0.5]
    """
    return _core.softmax(np.asarray(logits, dtype=np.float32))


def probs(logits, digits: int = 3) -> List[float]:
    """Probabilities of a logits vector, rounded: a readable view of a distribution.

    Args:
        logits: a 1-D array-like of numbers; conventions as ``softmax``.
        digits: decimal places to round to, as Python's ``round``; default 3.

    Returns:
        list[float]: one rounded probability per token.

    Raises:
        ValueError: if ``logits`` is not 1-D or holds no token.

    Examples:
        >>> logits = np.log([0.5, 0.2, 0.2, 0.1])
        >>> probs(TopK(2).apply(logits))
        [0.556, 0.222, 0.222, 0.0]
        >>> probs(logits, digits=1)
        [0.5, 0.2, 0.2, 0.1]
    """
    return [round(float(p), digits) for p in _core.softmax(np.asarray(logits, dtype=np.float32))]


def _int(name: str, v, lo: Optional[int] = None) -> int:
    return options.integer(name, v, lo, 2**63 - 1)


def _float(name: str, v) -> float:
    return options.real(name, v)


def _keep(v) -> int:
    return _int("min_tokens_to_keep", v)  # its range is checked in the core, with the sampler's name


def _logits(logits) -> np.ndarray:
    a = np.asarray(logits)
    if a.ndim != 1 or not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer)):
        raise ValueError(f"logits must be a 1-D array of numbers, got shape {a.shape} of {a.dtype}")
    return a.astype(np.float32, copy=False)


def _where(context, n_prompt, step, sequence):
    """The checked (context ids, n_prompt, step, sequence) of an apply() or trace() call."""
    if isinstance(context, (str, bytes)) or context is None:
        raise ValueError(f"context must be a list of token ids, got {type(context).__name__}")
    ids = [_int(f"context[{i}]", t, 0) for i, t in enumerate(context)]
    return (ids, options.integer("n_prompt", n_prompt, 0, len(ids)), _int("step", step, 0),
            _int("sequence", sequence, 0))




class Sampler:
    """Base of all samplers: ``apply`` is the one thing a sampler must do.

    Each sampler wraps its C++ twin. ``apply`` returns new logits and leaves its input alone;
    ``accept`` tells a stateful sampler the chosen token, ``reset`` restores its initial state and
    ``clone`` copies it. ``name`` is the core's name of the stage, as traces show it.

    Examples:
        >>> logits = np.log([0.5, 0.2, 0.2, 0.1])
        >>> s = TopK(2)
        >>> isinstance(s, Sampler), s.name, s.selects
        (True, 'top_k(2)', False)
        >>> probs(s.apply(logits)), probs(logits)
        ([0.556, 0.222, 0.222, 0.0], [0.5, 0.2, 0.2, 0.1])
    """

    _core: "_core.Sampler"

    @property
    def name(self) -> str:
        """The stage's name with its settings, as traces show it (``'top_k(2)'``)."""
        return self._core.name

    @property
    def selects(self) -> bool:
        """True when the sampler picks the token itself (Greedy, Dist, Mirostat)."""
        return self._core.selects

    def apply(self, logits, context: Sequence[int] = (), *, n_prompt: int = 0, step: int = 0,
              sequence: int = 0) -> np.ndarray:
        """Processed logits for a 1-D logits vector (a new float32 array; removed tokens at -inf).

        The input array is never changed. NaN logits count as removed and ``+inf`` logits take
        all the probability.

        Args:
            logits: the next-token logits, a 1-D array-like of numbers (float or integer dtype).
            context: the token ids so far (ints >= 0), prompt first; default ``()``, no context.
            n_prompt: how many leading ids of ``context`` are the prompt, in [0, len(context)];
                default 0. Presence and frequency penalties, MinNewTokens and the grammar count
                only what follows it (``context[n_prompt:]``).
            step: the decoding step, >= 0; default 0. Keys the random stream of random samplers
                (Dist, XTC, Mirostat) with ``sequence``.
            sequence: which sequence (sample or beam) this is, >= 0; default 0.

        Returns:
            np.ndarray: the processed logits, float32, the same length as ``logits``.

        Raises:
            ValueError: if ``logits`` is not a 1-D array of numbers, ``context`` is not a list of
                token ids >= 0, ``n_prompt`` is outside [0, len(context)], or ``step`` or
                ``sequence`` is negative.

        Examples:
            >>> logits = np.log([0.5, 0.2, 0.2, 0.1])
            >>> probs(PresencePenalty(1.0).apply(logits, context=[0, 0], n_prompt=1))
            [0.269, 0.292, 0.292, 0.146]
            >>> probs(PresencePenalty(1.0).apply(logits, context=[0, 0], n_prompt=2))
            [0.5, 0.2, 0.2, 0.1]
        """
        return self._core.apply(_logits(logits), *_where(context, n_prompt, step, sequence))

    def accept(self, token: int) -> None:
        """Tell a stateful sampler which token was chosen (Mirostat updates its target).

        A no-op for samplers without state.

        Args:
            token: the chosen token id.
        """
        self._core.accept(int(token))

    def reset(self) -> None:
        """Restore the sampler's initial state (Mirostat's mu); a no-op for samplers without state."""
        self._core.reset()

    def clone(self) -> "Sampler":
        """An independent copy with the same settings and its own state.

        Returns:
            Sampler: a new sampler of the same class; ``accept`` on one leaves the other alone.
        """
        c = object.__new__(type(self))
        c.__dict__.update(self.__dict__)
        c._core = self._core.clone()
        return c

    def __repr__(self) -> str:
        name = self.name
        args = name[name.index("(") + 1:-1] if "(" in name else ""
        return f"{type(self).__name__}({args})"


@dataclasses.dataclass
class StageRecord:
    """The distribution after one stage of a chain, as ``Chain.trace`` records it.

    Attributes:
        name: the stage's name (``Sampler.name``); ``'input'`` for the record of the raw logits.
        logits: the logits after this stage, float32 (removed tokens at -inf).
        probs: their probabilities (``softmax``), float32.
        kept: bool mask of the tokens still in the running (neither -inf nor NaN).
        n_kept: how many tokens are still in the running.
        entropy: the entropy of ``probs``, in nats.
        mass_removed: the probability, under the distribution before this stage, of the tokens
            this stage removed (0 for the input record).
        top_ids: the ids of the ``top`` most likely tokens after this stage, most likely first.
        top_probs: their probabilities, in the same order.

    Examples:
        >>> logits = np.log([0.5, 0.2, 0.2, 0.1])
        >>> r = Chain([TopK(3)]).trace(logits, top=2)[-1]
        >>> r.name, r.n_kept, round(r.mass_removed, 3), r.kept.tolist()
        ('top_k(3)', 3, 0.1, [True, True, True, False])
        >>> r.top_ids, [round(p, 3) for p in r.top_probs]
        ([0, 1], [0.556, 0.222])
    """

    name: str
    logits: np.ndarray
    probs: np.ndarray
    kept: np.ndarray          # bool mask of tokens still in the running
    n_kept: int
    entropy: float            # nats
    mass_removed: float       # probability, before this stage, of the tokens it removed
    top_ids: List[int]
    top_probs: List[float]


class Chain(Sampler):
    """Samplers applied in order; a chain is itself a sampler.

    Each stage receives the previous stage's logits; ``trace`` records the distribution after
    every stage. An empty chain returns its input unchanged.

    Args:
        stages: the samplers, in the order they apply (an iterable of ``Sampler``; may be empty).

    Raises:
        ValueError: if a stage is not a ``Sampler``.

    Examples:
        >>> logits = np.log([0.5, 0.2, 0.2, 0.1])
        >>> chain = Chain([TopK(3), TopP(0.7)])
        >>> probs(chain.apply(logits))
        [0.714, 0.0, 0.286, 0.0]
        >>> [(r.name, r.n_kept) for r in chain.trace(logits)]
        [('input', 4), ('top_k(3)', 3), ('top_p(0.7)', 2)]
    """

    def __init__(self, stages: Iterable[Sampler]):
        self.stages = list(stages)
        for s in self.stages:
            if not isinstance(s, Sampler):
                raise ValueError(f"Chain stages must be samplers, got {s!r}")
        self._core = _core.Chain([s._core for s in self.stages])

    def clone(self) -> "Chain":
        """A new chain of clones of these stages (each with its own state).

        Returns:
            Chain: the copy.
        """
        return Chain([s.clone() for s in self.stages])

    def trace(self, logits, context: Sequence[int] = (), *, n_prompt: int = 0, step: int = 0,
              sequence: int = 0, top: int = 10) -> List[StageRecord]:
        """The distribution after every stage: one record per stage, the input first.

        Args:
            logits: the next-token logits, a 1-D array-like of numbers.
            context: the token ids so far, prompt first; as ``Sampler.apply``; default ``()``.
            n_prompt: how many leading ids of ``context`` are the prompt, in [0, len(context)];
                default 0.
            step: the decoding step, >= 0, keying random stages; default 0.
            sequence: which sequence (sample or beam), >= 0; default 0.
            top: how many most likely tokens each record lists (``top_ids``, ``top_probs``),
                >= 0; default 10.

        Returns:
            list[StageRecord]: ``len(stages) + 1`` records, the first named ``'input'``.

        Raises:
            ValueError: on bad input as ``Sampler.apply``, or if ``top`` is negative.

        Examples:
            >>> logits = np.log([0.5, 0.2, 0.2, 0.1])
            >>> for r in Chain([TopK(3), Temperature(0.5)]).trace(logits):
            ...     print(r.name, r.n_kept, round(r.entropy, 3), [round(float(p), 3) for p in r.probs])
            input 4 1.221 [0.5, 0.2, 0.2, 0.1]
            top_k(3) 3 0.995 [0.556, 0.222, 0.222, 0.0]
            temperature(0.5) 3 0.722 [0.758, 0.121, 0.121, 0.0]
        """
        top = options.integer("top", top, 0)
        pairs = self._core.trace(_logits(logits), *_where(context, n_prompt, step, sequence))
        out = []
        before = pairs[0][1]
        for name, lg in pairs:
            st = _core.stage_stats(before, lg, top)
            p = _core.softmax(lg)
            out.append(StageRecord(name=name, logits=lg, probs=p, kept=~(np.isnan(lg) | np.isneginf(lg)),
                                   n_kept=st["n_kept"], entropy=st["entropy"], mass_removed=st["mass_removed"],
                                   top_ids=list(st["top_ids"]), top_probs=list(st["top_probs"])))
            before = lg
        return out

    def __repr__(self) -> str:
        return "Chain([" + ", ".join(repr(s) for s in self.stages) + "])"
