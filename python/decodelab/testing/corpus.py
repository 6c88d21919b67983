"""The corpus of real next-token logits shipped with the package (data/smollm2_logits.npz, made by
benchmarks/make_logits_corpus.py): SmolLM2-135M-Instruct on 16 prompts, at each prompt's end and
after 8 greedy tokens. Each row keeps the 4,096 highest logits; the rest read back as -inf.

``PATH`` is the file's path. The pytest plugin serves the rows as the ``decodelab_logits_corpus``
fixture.

Examples:
    >>> from decodelab.testing import logits_corpus
    >>> rows = logits_corpus()
    >>> len(rows), rows[0].logits.shape, int(np.isfinite(rows[0].logits).sum())
    (32, (49152,), 4096)
"""
from __future__ import annotations

import dataclasses
import functools
import os
from typing import List

import numpy as np

__all__ = ["LogitsRow", "logits_corpus", "PATH"]

PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "smollm2_logits.npz")


@dataclasses.dataclass(frozen=True)
class LogitsRow:
    """One recorded position: its logits over the whole vocabulary and the ids before it.

    Frozen; the logits array is read-only.

    Attributes:
        label: the prompt and where in it, e.g. "'The capital of France is' (prompt end)".
        logits: float32 array of shape (vocab_size,) = (49152,); tokens outside the recorded 4,096
            at -inf.
        context: the token ids the model had seen, prompt first.
        tail_mass: the probability the unrecorded tokens held under the full softmax, in [0, 1].

    Examples:
        >>> from decodelab.testing import logits_corpus
        >>> row = logits_corpus()[0]
        >>> type(row).__name__, row.logits.dtype, row.logits.flags.writeable, 0 <= row.tail_mass < 1
        ('LogitsRow', dtype('float32'), False, True)
        >>> isinstance(row.label, str), all(isinstance(t, int) for t in row.context)
        (True, True)
    """

    label: str            # the prompt and where in it
    logits: np.ndarray    # float32, vocab_size; tokens outside the recorded 4,096 at -inf
    context: List[int]    # the token ids the model had seen
    tail_mass: float      # probability the unrecorded tokens held


@functools.lru_cache(maxsize=1)
def logits_corpus() -> List[LogitsRow]:
    """The rows of the corpus, in the order they were recorded: for each prompt, its end, then after 8 tokens.

    Read once and cached: every call returns the same list.

    Returns:
        A list of 32 LogitsRows.

    Examples:
        >>> from decodelab.testing import logits_corpus
        >>> rows = logits_corpus()
        >>> len(rows), rows is logits_corpus()
        (32, True)
        >>> from decodelab.samplers import TopK
        >>> int(np.isfinite(TopK(40).apply(rows[0].logits, rows[0].context)).sum())
        40
    """
    with np.load(PATH) as z:
        vocab = int(z["vocab_size"])
        ends = np.cumsum(z["context_lengths"])
        starts = ends - z["context_lengths"]
        rows = []
        for i, label in enumerate(z["labels"]):
            x = np.full(vocab, -np.inf, dtype=np.float32)
            x[z["ids"][i].astype(np.int64)] = z["values"][i].astype(np.float32)
            x.setflags(write=False)
            rows.append(LogitsRow(label=str(label), logits=x, context=z["context"][starts[i]:ends[i]].tolist(),
                                  tail_mass=float(z["tail_mass"][i])))
    return rows
