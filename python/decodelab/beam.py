"""The beam tree: every candidate beam search considered, for JSON and pictures.

``generate(..., num_beams=N, trace=True)`` fills ``Generation.beam_tree``, a :class:`BeamTree` of
:class:`BeamEvent` records.

Examples:
    >>> model = decodelab.load("stories260K")
    >>> g = model.generate("Once upon a time", max_new_tokens=5, num_beams=2, eos_token_id=[], trace=True)
    >>> type(g.beam_tree).__name__, len(g.beam_tree) > 0
    ('BeamTree', True)
"""
from __future__ import annotations

import dataclasses
import json
from typing import List, Optional

__all__ = ["BeamEvent", "BeamTree"]


@dataclasses.dataclass
class BeamEvent:
    """One candidate beam search considered: a token extending a node, and what became of it.

    Attributes:
        step: the generated position of the token, 0 for the first generated token.
        node: this candidate's id.
        parent: the node it extends; -1 is the prompt.
        token: the token id it adds.
        sum_logprobs: accumulated log-probability of the sequence ending here.
        status: "running" (kept as a beam), "finished" (entered the finished set), "rejected"
            (stopped but not good enough) or "pruned" (not kept).

    Examples:
        >>> model = decodelab.load("stories260K")
        >>> g = model.generate("Once upon a time", max_new_tokens=5, num_beams=2, eos_token_id=[], trace=True)
        >>> e = g.beam_tree.events[0]
        >>> e.step, e.parent, e.status in ("running", "finished", "rejected", "pruned"), e.sum_logprobs <= 0
        (0, -1, True, True)
    """
    step: int            # 0 for the first generated token
    node: int            # this candidate's id
    parent: int          # the node it extends; -1 is the prompt
    token: int
    sum_logprobs: float  # accumulated log-probability of the sequence ending here
    status: str          # "running" (kept as a beam), "finished" (entered the finished set),
                         # "rejected" (stopped but not good enough), "pruned" (not kept)


class BeamTree:
    """Expansions, pruning and finished hypotheses of one beam search (``Generation.beam_tree``).

    ``len(tree)`` is the number of events; ``tree.events`` lists them in the order they happened.

    Args:
        events: the engine's event dicts, with the fields of BeamEvent.
        tokenizer: a Tokenizer to add each event's token text in ``to_dict`` and ``to_json``; None
            (the default) leaves the text out.

    Examples:
        >>> model = decodelab.load("stories260K")
        >>> g = model.generate("Once upon a time", max_new_tokens=5, num_beams=2, eos_token_id=[], trace=True)
        >>> tree = g.beam_tree
        >>> len(tree) == len(tree.events), sorted(tree.to_dict()["events"][0])
        (True, ['node', 'parent', 'status', 'step', 'sum_logprobs', 'text', 'token'])
        >>> best = [e for e in tree.events if e.status == "finished"][-1]
        >>> len(tree.path_to(best.node)) <= 5
        True
    """

    def __init__(self, events: List[dict], tokenizer=None):
        self.events = [BeamEvent(**e) for e in events]
        self._tokenizer = tokenizer

    def __len__(self) -> int:
        return len(self.events)

    def to_dict(self) -> dict:
        """The tree as plain data, for JSON.

        Returns:
            ``{"events": [...]}``: one dict per event with the BeamEvent fields, and ``text`` (the
            token's text) when the tree has a tokenizer.
        """
        out = {"events": [dataclasses.asdict(e) for e in self.events]}
        if self._tokenizer is not None:
            for e in out["events"]:
                e["text"] = self._tokenizer.decode([e["token"]])
        return out

    def to_json(self, path: Optional[str] = None, **kw) -> str:
        """The tree as JSON text (``to_dict()``), also written to a file when asked.

        Args:
            path: a file to write the JSON to (UTF-8, replaced if it exists); None (the default)
                writes nothing.
            **kw: keyword arguments for ``json.dumps`` (say ``indent=2``); none by default.

        Returns:
            The JSON text.

        Examples:
            >>> model = decodelab.load("stories260K")
            >>> g = model.generate("Once upon a time", max_new_tokens=3, num_beams=2, trace=True)
            >>> text = g.beam_tree.to_json("beams.json", indent=1)
            >>> with open("beams.json", encoding="utf-8") as f:
            ...     f.read() == text
            True
        """
        s = json.dumps(self.to_dict(), **kw)
        if path is not None:
            with open(path, "w", encoding="utf-8") as f:
                f.write(s)
        return s

    def path_to(self, node: int) -> List[int]:
        """Token ids from the prompt to ``node``.

        Args:
            node: a node id from ``events`` (``BeamEvent.node``); -1 (the prompt) gives [].

        Returns:
            The token ids of the sequence ending at ``node``, first generated token first.

        Raises:
            KeyError: ``node`` is not in the tree.
        """
        by_id = {e.node: e for e in self.events}
        toks = []
        while node != -1:
            e = by_id[node]
            toks.append(e.token)
            node = e.parent
        return toks[::-1]
