"""The pictures that show what a decoder does: hidden states and the logit lens (against
transformers' hidden states), the probability-coloured text, the sampling playground's update
logic (without a browser) and its static fallback, and the new plots."""
import math
import sys

import matplotlib
import numpy as np
import pytest

import decodelab
import decodelab.viz.plot
import decodelab.samplers as S
from decodelab.viz.lens import logit_lens
from decodelab.viz.playground import Playground
from decodelab.viz.token_view import TokenView

matplotlib.use("Agg")
torch = pytest.importorskip("torch")


def test_hidden_states_and_the_lens(stories):
    ids = stories.tokenizer.encode("Once upon a time, there was a little girl")
    logits, hidden = stories.forward(ids, hidden_states=True)
    assert len(hidden) == stories.config.n_layers + 1
    assert all(h.shape == (len(ids), stories.config.hidden_size) for h in hidden)
    np.testing.assert_array_equal(logits, stories.forward(ids))
    # Through the final norm and the head, the last layer's stream gives forward()'s logits.
    np.testing.assert_allclose(stories.lens(hidden[-1]), logits, rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="shape \\(rows >= 1, 64\\)"):
        stories.lens(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="not finite"):
        stories.lens(np.full(64, np.nan))


@pytest.mark.reference
def test_hidden_states_equal_transformers(stories, stories_hf):
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(stories_hf, dtype=torch.float32).eval()
    ids = stories.tokenizer.encode("The little dog ran to the park")
    _, ours = stories.forward(ids, hidden_states=True)
    with torch.no_grad():
        theirs = hf(torch.tensor([ids]), output_hidden_states=True).hidden_states
    # transformers' entries 0..L-1 are the embeddings and layer outputs; its last is after the
    # final norm, where ours is before it (the lens applies the norm).
    for i in range(stories.config.n_layers):
        np.testing.assert_allclose(ours[i], theirs[i][0].numpy(), rtol=0, atol=1e-4)


def test_logit_lens_reads_every_layer(stories):
    lens = logit_lens(stories, "Once upon a time, there was a little")
    L = stories.config.n_layers + 1
    assert lens.top_ids.shape == (L, len(lens.tokens)) and lens.next_probs.shape == (L, len(lens.tokens) - 1)
    np.testing.assert_array_equal(lens.top_ids[-1], lens.final_ids)  # the last layer is the model
    assert np.all((lens.top_probs > 0) & (lens.top_probs <= 1))
    html = lens._repr_html_()
    assert "layer 5" in html and "embed" in html
    fig = decodelab.viz.plot.logit_lens(lens)
    assert fig.axes[0].get_ylabel() == "layer"


def test_token_view_holds_each_token_its_probability_and_alternatives(stories):
    g = stories.generate("Once upon a time", max_new_tokens=8, temperature=0.9, seed=4, trace=True)
    view = TokenView(g, stories.tokenizer)
    assert [r.token for r in view.rows] == g.token_ids
    html = view._repr_html_()
    for r, s in zip(view.rows, g.trace):
        assert r.prob == pytest.approx(math.exp(s.logprob_processed)) and r.rank == s.rank_processed
        assert f"p={r.prob:.3f}" in html and f"rank {r.rank}" in html
        assert r.alternatives and all(0 < p <= 1 for _, p in r.alternatives)
        for t, p in r.alternatives:
            assert f"{p:.3f}" in html
    assert "<script" not in html and "http" not in html  # no script, no CDN
    # From logprobs instead of a trace.
    g2 = stories.generate("Once upon a time", max_new_tokens=5, logprobs=3)
    rows = TokenView(g2, stories.tokenizer).rows
    assert [r.rank for r in rows] == [1] * 5  # greedy: always the top token
    with pytest.raises(ValueError, match="trace=True or logprobs=N"):
        TokenView(stories.generate("Once", max_new_tokens=2), stories.tokenizer)


@pytest.mark.parametrize("settings", [dict(), dict(temperature=0.5, top_k=10), dict(top_p=0.8, min_p=0.05),
                                      dict(temperature=1.5, top_p=0.9, order="llama.cpp"),
                                      dict(temperature=0.7, top_k=20, min_p=0.1, order="vllm")])
def test_playground_update_gives_the_samplers_distribution(stories, settings):
    pg = Playground(stories, "Once upon a time", max_new_tokens=10, seed=3)
    state = pg.update(**settings)
    order = settings.pop("order", "hf")
    chain = S.build_chain(order=order, seed=3, **settings)
    want = S.softmax(S.Chain(chain.stages[:-1]).apply(pg.logits, pg.ids, n_prompt=len(pg.ids)))
    np.testing.assert_array_equal(state.probs, want)
    assert state.n_kept == int((want > 0).sum())
    assert state.continuation == stories.generate("Once upon a time", max_new_tokens=10, seed=3, order=order,
                                                  temperature=settings.get("temperature", 1.0),
                                                  **{k: v for k, v in settings.items() if k != "temperature"}).text
    assert state.top[0][1] == pytest.approx(float(want.max()))


def test_playground_at_temperature_zero_is_greedy(stories):
    # The other sliders keep their values but have no effect: one token is left.
    pg = Playground(stories, "Once upon a time", max_new_tokens=8)
    state = pg.update(temperature=0, top_k=5, top_p=0.5)
    assert state.n_kept == 1 and int(np.argmax(state.probs)) == int(np.argmax(pg.logits))
    assert state.continuation == stories.generate("Once upon a time", max_new_tokens=8).text


def test_playground_sliders_and_static_fallback(stories, monkeypatch):
    pg = Playground(stories, "Once upon a time", max_new_tokens=5)
    box = pg.show()
    assert type(box).__name__ == "VBox"
    slider = box.children[0].children[0]
    slider.value = 0.5  # a slider change redraws through update()
    monkeypatch.setitem(sys.modules, "ipywidgets", None)  # as if ipywidgets were not installed
    fig = pg.show()
    assert isinstance(fig, matplotlib.figure.Figure)


def test_generation_curves(stories):
    g = stories.generate("Once upon a time", max_new_tokens=6, temperature=0.8, seed=1, trace=True)
    fig = decodelab.viz.plot.generation_curves(g, tokenizer=stories.tokenizer)
    assert len(fig.axes) == 2
    with pytest.raises(ValueError, match="trace=True"):
        decodelab.viz.plot.generation_curves(stories.generate("Once", max_new_tokens=2))


def test_speculation_draws_each_round(stories):
    g = stories.generate("Once upon a time, there was a girl. Once upon a time", max_new_tokens=30,
                         draft="prompt_lookup", num_draft_tokens=4)
    fig = decodelab.viz.plot.speculation(g, tokenizer=stories.tokenizer)
    # One cell per drafted token and one for the model's own token, in every round drawn.
    assert len(fig.axes[0].patches) == sum(len(r.draft) + 1 for r in g.speculation.rounds)
    with pytest.raises(ValueError, match="no draft"):
        decodelab.viz.plot.speculation(stories.generate("Once", max_new_tokens=2))
