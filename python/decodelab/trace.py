"""Per-step records of a generation: what each sampler stage did, and the chosen token's rank
and log-probability under the raw and the processed distribution.

``generate(..., trace=True)`` fills ``Generation.trace``, a :class:`Trace` holding one :class:`StepTrace`
per generated token, each with one :class:`StageSummary` per stage ("raw" first, then each sampler stage);
``trace="full"`` also keeps every stage's full logits.

Examples:
    >>> model = decodelab.load("stories260K")
    >>> g = model.generate("Once upon a time", max_new_tokens=4, temperature=0.8, top_k=40, seed=1, trace=True)
    >>> len(g.trace), [st.name for st in g.trace[0].stages]
    (4, ['raw', 'temperature(0.8)', 'top_k(40)', 'dist(seed=1)'])
"""
from __future__ import annotations

import dataclasses
from typing import List, Optional

import numpy as np

__all__ = ["StageSummary", "StepTrace", "Trace"]


@dataclasses.dataclass
class StageSummary:
    """What one sampler stage did to the distribution at one step (the "raw" entry: the model's own).

    Attributes:
        name: the stage, as its repr names it ("raw" for the model's distribution, e.g. "top_k(40)").
        n_kept: tokens with non-zero probability after the stage (1 to the vocabulary size).
        entropy: entropy of the distribution after the stage, in nats.
        mass_removed: probability, before the stage, of the tokens it removed (0 to 1).
        top_ids: the most likely tokens after the stage, best first.
        top_probs: their probabilities after the stage.
        logits: the full logits after the stage, shape (vocab,), with ``trace="full"``; else None.

    Examples:
        >>> model = decodelab.load("stories260K")
        >>> g = model.generate("Once upon a time", max_new_tokens=2, temperature=1.0, top_k=5, trace="full")
        >>> raw, top_k = g.trace[0].stages[:2]
        >>> raw.name, raw.n_kept, raw.mass_removed, top_k.name, top_k.n_kept
        ('raw', 512, 0.0, 'top_k(5)', 5)
        >>> top_k.logits.shape, bool(np.isclose(sum(top_k.top_probs), 1.0, atol=1e-5))
        ((512,), True)
    """

    name: str
    n_kept: int
    entropy: float          # nats
    mass_removed: float     # probability, before the stage, of the tokens it removed
    top_ids: List[int]      # most likely tokens after the stage, best first
    top_probs: List[float]
    logits: Optional[np.ndarray] = None  # full logits after the stage, with trace="full"


@dataclasses.dataclass
class StepTrace:
    """The record of one generated token: its ranks and log-probabilities, and every stage's summary.

    Attributes:
        step: the token's index among the generated tokens (0 first).
        token: the chosen token id.
        rank_raw: its rank under the model's distribution (1 = the model's most likely token).
        logprob_raw: its natural-log probability under the model's distribution.
        rank_processed: its rank under the distribution the final stage drew from.
        logprob_processed: its log-probability under that distribution.
        stages: one StageSummary per stage: "raw" first, then each sampler stage.

    Examples:
        >>> model = decodelab.load("stories260K")
        >>> g = model.generate("Once upon a time", max_new_tokens=3, trace=True)  # greedy
        >>> s = g.trace[0]
        >>> s.step, s.token == g.token_ids[0], s.rank_raw, s.logprob_raw <= 0
        (0, True, 1, True)
    """

    step: int
    token: int
    rank_raw: int               # 1 = the model's most likely token
    logprob_raw: float
    rank_processed: int         # under the distribution the final stage drew from
    logprob_processed: float
    stages: List[StageSummary]  # "raw" first, then each sampler stage


class Trace(list):
    """A list of StepTrace, one per generated token (``Generation.trace``).

    Examples:
        >>> model = decodelab.load("stories260K")
        >>> g = model.generate("Once upon a time", max_new_tokens=5, eos_token_id=[], trace=True)
        >>> isinstance(g.trace, list), len(g.trace), [s.token for s in g.trace] == g.token_ids
        (True, 5, True)
        >>> df = g.trace.to_dataframe()  # needs pandas
        >>> df.shape  # 5 steps x 2 stages ("raw", "greedy")
        (10, 13)
    """

    @classmethod
    def from_core(cls, steps) -> "Trace":
        """Build a Trace from the engine's per-step records.

        Args:
            steps: the C++ engine's list of step dicts (token, rank_raw, logprob_raw, rank_processed,
                logprob_processed, and stages: dicts with name, n_kept, entropy, mass_removed,
                top_ids, top_probs and, with ``trace="full"``, logits).

        Returns:
            A Trace with one StepTrace per entry, numbered from 0.
        """
        out = cls()
        for i, s in enumerate(steps):
            stages = [StageSummary(name=x["name"], n_kept=x["n_kept"], entropy=x["entropy"],
                                   mass_removed=x["mass_removed"], top_ids=list(x["top_ids"]),
                                   top_probs=list(x["top_probs"]), logits=x.get("logits"))
                      for x in s["stages"]]
            out.append(StepTrace(step=i, token=s["token"], rank_raw=s["rank_raw"], logprob_raw=s["logprob_raw"],
                                 rank_processed=s["rank_processed"], logprob_processed=s["logprob_processed"],
                                 stages=stages))
        return out

    def to_dataframe(self):
        """One row per (step, stage). Needs pandas.

        Returns:
            A pandas DataFrame with columns step, stage_index, stage, token, n_kept, entropy,
            mass_removed, top_id, top_prob (the stage's most likely token and its probability),
            rank_raw, logprob_raw, rank_processed and logprob_processed.

        Raises:
            ImportError: pandas is not installed.
        """
        try:
            import pandas as pd
        except ImportError:
            raise ImportError("Trace.to_dataframe needs pandas: pip install pandas") from None
        rows = []
        for s in self:
            for j, st in enumerate(s.stages):
                rows.append({"step": s.step, "stage_index": j, "stage": st.name, "token": s.token,
                             "n_kept": st.n_kept, "entropy": st.entropy, "mass_removed": st.mass_removed,
                             "top_id": st.top_ids[0] if st.top_ids else None,
                             "top_prob": st.top_probs[0] if st.top_probs else None,
                             "rank_raw": s.rank_raw, "logprob_raw": s.logprob_raw,
                             "rank_processed": s.rank_processed, "logprob_processed": s.logprob_processed})
        return pd.DataFrame(rows)
