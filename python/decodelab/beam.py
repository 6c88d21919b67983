"""The beam tree: every candidate beam search considered, for JSON and pictures."""
from __future__ import annotations

import dataclasses
import json
from typing import List, Optional


@dataclasses.dataclass
class BeamEvent:
    step: int            # 0 for the first generated token
    node: int            # this candidate's id
    parent: int          # the node it extends; -1 is the prompt
    token: int
    sum_logprobs: float  # accumulated log-probability of the sequence ending here
    status: str          # "running" (kept as a beam), "finished" (entered the finished set),
                         # "rejected" (stopped but not good enough), "pruned" (not kept)


class BeamTree:
    """Expansions, pruning and finished hypotheses of one beam search."""

    def __init__(self, events: List[dict], tokenizer=None):
        self.events = [BeamEvent(**e) for e in events]
        self._tokenizer = tokenizer

    def __len__(self) -> int:
        return len(self.events)

    def to_dict(self) -> dict:
        out = {"events": [dataclasses.asdict(e) for e in self.events]}
        if self._tokenizer is not None:
            for e in out["events"]:
                e["text"] = self._tokenizer.decode([e["token"]])
        return out

    def to_json(self, path: Optional[str] = None, **kw) -> str:
        s = json.dumps(self.to_dict(), **kw)
        if path is not None:
            with open(path, "w", encoding="utf-8") as f:
                f.write(s)
        return s

    def path_to(self, node: int) -> List[int]:
        """Token ids from the prompt to ``node``."""
        by_id = {e.node: e for e in self.events}
        toks = []
        while node != -1:
            e = by_id[node]
            toks.append(e.token)
            node = e.parent
        return toks[::-1]
