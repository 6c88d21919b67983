"""An interactive sampling playground for notebooks: sliders for temperature, top-k, top-p, min-p
and the sampler order, redrawing the kept next-token distribution and a seeded continuation. The
update logic (``Playground.update``) is plain Python, tested without a browser; ``show()`` wires it
to ipywidgets when they are installed and draws one static picture otherwise.

Examples:
    >>> pg = decodelab.viz.playground.Playground(decodelab.load("stories260K"), "Once upon a time")
    >>> pg.update(top_k=5).n_kept
    5
"""
from __future__ import annotations

import dataclasses
from typing import List, Tuple

import numpy as np

from .. import samplers as S

__all__ = ["Playground", "PlaygroundState"]


@dataclasses.dataclass
class PlaygroundState:
    """What the playground shows for one setting of the sliders, as ``Playground.update`` returns it.

    Attributes:
        settings: the slider values: temperature, top_k, top_p, min_p and order.
        chain: the sampler chain, as generate() would build it, as its repr
            (e.g. ``"Chain([TopK(5), Dist(seed=0)])"``).
        probs: float array of shape (vocab_size,): the next-token distribution after the chain's
            processing stages (the one its selector draws from); removed tokens have probability 0.
        n_kept: how many tokens have a probability above 0 in ``probs``.
        top: the most likely kept tokens, best first, as (text, probability) pairs; at most
            ``Playground.top`` of them.
        continuation: a seeded continuation of the prompt under the same settings.
        raw: the model's most likely tokens before the samplers, best first, as (text, probability
            before, probability after) triples; ``Playground.top`` of them.

    Examples:
        >>> pg = decodelab.viz.playground.Playground(decodelab.load("stories260K"), "Once upon a time")
        >>> state = pg.update(temperature=0.8, top_p=0.9)
        >>> type(state).__name__, state.probs.shape, len(state.raw)
        ('PlaygroundState', (512,), 12)
        >>> sorted(state.settings)
        ['min_p', 'order', 'temperature', 'top_k', 'top_p']
        >>> state.n_kept == int((state.probs > 0).sum()), isinstance(state.continuation, str)
        (True, True)
    """

    settings: dict
    chain: str                      # the sampler chain, as generate() would build it
    probs: np.ndarray               # the processed next-token distribution
    n_kept: int
    top: List[Tuple[str, float]]    # the most likely kept tokens, best first
    continuation: str               # a seeded continuation under the same settings
    raw: List[Tuple[str, float, float]]  # the model's most likely tokens: (text, p before, p after)


class Playground:
    """An interactive sampling playground on one prompt: sampler settings in, the kept distribution out.

    ``Playground(model, prompt)`` runs the prompt once and keeps the next-token logits;
    ``update(temperature=..., top_k=..., top_p=..., min_p=..., order=...)`` returns the
    PlaygroundState for those settings; ``figure(state)`` draws it; ``show()`` displays the
    sliders (ipywidgets) in Jupyter.

    Args:
        model: a loaded decodelab Model.
        prompt: text or a sequence of token ids.
        max_new_tokens: the length of each seeded continuation in tokens, at least 1; default 20.
        seed: the seed of the sampler chain and of each continuation; default 0.
        top: how many tokens the state lists and the figure draws, at least 1; default 12.

    Examples:
        >>> pg = decodelab.viz.playground.Playground(decodelab.load("stories260K"), "Once upon a time",
        ...                                          max_new_tokens=8)
        >>> pg.logits.shape, pg.top
        ((512,), 12)
        >>> state = pg.update(top_k=3)
        >>> state.n_kept, len(state.top), state.chain
        (3, 3, 'Chain([TopK(3), Dist(seed=0)])')
        >>> import matplotlib.pyplot as plt
        >>> fig = pg.figure(state)
        >>> type(fig).__name__
        'Figure'
        >>> plt.close(fig)
    """

    def __init__(self, model, prompt, *, max_new_tokens: int = 20, seed: int = 0, top: int = 12):
        self.model = model
        self.ids = model._ids(prompt)
        self.logits = model.forward(self.ids)[-1]
        self.raw_probs = S.softmax(self.logits)
        self.max_new_tokens, self.seed, self.top = max_new_tokens, seed, top

    def update(self, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0, min_p: float = 0.0,
               order: str = S.DEFAULT_ORDER) -> PlaygroundState:
        """The kept distribution, top tokens and a seeded continuation for one setting of the sliders.

        The arguments mean what they mean to ``generate``; each at its default leaves the
        distribution as the model gives it.

        Args:
            temperature: the softmax temperature, >= 0; 0 is greedy decoding, which leaves only the
                most likely token, so the other sliders then have no effect; default 1.0.
            top_k: keep the ``top_k`` most likely tokens, 0 for all; default 0.
            top_p: keep the smallest set of tokens whose probability reaches ``top_p``, in (0, 1];
                default 1.0 (all).
            min_p: drop tokens below ``min_p`` times the top token's probability, in [0, 1];
                default 0.0 (none).
            order: the order the samplers run in, a name from ``decodelab.samplers.ORDERS``
                ("hf", "vllm" or "llama.cpp"); default ``decodelab.samplers.DEFAULT_ORDER``.

        Returns:
            The PlaygroundState for these settings.

        Raises:
            ValueError: from ``decodelab.samplers.build_chain``: a value out of range, or an unknown
                order.
        """
        settings = dict(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p)
        # Greedy decoding takes no truncation stage (build_chain refuses one given with it).
        warpers = {} if temperature == 0 else dict(top_k=top_k, top_p=top_p, min_p=min_p)
        chain = S.build_chain(order=order, seed=self.seed, temperature=temperature, **warpers)
        # The distribution the selector draws from; greedy decoding leaves its one token.
        stages = chain if temperature == 0 else S.Chain(chain.stages[:-1])
        probs = S.softmax(stages.apply(self.logits, self.ids, n_prompt=len(self.ids)))
        order_ids = np.argsort(-probs, kind="stable")[:self.top]
        tok = self.model.tokenizer
        piece = (lambda t: tok.decode([int(t)])) if tok is not None else str
        top = [(piece(t), float(probs[t])) for t in order_ids if probs[t] > 0]
        raw_ids = np.argsort(-self.raw_probs, kind="stable")[:self.top]
        raw = [(piece(t), float(self.raw_probs[t]), float(probs[t])) for t in raw_ids]
        g = self.model.generate(self.ids, sampler=chain, max_new_tokens=self.max_new_tokens, seed=self.seed)
        return PlaygroundState(settings={**settings, "order": order}, chain=repr(chain), probs=probs,
                               n_kept=int((probs > 0).sum()), top=top, continuation=g.text, raw=raw)

    def figure(self, state: PlaygroundState):
        """A bar chart of a state: the model's most likely next tokens, before and after the samplers.

        Each token's probability before the samplers is drawn in grey and after them in blue; the
        chain and the start of the continuation are in the title.

        Args:
            state: a PlaygroundState from ``update``.

        Returns:
            The matplotlib Figure (close it with ``plt.close(fig)`` when done).
        """
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 0.32 * self.top + 1.6))
        y = np.arange(len(state.raw))
        ax.barh(y - 0.2, [b for _, b, _ in state.raw], height=0.4, color="lightgray", label="model")
        ax.barh(y + 0.2, [a for _, _, a in state.raw], height=0.4, color="tab:blue", label="after the samplers")
        ax.set_yticks(y)
        ax.set_yticklabels([repr(t) for t, _, _ in state.raw], fontsize=8)
        ax.set_ylim(self.top - 0.5, -0.5)
        ax.set_xlim(0, 1)
        kept = f"{state.n_kept} token{'s' if state.n_kept != 1 else ''} kept"
        ax.set_xlabel(f"probability ({kept})")
        ax.legend(loc="lower right", fontsize=8)
        text = state.continuation.replace("\n", " ")
        ax.set_title(f"{state.chain}\n...{text[:70]}", fontsize=8)
        fig.tight_layout()
        return fig

    def show(self):
        """Sliders (ipywidgets) for temperature, top_k, top_p, min_p and order that redraw on change.

        Without ipywidgets, the figure for the default settings (a static fallback: notebooks
        render without widgets too).

        Returns:
            An ``ipywidgets.VBox`` of the sliders and their output, or, without ipywidgets, the
            matplotlib Figure of ``figure(update())``.
        """
        try:
            import ipywidgets as W
        except ImportError:
            return self.figure(self.update())
        import matplotlib.pyplot as plt
        from IPython.display import display

        out = W.Output()
        controls = dict(
            temperature=W.FloatSlider(value=1.0, min=0.05, max=2.0, step=0.05, description="temperature"),
            top_k=W.IntSlider(value=0, min=0, max=100, description="top_k"),
            top_p=W.FloatSlider(value=1.0, min=0.05, max=1.0, step=0.05, description="top_p"),
            min_p=W.FloatSlider(value=0.0, min=0.0, max=0.5, step=0.01, description="min_p"),
            order=W.Dropdown(options=list(S.ORDERS), value=S.DEFAULT_ORDER, description="order"))

        def redraw(_=None):
            with out:
                out.clear_output(wait=True)
                fig = self.figure(self.update(**{k: c.value for k, c in controls.items()}))
                display(fig)
                plt.close(fig)

        for c in controls.values():
            c.observe(redraw, names="value")
        redraw()
        return W.VBox([W.HBox(list(controls.values())[:3]), W.HBox(list(controls.values())[3:]), out])
