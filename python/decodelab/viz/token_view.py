"""A generation's text coloured by each token's probability, with the chosen token's rank and the
top alternatives on hover: plain HTML and CSS (no script, no CDN), shown by Jupyter through
``_repr_html_``, and the same facts as rows for tests and tables."""
from __future__ import annotations

import dataclasses
import math
from html import escape
from typing import List, Tuple


@dataclasses.dataclass
class TokenRow:
    """One generated token: its text, probability and rank (1 = the most likely) under the
    distribution it was drawn from, and the alternatives there, best first."""

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
    """``TokenView(generation, tokenizer)`` for a Generation made with ``trace=True`` (the
    processed distribution, all alternatives the trace kept) or ``logprobs=N`` (the raw or
    processed distribution, as ``logprobs_mode`` said)."""

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
                top = [t for t, _ in lp.top]
                rank = top.index(lp.token) + 1 if lp.token in top else len(top) + 1
                self.rows.append(TokenRow(step=i, token=lp.token, text=piece(lp.token), prob=math.exp(lp.logprob),
                                          rank=rank, alternatives=[(piece(t), math.exp(v)) for t, v in
                                                                   lp.top[:alternatives]]))
        else:
            raise ValueError("TokenView needs a Generation made with trace=True or logprobs=N")

    def html(self) -> str:
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
