"""Per-step records of a generation: what each sampler stage did, and the chosen token's rank
and log-probability under the raw and the processed distribution."""
from __future__ import annotations

import dataclasses
from typing import List, Optional

import numpy as np


@dataclasses.dataclass
class StageSummary:
    name: str
    n_kept: int
    entropy: float          # nats
    mass_removed: float     # probability, before the stage, of the tokens it removed
    top_ids: List[int]      # most likely tokens after the stage, best first
    top_probs: List[float]
    logits: Optional[np.ndarray] = None  # full logits after the stage, with trace="full"


@dataclasses.dataclass
class StepTrace:
    step: int
    token: int
    rank_raw: int               # 1 = the model's most likely token
    logprob_raw: float
    rank_processed: int         # under the distribution the final stage drew from
    logprob_processed: float
    stages: List[StageSummary]  # "raw" first, then each sampler stage


class Trace(list):
    """A list of StepTrace, one per generated token."""

    @classmethod
    def from_core(cls, steps) -> "Trace":
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
        """One row per (step, stage). Needs pandas."""
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
