"""The logit lens (nostalgebraist 2020): what each layer would predict next if the model stopped
there, read by passing that layer's residual stream through the final norm and the output head.

Examples:
    >>> lens = decodelab.viz.lens.logit_lens(decodelab.load("stories260K"), "Once upon a time")
    >>> lens.top_ids.shape  # the embeddings and 5 layers, by 5 positions (BOS and 4 words)
    (6, 5)
"""
from __future__ import annotations

import dataclasses
from typing import List, Sequence, Union

import numpy as np

from ..samplers import softmax

__all__ = ["LogitLens", "logit_lens"]


@dataclasses.dataclass
class LogitLens:
    """The logit lens over one prompt, as ``logit_lens`` returns it.

    Per layer (row 0: the embeddings, row i: after layer i) and position: the most likely next
    token, its probability, and the probability of the token that actually comes next. In Jupyter
    it shows as an HTML table, the last layer at the top, each cell shaded by its probability;
    ``decodelab.viz.plot.logit_lens`` draws it with matplotlib.

    Attributes:
        tokens: the input, one text piece per position (``len`` of them).
        top_ids: int array of shape (n_layers + 1, len): each layer's most likely next token id.
        top_tokens: the same as text, a list of n_layers + 1 lists of ``len`` strings.
        top_probs: float array of shape (n_layers + 1, len): the probability of that token, in [0, 1].
        next_probs: float array of shape (n_layers + 1, len - 1): the probability each layer gives
            the token that really comes next in the prompt.
        final_ids: int array of shape (len,): the model's own prediction at each position (the last
            layer's, as ``Model.forward`` gives it).

    Examples:
        >>> model = decodelab.load("stories260K")
        >>> lens = decodelab.viz.lens.logit_lens(model, "Once upon a time")
        >>> len(lens.tokens), lens.top_probs.shape, lens.next_probs.shape, lens.final_ids.shape
        (5, (6, 5), (6, 4), (5,))
        >>> bool((lens.top_ids[-1] == lens.final_ids).all())  # the last row is the model's output
        True
        >>> lens._repr_html_().startswith("<table")
        True
    """

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
    """The logit lens over ``prompt`` on ``model``.

    Runs one forward pass that keeps every layer's hidden states, and reads each through the
    model's final norm and output head (``Model.lens``).

    Args:
        model: a loaded decodelab Model.
        prompt: text (encoded with the model's tokenizer, BOS included as ``generate`` does) or a
            sequence of token ids.

    Returns:
        A LogitLens with one row per layer (row 0: the embeddings) and one column per prompt token.

    Examples:
        >>> model = decodelab.load("stories260K")
        >>> lens = decodelab.viz.lens.logit_lens(model, "Once upon a time")
        >>> lens.top_ids.shape, len(lens.top_tokens), len(lens.top_tokens[0])
        ((6, 5), 6, 5)
        >>> decodelab.viz.lens.logit_lens(model, [1, 403, 404]).top_probs.shape  # token ids
        (6, 3)
    """
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
