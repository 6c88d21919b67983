"""The sampler protocol: ``Sampler`` (``apply``, ``accept``, ``reset``, ``clone``), ``Chain`` (samplers
in order, itself a sampler) with its per-stage ``trace``, and the shared argument checks."""
from __future__ import annotations

import dataclasses
from typing import Iterable, List, Optional, Sequence

import numpy as np

from .. import options
from .._native import _core

__all__ = ["Sampler", "Chain", "StageRecord", "probs", "softmax"]


def softmax(logits) -> np.ndarray:
    """Probabilities of a logits vector under the samplers' conventions (float32)."""
    return _core.softmax(np.asarray(logits, dtype=np.float32))


def probs(logits, digits: int = 3) -> List[float]:
    """Probabilities of a logits vector, rounded: a readable view of a distribution."""
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
    """Base of all samplers: ``apply`` is the one thing a sampler must do."""

    _core: "_core.Sampler"

    @property
    def name(self) -> str:
        return self._core.name

    @property
    def selects(self) -> bool:
        """True when the sampler picks the token itself (Greedy, Dist, Mirostat)."""
        return self._core.selects

    def apply(self, logits, context: Sequence[int] = (), *, n_prompt: int = 0, step: int = 0,
              sequence: int = 0) -> np.ndarray:
        """Processed logits for a 1-D logits vector (a new float32 array; removed tokens at -inf).

        ``context``: the token ids so far; ``context[:n_prompt]`` is the prompt (presence and
        frequency penalties count only what follows it). ``step`` and ``sequence`` key the
        random stream of random samplers."""
        return self._core.apply(_logits(logits), *_where(context, n_prompt, step, sequence))

    def accept(self, token: int) -> None:
        """Tell a stateful sampler which token was chosen (Mirostat updates its target)."""
        self._core.accept(int(token))

    def reset(self) -> None:
        self._core.reset()

    def clone(self) -> "Sampler":
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
    """The distribution after one stage of a chain."""

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
        return Chain([s.clone() for s in self.stages])

    def trace(self, logits, context: Sequence[int] = (), *, n_prompt: int = 0, step: int = 0,
              sequence: int = 0, top: int = 10) -> List[StageRecord]:
        """One record per stage, the input first."""
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
