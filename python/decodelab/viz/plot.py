"""Pictures for notebooks (matplotlib): the top candidates after each sampler stage, a beam tree,
entropy and the chosen token's probability along a generation, the logit lens, and speculative
decoding round by round.

Each function returns a matplotlib Figure: Jupyter shows it; elsewhere save it
(``fig.savefig(path)``) and close it (``plt.close(fig)``). matplotlib is imported when a function
is called, not with this module.

Examples:
    >>> import matplotlib.pyplot as plt
    >>> model = decodelab.load("stories260K")
    >>> g = model.generate("Once upon a time", max_new_tokens=6, trace=True)
    >>> fig = decodelab.viz.plot.generation_curves(g, tokenizer=model.tokenizer)
    >>> type(fig).__name__
    'Figure'
    >>> plt.close(fig)
"""
from __future__ import annotations

from typing import Optional, Sequence

__all__ = ["stages", "beam_tree", "generation_curves", "logit_lens", "speculation"]


def _label(tok, tokenizer):
    if tokenizer is None:
        return str(tok)
    try:
        return repr(tokenizer.decode([tok]))
    except Exception:  # a token that does not decode alone (a byte fragment)
        return str(tok)


def stages(records: Sequence, *, tokenizer=None, top: int = 10, title: Optional[str] = None):
    """Bar charts of the most likely tokens after each stage, side by side.

    One panel per stage record, the input first: the tokens still in the running (probability
    above 0), the most likely at the top, and in each title the stage's name, how many tokens it
    kept and the entropy H (nats) of its distribution.

    Args:
        records: ``Chain.trace(...)`` output (a list of StageRecords), or one ``StepTrace`` from
            ``Generation.trace`` (its ``stages`` are drawn).
        tokenizer: labels the bars with each token's text (as its repr); None labels them with
            token ids; default None.
        top: how many tokens each panel shows at most, at least 1; default 10. The records list
            at most as many as ``Chain.trace(top=...)`` kept.
        title: a title above all panels; default None (none).

    Returns:
        The matplotlib Figure, one axes per record.

    Examples:
        >>> import matplotlib.pyplot as plt
        >>> from decodelab.samplers import Chain, Temperature, TopK
        >>> records = Chain([Temperature(0.7), TopK(3)]).trace(np.array([2.0, 1.0, 0.5, 0.1, -1.0]))
        >>> fig = decodelab.viz.plot.stages(records, top=5, title="temperature, then top-k")
        >>> len(fig.axes)  # the input and two stages
        3
        >>> plt.close(fig)
        >>> model = decodelab.load("stories260K")
        >>> g = model.generate("Once upon a time", max_new_tokens=3, trace=True)
        >>> fig = decodelab.viz.plot.stages(g.trace[0], tokenizer=model.tokenizer)
        >>> len(fig.axes) == len(g.trace[0].stages)
        True
        >>> plt.close(fig)
    """
    import matplotlib.pyplot as plt

    recs = getattr(records, "stages", records)
    n = len(recs)
    fig, axes = plt.subplots(1, n, figsize=(2.8 * n, 0.35 * top + 1.6), sharex=True, squeeze=False)
    for ax, r in zip(axes[0], recs):
        # Only tokens still in the running: removed ones have probability 0 and no bar.
        pairs = [(t, p) for t, p in zip(r.top_ids, r.top_probs) if p > 0][:top]
        ids = [t for t, _ in pairs]
        ps = [p for _, p in pairs]
        ypos = list(range(len(ids)))
        ax.barh(ypos, ps, color="tab:blue")
        ax.set_yticks(ypos)
        ax.set_yticklabels([_label(t, tokenizer) for t in ids], fontsize=8)
        ax.set_ylim(top - 0.5, -0.5)  # the most likely token at the top
        ax.set_title(f"{r.name}\n{r.n_kept} kept, H={r.entropy:.2f}", fontsize=9)
        ax.set_xlim(0, 1)
        ax.set_xlabel("probability", fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def beam_tree(tree, *, tokenizer=None, max_steps: Optional[int] = None, title: Optional[str] = None):
    """Draw a BeamTree: every candidate of a beam search, step by step.

    x is the step, each candidate a point labelled with its token and its sum of log-probabilities,
    joined to its parent; at each step the best candidate is at the top. Kept beams are blue,
    finished hypotheses green, stopped-but-rejected orange, pruned gray.

    Args:
        tree: a BeamTree, ``Generation.beam_tree`` of ``generate(..., num_beams=N, trace=True)``.
        tokenizer: labels the points with each token's text; default None, the tree's own tokenizer
            (the model's); without either, token ids.
        max_steps: draw only the first ``max_steps`` steps, at least 1; default None (all).
        title: the axes title; default None, a title that explains the layout.

    Returns:
        The matplotlib Figure.

    Examples:
        >>> import matplotlib.pyplot as plt
        >>> model = decodelab.load("stories260K")
        >>> g = model.generate("Once upon a time", max_new_tokens=4, num_beams=2, trace=True)
        >>> fig = decodelab.viz.plot.beam_tree(g.beam_tree, max_steps=3)
        >>> type(fig).__name__
        'Figure'
        >>> plt.close(fig)
    """
    import matplotlib.pyplot as plt

    tok = tokenizer if tokenizer is not None else getattr(tree, "_tokenizer", None)
    events = [e for e in tree.events if max_steps is None or e.step < max_steps]
    colors = {"running": "tab:blue", "finished": "tab:green", "rejected": "tab:orange", "pruned": "lightgray"}
    steps = sorted({e.step for e in events})
    pos = {-1: (-1, 0.0)}
    for st in steps:
        col = sorted([e for e in events if e.step == st], key=lambda e: -e.sum_logprobs)
        for i, e in enumerate(col):
            pos[e.node] = (st, -i)
    width = max(6, 1.3 * (len(steps) + 1))
    height = max(3, 0.45 * max(sum(1 for e in events if e.step == s) for s in steps) + 1)
    fig, ax = plt.subplots(figsize=(width, height))
    for e in events:
        x, y = pos[e.node]
        if e.parent in pos:
            px, py = pos[e.parent]
            ax.plot([px, x], [py, y], color=colors[e.status], lw=1.5 if e.status != "pruned" else 0.6, zorder=1)
        ax.scatter([x], [y], color=colors[e.status], s=25, zorder=2)
        label = _label(e.token, tok) if tok is not None else str(e.token)
        ax.annotate(f"{label} ({e.sum_logprobs:.1f})", (x, y), textcoords="offset points", xytext=(4, 3),
                    fontsize=7, color="black" if e.status != "pruned" else "gray")
    ax.scatter([-1], [0], color="black", s=30)
    ax.annotate("prompt", (-1, 0), textcoords="offset points", xytext=(4, 3), fontsize=8)
    ax.set_xlabel("step")
    ax.set_yticks([])
    for name, c in colors.items():
        ax.plot([], [], color=c, label=name)
    ax.legend(loc="lower left", fontsize=7)
    ax.set_title(title or "beam search: candidates per step, best at the top")
    fig.tight_layout()
    return fig


def _visible(text: str) -> str:
    """A token's text with its spaces and line breaks shown ("␣Paris", "↵")."""
    return text.replace(" ", "\u2423").replace("\n", "\u21b5").replace("\t", "\u2192")


def generation_curves(generation, *, tokenizer=None, title: Optional[str] = None):
    """How sure the model was at each step of a generation, in two panels.

    Per step of a Generation made with ``trace=True``: above, the entropy of the model's
    distribution (nats); below, the probability of the token chosen, raw and after the samplers.

    Args:
        generation: a Generation made with ``trace=True``.
        tokenizer: labels the steps with each chosen token's text; default None (step numbers).
        title: the upper panel's title; default None, "how sure the model was at each step".

    Returns:
        The matplotlib Figure, two axes sharing the step axis.

    Raises:
        ValueError: the generation has no trace (made without ``trace=True``).

    Examples:
        >>> import matplotlib.pyplot as plt
        >>> model = decodelab.load("stories260K")
        >>> g = model.generate("Once upon a time", max_new_tokens=6, temperature=0.8, seed=0, trace=True)
        >>> fig = decodelab.viz.plot.generation_curves(g, tokenizer=model.tokenizer)
        >>> len(fig.axes)
        2
        >>> plt.close(fig)
        >>> decodelab.viz.plot.generation_curves(model.generate("Once", max_new_tokens=2))
        Traceback (most recent call last):
        ...
        ValueError: generation_curves needs a Generation made with trace=True
    """
    import math

    import matplotlib.pyplot as plt

    tr = generation.trace
    if not tr:
        raise ValueError("generation_curves needs a Generation made with trace=True")
    steps = [s.step for s in tr]
    fig, (a, b) = plt.subplots(2, 1, figsize=(max(6, 0.25 * len(steps) + 2), 4.5), sharex=True)
    a.plot(steps, [s.stages[0].entropy for s in tr], marker=".", color="tab:purple")
    a.set_ylabel("entropy (nats)")
    b.plot(steps, [math.exp(s.logprob_raw) for s in tr], marker=".", label="raw", color="tab:gray")
    b.plot(steps, [math.exp(s.logprob_processed) for s in tr], marker=".", label="after samplers", color="tab:blue")
    b.set_ylabel("p(chosen token)")
    b.set_ylim(0, 1.05)
    b.set_xlabel("step")
    b.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    if tokenizer is not None:
        b.set_xticks(steps)
        b.set_xticklabels([_label(s.token, tokenizer) for s in tr], rotation=90, fontsize=7)
    a.set_title(title or "how sure the model was at each step")
    fig.tight_layout()
    return fig


def logit_lens(lens, *, title: Optional[str] = None):
    """A LogitLens as a layer x position picture.

    Each cell is the layer's most likely next token at that position (spaces shown as "␣", line
    breaks as "↵"), shaded by its probability; the embeddings are the bottom row.

    Args:
        lens: a LogitLens from ``decodelab.viz.lens.logit_lens``.
        title: the axes title; default None, "logit lens: each layer's guess for the next token".

    Returns:
        The matplotlib Figure (the picture and its colour bar).

    Examples:
        >>> import matplotlib.pyplot as plt
        >>> lens = decodelab.viz.lens.logit_lens(decodelab.load("stories260K"), "Once upon a time")
        >>> fig = decodelab.viz.plot.logit_lens(lens)
        >>> len(fig.axes)  # the picture and its colour bar
        2
        >>> plt.close(fig)
    """
    import matplotlib.pyplot as plt

    L, T = lens.top_ids.shape
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * T + 1.5), max(3, 0.34 * L + 1.2)))
    im = ax.imshow(lens.top_probs, aspect="auto", cmap="Blues", vmin=0, vmax=1, origin="lower")
    for layer in range(L):
        for t in range(T):
            p = lens.top_probs[layer, t]
            ax.text(t, layer, _visible(lens.top_tokens[layer][t])[:10], ha="center", va="center", fontsize=7,
                    color="white" if p > 0.6 else "black")
    ax.set_xticks(range(T))
    ax.set_xticklabels([_visible(x)[:12] for x in lens.tokens], rotation=60, ha="right", fontsize=8)
    fig.colorbar(im, ax=ax, fraction=0.02, pad=0.01, label="probability of the layer's top token")
    ax.set_yticks(range(L))
    ax.set_yticklabels(["embed"] + [str(i) for i in range(1, L)], fontsize=7)
    ax.set_ylabel("layer")
    ax.set_title(title or "logit lens: each layer's guess for the next token")
    fig.tight_layout()
    return fig


def speculation(generation, *, tokenizer=None, max_rounds: Optional[int] = 24, title: Optional[str] = None):
    """Speculative decoding round by round.

    One row per round: the drafted tokens in green where the model kept them and red where it
    rejected them (later ones grey: never checked), then the model's own token (blue; a bonus after
    a fully kept draft). The title gives the acceptance rate and the tokens per model pass.

    Args:
        generation: a Generation made with a draft: ``generate(..., draft=MODEL)`` or
            ``draft="prompt_lookup"``.
        tokenizer: labels the cells with each token's text; default None (token ids).
        max_rounds: draw only the first ``max_rounds`` rounds; default 24; None or 0 draws all.
        title: the axes title; default None, the acceptance summary.

    Returns:
        The matplotlib Figure.

    Raises:
        ValueError: the generation had no draft (``generation.speculation`` is None).

    Examples:
        >>> import matplotlib.pyplot as plt
        >>> model = decodelab.load("stories260K")
        >>> g = model.generate("Once upon a time", max_new_tokens=12, draft="prompt_lookup")
        >>> fig = decodelab.viz.plot.speculation(g, tokenizer=model.tokenizer, max_rounds=8)
        >>> type(fig).__name__
        'Figure'
        >>> plt.close(fig)
        >>> decodelab.viz.plot.speculation(model.generate("Once", max_new_tokens=2))
        Traceback (most recent call last):
        ...
        ValueError: this generation had no draft: generate(..., draft=MODEL or 'prompt_lookup')
    """
    import matplotlib.pyplot as plt

    spec = generation.speculation
    if spec is None:
        raise ValueError("this generation had no draft: generate(..., draft=MODEL or 'prompt_lookup')")
    rounds = spec.rounds[:max_rounds] if max_rounds else spec.rounds
    width = max((len(r.draft) + 1 for r in rounds), default=1)
    fig, ax = plt.subplots(figsize=(min(1.1 * width + 1.5, 16), 0.32 * len(rounds) + 1.2))
    for y, r in enumerate(rounds):
        cells = [(t, "#7fd17f" if j < r.accepted else "#f08080" if j == r.accepted else "#dddddd")
                 for j, t in enumerate(r.draft)]
        cells.append((r.token, "#87b6e8"))
        for x, (t, colour) in enumerate(cells):
            ax.add_patch(plt.Rectangle((x, y), 0.96, 0.9, color=colour))
            label = _label(t, tokenizer)
            ax.text(x + 0.48, y + 0.45, label[:10], ha="center", va="center", fontsize=7)
    ax.set_xlim(0, width)
    ax.set_ylim(len(rounds), 0)
    ax.set_xlabel("position in the round (drafts, then the model's own token)")
    ax.set_ylabel("round")
    ax.set_xticks([])
    ax.set_title(title or f"speculation: {spec.accepted} of {spec.drafted} drafted tokens kept "
                          f"({spec.acceptance_rate:.0%}), {spec.tokens_per_round:.2f} tokens per pass")
    fig.tight_layout()
    return fig
