"""The corpus of real next-token logits shipped with the package (data/smollm2_logits.npz, made by
benchmarks/make_logits_corpus.py): SmolLM2-135M-Instruct on 16 prompts, at each prompt's end and
after 8 greedy tokens. Each row keeps the 4,096 highest logits; the rest read back as -inf."""
from __future__ import annotations

import dataclasses
import functools
import os
from typing import List

import numpy as np

PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "smollm2_logits.npz")


@dataclasses.dataclass(frozen=True)
class LogitsRow:
    """One recorded position: its logits over the whole vocabulary and the ids before it."""

    label: str            # the prompt and where in it
    logits: np.ndarray    # float32, vocab_size; tokens outside the recorded 4,096 at -inf
    context: List[int]    # the token ids the model had seen
    tail_mass: float      # probability the unrecorded tokens held


@functools.lru_cache(maxsize=1)
def logits_corpus() -> List[LogitsRow]:
    """The rows of the corpus, in the order they were recorded."""
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
