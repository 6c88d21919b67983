"""Beam search against transformers, stop strings, streaming, batches, interrupts and timings."""
import _thread
import json
import threading

import numpy as np
import pytest
import torch

import decodelab
import decodelab.model as dmodel
import decodelab.samplers as S
from decodelab.text.tokenizer import HFTokenizer
from reference import hf_model

DOT, BANG = 426, 443  # "." and "!" in the stories260K vocabulary


def hf_beams(ref, ids, *, num_beams, max_new_tokens, length_penalty, early_stopping, num_return_sequences, eos,
             **kw):
    with torch.no_grad():
        out = ref.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                           do_sample=False, num_beams=num_beams, max_new_tokens=max_new_tokens,
                           length_penalty=length_penalty, early_stopping=early_stopping,
                           num_return_sequences=num_return_sequences, eos_token_id=eos, pad_token_id=eos[0],
                           output_scores=True, return_dict_in_generate=True, **kw)
    seqs = []
    for row in out.sequences[:, len(ids):].tolist():
        cut = next((i + 1 for i, t in enumerate(row) if t in eos), len(row))  # after EOS: padding
        seqs.append(row[:cut])
    return seqs, out.sequences_scores.tolist()


GRID = [(nb, lp, es, nrs) for nb in (2, 4) for lp, es in ((1.0, False), (0.0, True), (2.0, "never"), (-0.5, False),
                                                            (1.0, True), (0.5, "never")) for nrs in (1, nb)]


@pytest.mark.slow
@pytest.mark.parametrize("num_beams, length_penalty, early_stopping, nrs", GRID)
def test_beam_search_equals_transformers_on_stories260k(stories, stories_hf, num_beams, length_penalty,
                                                        early_stopping, nrs):
    ref = _cached_hf(stories_hf)
    for prompt in ("Once upon a time", "Tom and Sue"):
        ids = stories.tokenizer.encode(prompt)
        want, want_scores = hf_beams(ref, ids, num_beams=num_beams, max_new_tokens=25, length_penalty=length_penalty,
                                     early_stopping=early_stopping, num_return_sequences=nrs, eos=[DOT, BANG])
        g = stories.generate(ids, num_beams=num_beams, max_new_tokens=25, length_penalty=length_penalty,
                             early_stopping=early_stopping, num_return_sequences=nrs, eos_token_id=[DOT, BANG])
        assert [s.token_ids for s in g.sequences] == want
        np.testing.assert_allclose([s.score for s in g.sequences], want_scores, rtol=1e-4, atol=1e-4)
        assert g.token_ids == want[0] and g.text == g.sequences[0].text


@pytest.mark.parametrize("shape", ["gpt2-tiny", "llama-tiny"])
def test_beam_search_equals_transformers_on_random_checkpoints(checkpoint, shape):
    folder = checkpoint(shape)
    ours, ref = decodelab.load(folder), _cached_hf(folder)
    rng = np.random.default_rng(0)
    for num_beams, lp, es in ((3, 1.0, False), (4, 0.0, "never"), (2, 1.5, True)):
        ids = rng.integers(0, ours.config.vocab_size, size=8).tolist()
        eos = [int(t) for t in rng.integers(0, ours.config.vocab_size, size=2)]
        want, scores = hf_beams(ref, ids, num_beams=num_beams, max_new_tokens=12, length_penalty=lp,
                                early_stopping=es, num_return_sequences=num_beams, eos=eos)
        g = ours.generate(ids, num_beams=num_beams, max_new_tokens=12, length_penalty=lp, early_stopping=es,
                          num_return_sequences=num_beams, eos_token_id=eos)
        assert [s.token_ids for s in g.sequences] == want
        np.testing.assert_allclose([s.score for s in g.sequences], scores, rtol=1e-4, atol=1e-4)


def test_beam_search_with_processors_equals_transformers(stories, stories_hf):
    ref = _cached_hf(stories_hf)
    ids = stories.tokenizer.encode("Once upon a time")
    want, scores = hf_beams(ref, ids, num_beams=3, max_new_tokens=30, length_penalty=1.0, early_stopping=False,
                            num_return_sequences=3, eos=[DOT], repetition_penalty=1.3, no_repeat_ngram_size=3)
    g = stories.generate(ids, num_beams=3, max_new_tokens=30, num_return_sequences=3, eos_token_id=[DOT],
                         repetition_penalty=1.3, no_repeat_ngram_size=3)
    assert [s.token_ids for s in g.sequences] == want
    np.testing.assert_allclose([s.score for s in g.sequences], scores, rtol=1e-4, atol=1e-4)


_HF = {}


def _cached_hf(folder):
    if folder not in _HF:
        _HF[folder] = hf_model(folder)
    return _HF[folder]


def test_beam_tree_records_every_candidate(stories, tmp_path):
    g = stories.generate("Once upon a time", num_beams=3, max_new_tokens=12, num_return_sequences=3,
                         eos_token_id=[DOT], trace=True)
    tree = g.beam_tree
    statuses = {e.status for e in tree.events}
    assert statuses <= {"running", "pruned", "finished", "rejected"} and "running" in statuses
    assert "finished" in statuses
    # Each returned hypothesis is the path to one finished node.
    finished_paths = [tree.path_to(e.node) for e in tree.events if e.status == "finished"]
    for s in g.sequences:
        assert s.token_ids in finished_paths
    # K = (1 + n_eos) x num_beams = 6 candidates per step.
    per_step = {}
    for e in tree.events:
        per_step[e.step] = per_step.get(e.step, 0) + 1
    assert set(per_step.values()) == {6}
    data = json.loads(tree.to_json(str(tmp_path / "tree.json")))
    assert len(data["events"]) == len(tree) and "text" in data["events"][0]
    import matplotlib

    matplotlib.use("Agg")
    import decodelab.viz.plot

    fig = decodelab.viz.plot.beam_tree(tree)
    fig.savefig(tmp_path / "tree.png")
    assert (tmp_path / "tree.png").stat().st_size > 1000


def test_beam_search_memory_shares_the_prompt(checkpoint):
    shape = dict(arch="llama", hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=512, max_position_embeddings=2048, tie_word_embeddings=False)
    m = decodelab.load(checkpoint(shape))
    ids = np.random.default_rng(5).integers(0, 512, size=1000).tolist()
    one = m.new_cache()
    m.prefill(ids + [1] * 20, one)
    single = one.nbytes
    del one
    g = m.generate(ids, num_beams=4, max_new_tokens=20, eos_token_id=[])
    # Four beams over a 1,000-token prompt: the prompt's 63 blocks are shared, not copied 4 times.
    assert g.peak_cache_bytes < 1.3 * single
    assert g.peak_cache_bytes < 0.35 * 4 * single


def test_beam_sampling_is_seeded(checkpoint):
    m = decodelab.load(checkpoint("llama-tiny"))  # a flat distribution: draws differ by seed
    kw = dict(num_beams=3, num_return_sequences=3, temperature=1.0, max_new_tokens=15, eos_token_id=[])
    a = m.generate([1, 2, 3], seed=4, **kw)
    b = m.generate([1, 2, 3], seed=4, **kw)
    c = m.generate([1, 2, 3], seed=5, **kw)
    assert [s.token_ids for s in a.sequences] == [s.token_ids for s in b.sequences] and a.seed == 4
    assert [s.token_ids for s in a.sequences] != [s.token_ids for s in c.sequences]


# --- stop strings and streaming --------------------------------------------------------------------

def test_stop_strings_across_tokens(stories):
    full = stories.generate("Once upon a time", max_new_tokens=40, eos_token_id=[]).text
    assert "girl named Lily" in full
    stop = "rl named Li"  # starts and ends inside tokens
    g = stories.generate("Once upon a time", max_new_tokens=40, stop=[stop, "zzz"], eos_token_id=[])
    assert g.text == full[:full.index(stop)] and g.finish_reason == "stop" and g.stop_reason == stop
    g2 = stories.generate("Once upon a time", max_new_tokens=40, stop=stop, include_stop_str_in_output=True)
    assert g2.text == full[:full.index(stop) + len(stop)]
    pieces = list(stories.stream("Once upon a time", max_new_tokens=40, stop=[stop]))
    assert "".join(pieces) == g.text
    assert all(stop[:3] not in p for p in pieces)
    g3 = stories.generate("Once upon a time", max_new_tokens=10, stop=["never appears"])
    assert g3.finish_reason == "length" and g3.text == stories.generate("Once upon a time", max_new_tokens=10).text


class _ScriptedDecoder:
    """Stands in for the C++ decoder: returns a fixed token sequence, so the text logic of
    streaming is tested on real GPT-2 byte-level tokens that split characters."""

    script = []

    def __init__(self, engine, prompt, chain, cache, options):
        self.tokens = list(self.script)[:options.max_new_tokens]
        self.i = 0

    def step(self):
        if self.i >= len(self.tokens):
            return -1
        self.i += 1
        return self.tokens[self.i - 1]

    def result(self):
        return {"token_ids": self.tokens[:self.i], "finish_reason": "length", "prefill_seconds": 0.0,
                "first_token_seconds": 0.0, "decode_seconds": 0.0, "logprobs": [], "top_ids": [],
                "top_logprobs": [], "trace": []}


@pytest.mark.parametrize("text", ["Hi 😀 and 世界 with 👨‍👩‍👧 done", "日本語のテキスト🎉🎉", "plain ascii"])
def test_stream_holds_back_split_characters(checkpoint, gpt2_tokenizer_dir, monkeypatch, text):
    m = decodelab.load(checkpoint("gpt2-tiny", tokenizer_dir=gpt2_tokenizer_dir))
    tok = m.tokenizer
    script = tok.encode(text)
    assert isinstance(tok, HFTokenizer)
    if text != "plain ascii":
        assert any("\ufffd" in tok.decode(script[:k]) for k in range(1, len(script)))  # splits happen
    monkeypatch.setattr(_ScriptedDecoder, "script", script)
    monkeypatch.setattr(dmodel._core, "Decoder", _ScriptedDecoder)
    pieces = list(m.stream([1, 2, 3], max_new_tokens=len(script), eos_token_id=[]))
    assert "".join(pieces) == text
    assert all("\ufffd" not in p for p in pieces)
    # A stop string that starts mid-character sequence, across several tokens.
    if "世界" in text:
        pieces = list(m.stream([1, 2, 3], max_new_tokens=len(script), stop=["界 with"], eos_token_id=[]))
        assert "".join(pieces) == text[:text.index("界 with")]
        assert not any("界" in p for p in pieces)


def test_stream_equals_generate_on_a_real_model(checkpoint, gpt2_tokenizer_dir):
    m = decodelab.load(checkpoint("gpt2-tiny", tokenizer_dir=gpt2_tokenizer_dir))
    for seed in range(3):
        opts = dict(max_new_tokens=60, temperature=1.0, seed=seed, eos_token_id=[])
        pieces = list(m.stream("Hello 世界", **opts))
        assert "".join(pieces) == m.generate("Hello 世界", **opts).text


def test_stream_interrupted_by_the_consumer_leaves_the_model_usable(stories):
    fresh = stories.generate("Once upon a time", max_new_tokens=30).text
    got = []
    with pytest.raises(KeyboardInterrupt):
        for piece in stories.stream("Once upon a time", max_new_tokens=30):
            got.append(piece)
            if len(got) == 3:
                raise KeyboardInterrupt
    assert "".join(got) == fresh[:len("".join(got))]
    assert stories.generate("Once upon a time", max_new_tokens=30).text == fresh
    assert "".join(stories.stream("Once upon a time", max_new_tokens=30)) == fresh


def test_ctrl_c_during_beam_search(checkpoint, sigint):
    # Large enough that 8000 tokens of 4 beams take seconds on one thread: the interrupt at 0.3 s
    # lands inside generate().
    shape = dict(arch="llama", hidden_size=256, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=512, max_position_embeddings=8192, tie_word_embeddings=False)
    m = decodelab.load(checkpoint(shape), threads=1)
    before = m.generate([1, 2, 3], num_beams=2, max_new_tokens=10, eos_token_id=[]).token_ids
    timer = threading.Timer(0.3, _thread.interrupt_main)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            m.generate([1, 2, 3], num_beams=4, max_new_tokens=8000, eos_token_id=[])
    finally:
        timer.cancel()
    assert m.generate([1, 2, 3], num_beams=2, max_new_tokens=10, eos_token_id=[]).token_ids == before


# --- batches, n samples, timings -------------------------------------------------------------------

def test_batch_equals_one_by_one_with_per_prompt_samplers(stories):
    prompts = ["Once upon a time", "The dog", "Lily and Ben went"]
    greedy = stories.generate(prompts, max_new_tokens=25)
    assert [g.token_ids for g in greedy] == [stories.generate(p, max_new_tokens=25).token_ids for p in prompts]
    chains = [S.Chain([S.Temperature(0.9), S.Dist(1)]), S.Greedy(), S.Chain([S.TopK(5), S.Dist(2)])]
    batch = stories.generate(prompts, max_new_tokens=25, sampler=chains)
    single = [stories.generate(p, max_new_tokens=25, sampler=c) for p, c in zip(prompts, chains)]
    assert [g.token_ids for g in batch] == [g.token_ids for g in single]
    with pytest.raises(ValueError, match="got 2 samplers for 3 prompts"):
        stories.generate(prompts, sampler=chains[:2])


def test_n_samples_share_one_prefill(stories):
    g = stories.generate("Once upon a time", n=4, temperature=1.0, seed=9, max_new_tokens=20, eos_token_id=[])
    assert len(g.sequences) == 4
    scores = [s.score for s in g.sequences]
    assert scores == sorted(scores, reverse=True)
    assert g.token_ids == g.sequences[0].token_ids
    # Sample i is the stream (seed, sequence=i): the same as drawing it alone.
    texts = {s.text for s in g.sequences}
    assert len(texts) > 1


def test_timings(stories):
    g = stories.generate("Once upon a time", max_new_tokens=20, eos_token_id=[])
    t = g.timings
    assert t["prompt_tokens"] == 5 and t["generated_tokens"] == 20
    assert 0 < t["time_to_first_token"] and 0 < t["time_per_output_token"]
    assert t["decode_tokens_per_second"] == pytest.approx(1 / t["time_per_output_token"])
    assert t["prefill_tokens_per_second"] > 0


def test_bad_decoding_arguments(stories):
    with pytest.raises(ValueError, match=r"num_return_sequences must be in \[1, 2\], got 3"):
        stories.generate("Hi", num_beams=2, num_return_sequences=3)
    with pytest.raises(ValueError, match="early_stopping must be True, False or 'never', got 'sometimes'"):
        stories.generate("Hi", num_beams=2, early_stopping="sometimes")
    with pytest.raises(ValueError, match="n must be an integer >= 1, got 0"):
        stories.generate("Hi", n=0)
    with pytest.raises(ValueError, match="stop strings must be non-empty str"):
        stories.generate("Hi", stop=[""])
    with pytest.raises(ValueError, match="use num_beams or n, not both"):
        stories.generate("Hi", num_beams=2, n=2)
