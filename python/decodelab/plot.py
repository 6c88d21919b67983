"""Pictures for notebooks (matplotlib): the top candidates after each sampler stage."""
from __future__ import annotations

from typing import Optional, Sequence


def _label(tok, tokenizer):
    if tokenizer is None:
        return str(tok)
    try:
        return repr(tokenizer.decode([tok]))
    except Exception:  # a token that does not decode alone (a byte fragment)
        return str(tok)


def stages(records: Sequence, *, tokenizer=None, top: int = 10, title: Optional[str] = None):
    """Bar charts of the most likely tokens after each stage, side by side.

    ``records``: ``Chain.trace(...)`` output, or one ``StepTrace`` from ``Generation.trace``.
    Returns the matplotlib Figure.
    """
    import matplotlib.pyplot as plt

    recs = getattr(records, "stages", records)
    n = len(recs)
    fig, axes = plt.subplots(1, n, figsize=(2.8 * n, 0.35 * top + 1.6), sharex=True, squeeze=False)
    for ax, r in zip(axes[0], recs):
        ids = list(r.top_ids)[:top]
        ps = list(r.top_probs)[:top]
        kept = [p > 0 for p in ps]
        ax.barh(range(len(ids))[::-1], ps, color=["tab:blue" if k else "lightgray" for k in kept])
        ax.set_yticks(range(len(ids))[::-1])
        ax.set_yticklabels([_label(t, tokenizer) for t in ids], fontsize=8)
        ax.set_title(f"{r.name}\n{r.n_kept} kept, H={r.entropy:.2f}", fontsize=9)
        ax.set_xlim(0, 1)
        ax.set_xlabel("probability", fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig
