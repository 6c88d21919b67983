"""The logit lens (nostalgebraist 2020): what each layer would predict next if the model stopped
there, read by passing that layer's residual stream through the final norm and the output head."""
from __future__ import annotations

import dataclasses
from typing import List, Sequence, Union

import numpy as np

from ..samplers import softmax


@dataclasses.dataclass
class LogitLens:
    """Per layer (row 0: the embeddings, row i: after layer i) and position: the most likely next
    token, its probability, and the probability of the token that actually comes next."""

    tokens: List[str]             # the input, one piece per position
    top_ids: np.ndarray           # (n_layers + 1, len) int
    top_tokens: List[List[str]]   # the same as text
    top_probs: np.ndarray         # (n_layers + 1, len)
    next_probs: np.ndarray        # (n_layers + 1, len - 1): probability of the real next token
    final_ids: np.ndarray         # (len,) the model's own prediction (the last layer's, as forward gives)

    def _repr_html_(self) -> str:
        from html import escape

        head = "".join(f"<th>{escape(t)}</th>" for t in self.tokens)
        rows = []
        for layer in range(self.top_ids.shape[0] - 1, -1, -1):
            cells = "".join(
                f'<td style="background:rgba(31,119,180,{p:.2f})" title="p={p:.3f}">{escape(t)}</td>'
                for t, p in zip(self.top_tokens[layer], self.top_probs[layer]))
            rows.append(f"<tr><th>{'embed' if layer == 0 else f'layer {layer}'}</th>{cells}</tr>")
        return (f'<table style="font-family:monospace;font-size:11px"><tr><th></th>{head}</tr>'
                f'{"".join(rows)}</table>')


def _piece(tokenizer, t: int) -> str:
    if tokenizer is None:
        return str(t)
    return tokenizer.decode([int(t)]) or tokenizer.id_to_piece(int(t))


def logit_lens(model, prompt: Union[str, Sequence[int]]) -> LogitLens:
    """The lens over ``prompt`` (text or token ids) on ``model``."""
    ids = model._ids(prompt)
    logits, hidden = model.forward(ids, hidden_states=True)
    tok = model.tokenizer
    tops, probs, nexts = [], [], []
    for h in hidden:
        p = np.stack([softmax(row) for row in model.lens(h)])
        tops.append(p.argmax(-1))
        probs.append(p.max(-1))
        nexts.append(p[np.arange(len(ids) - 1), ids[1:]] if len(ids) > 1 else np.zeros(0))
    top_ids = np.stack(tops)
    return LogitLens(tokens=[_piece(tok, t) for t in ids], top_ids=top_ids,
                     top_tokens=[[_piece(tok, t) for t in row] for row in top_ids], top_probs=np.stack(probs),
                     next_probs=np.stack(nexts), final_ids=logits.argmax(-1))
