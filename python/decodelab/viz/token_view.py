"""A generation's text coloured by each token's probability, with the chosen token's rank and the
top alternatives on hover: plain HTML and CSS (no script, no CDN), shown by Jupyter through
``_repr_html_``, and the same facts as rows for tests and tables.

Examples:
    >>> model = decodelab.load("stories260K")
    >>> view = decodelab.viz.token_view.TokenView(model.generate("Once upon a time", max_new_tokens=6,
    ...                                                           trace=True), model.tokenizer)
    >>> len(view.rows)
    6
"""
from __future__ import annotations

import dataclasses
import math
from html import escape
from typing import List, Tuple

__all__ = ["TokenView", "TokenRow"]


@dataclasses.dataclass
class TokenRow:
    """One generated token in a TokenView.

    Its text, probability and rank (1 = the most likely) under the distribution it was drawn from,
    and the alternatives there, best first.

    Attributes:
        step: the step that generated it, from 0.
        token: its token id.
        text: its text (the tokenizer's decoding of that token alone; the id as text without a
            tokenizer).
        prob: its probability under that distribution, in [0, 1].
        rank: its rank there, 1 for the most likely token.
        alternatives: (text, probability) of the most likely tokens there, best first (the chosen
            token among them when it ranks high enough).

    Examples:
        >>> model = decodelab.load("stories260K")
        >>> g = model.generate("Once upon a time", max_new_tokens=4, trace=True)
        >>> row = decodelab.viz.token_view.TokenView(g, model.tokenizer).rows[0]
        >>> row.step, row.rank, 0 < row.prob <= 1, len(row.alternatives) <= 5
        (0, 1, True, True)
    """

    step: int
    token: int
    text: str
    prob: float
    rank: int
    alternatives: List[Tuple[str, float]]


def _color(p: float) -> str:
    # Low probability red, high green, through a pale yellow: readable on white and on dark themes.
    p = min(max(p, 0.0), 1.0)
    r, g = (255, int(80 + 340 * p)) if p < 0.5 else (int(255 - 300 * (p - 0.5)), 250)
    return f"rgb({min(r, 255)},{min(g, 250)},110)"


class TokenView:
    """A generation's text coloured by each token's probability, for Jupyter.

    ``TokenView(generation, tokenizer)`` for a Generation made with ``trace=True`` (the
    processed distribution, all alternatives the trace kept) or ``logprobs=N`` (the raw or
    processed distribution, as ``logprobs_mode`` said). ``rows`` holds one TokenRow per generated
    token; Jupyter shows ``html()``; ``repr`` writes ``[text|prob]`` per token.

    Args:
        generation: a Generation made with ``trace=True`` or ``logprobs=N``; the trace is used when
            both are there.
        tokenizer: the model's tokenizer, to show each token as text; None shows token ids.
        alternatives: how many alternatives each row keeps, at least 0; default 5. From
            ``logprobs=N`` there are at most N.

    Raises:
        ValueError: the generation has neither a trace nor logprobs.

    Examples:
        >>> model = decodelab.load("stories260K")
        >>> g = model.generate("Once upon a time", max_new_tokens=5, logprobs=3)
        >>> view = decodelab.viz.token_view.TokenView(g, model.tokenizer, alternatives=2)
        >>> len(view.rows), [len(r.alternatives) for r in view.rows]
        (5, [2, 2, 2, 2, 2])
        >>> view.html().count("<span")
        5
        >>> decodelab.viz.token_view.TokenView(model.generate("Once", max_new_tokens=2), model.tokenizer)
        Traceback (most recent call last):
        ...
        ValueError: TokenView needs a Generation made with trace=True or logprobs=N
    """

    def __init__(self, generation, tokenizer, *, alternatives: int = 5):
        self.rows: List[TokenRow] = []
        piece = (lambda t: tokenizer.decode([t])) if tokenizer is not None else str
        if generation.trace:
            for s in generation.trace:
                last = s.stages[-2] if len(s.stages) > 1 else s.stages[-1]  # before the selector
                alts = [(piece(t), p) for t, p in zip(last.top_ids, last.top_probs) if p > 0][:alternatives]
                self.rows.append(TokenRow(step=s.step, token=s.token, text=piece(s.token),
                                          prob=math.exp(s.logprob_processed), rank=s.rank_processed,
                                          alternatives=alts))
        elif generation.logprobs:
            for i, lp in enumerate(generation.logprobs):
                top = [t.token for t in lp.top]
                rank = top.index(lp.token) + 1 if lp.token in top else len(top) + 1
                self.rows.append(TokenRow(step=i, token=lp.token, text=piece(lp.token), prob=math.exp(lp.logprob),
                                          rank=rank, alternatives=[(t.text, math.exp(t.logprob))
                                                                   for t in lp.top[:alternatives]]))
        else:
            raise ValueError("TokenView needs a Generation made with trace=True or logprobs=N")

    def html(self) -> str:
        """The text as HTML: one ``<span>`` per token, its background from red (probability 0)
        through yellow to green (1), and a tooltip with its probability, rank and alternatives.

        Plain HTML and CSS (no script, no CDN), followed by a one-line legend.

        Returns:
            The HTML as a string.
        """
        spans = []
        for r in self.rows:
            alts = "\n".join(f"{t!r}: {p:.3f}" for t, p in r.alternatives)
            tip = escape(f"{r.text!r}  p={r.prob:.3f}  rank {r.rank}\n{alts}", quote=True)
            spans.append(f'<span title="{tip}" style="background:{_color(r.prob)};color:#111;'
                         f'white-space:pre-wrap;border-radius:2px">{escape(r.text)}</span>')
        legend = ('<div style="font-size:11px;color:#666">colour: the probability of each token when '
                  'it was chosen (red low, green high); hover for its rank and the alternatives</div>')
        return f'<div style="font-family:monospace;line-height:1.7">{"".join(spans)}</div>{legend}'

    def _repr_html_(self) -> str:
        return self.html()

    def __repr__(self) -> str:
        return "".join(f"[{r.text}|{r.prob:.2f}]" for r in self.rows)
