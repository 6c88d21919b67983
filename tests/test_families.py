"""The Llama family's members (Qwen2, Qwen3, Mistral, Llama 3 RoPE scaling) equal transformers on
the same random weights: forward logits and prefill + cached decode within 1e-4, greedy tokens
over 64 steps, beam search sequences; sliding windows past the window, scaled RoPE past the
original context, and bad configs refused by name."""
import json
import os

import numpy as np
import pytest

import decodelab
from decodelab import testing
from decodelab.testing.llama_cpp import compare_gguf

pytestmark = pytest.mark.reference
TOL = 1e-4
FAMILIES = ["qwen2-tiny", "qwen3-tiny", "mistral-tiny", "llama3-tiny", "phi3-tiny", "pythia-tiny", "gemma2-tiny",
            "gemma3-tiny"]


def _folder(tmp_path_factory, shape, **overrides):
    spec = dict(testing.SHAPES[shape], **overrides)
    out = str(tmp_path_factory.mktemp(shape.replace(".", "_")))
    return testing.write_checkpoint(out, spec, seed=3)


def _prompt(vocab, n, seed=0):
    return np.random.default_rng(seed).integers(3, vocab, size=n).tolist()


def _hf_cached(ref, ids, n_prompt):
    """transformers' own prefill, then one token at a time through its cache: the logits of each."""
    import torch

    with torch.no_grad():
        out = ref(torch.tensor([ids[:n_prompt]]), use_cache=True)
        rows, past = [out.logits[0, -1].numpy()], out.cache
        for i in range(n_prompt, len(ids)):
            out = ref(torch.tensor([[ids[i]]]), cache=past, use_cache=True)
            rows.append(out.logits[0, -1].numpy())
            past = out.cache
    return rows


def _forward_and_cached(folder, n_prompt, n_decode, seed=0):
    from reference import hf_logits, hf_model, max_abs_diff

    ours = decodelab.load(folder)
    ref = hf_model(folder)
    ids = _prompt(ours.config.vocab_size, n_prompt + n_decode, seed)
    want = hf_logits(ref, ids)
    assert max_abs_diff(ours.forward(ids), want) <= TOL
    # A dynamic RoPE's (and longrope's) frequencies depend on each call's length, so cached keys keep the ones of
    # their own call: the reference for decoding is transformers' own cached decoding then.
    stepwise = _hf_cached(ref, ids, n_prompt) if ours.config.rope.rope_type in ("dynamic", "longrope") else \
        [want[i] for i in range(n_prompt - 1, len(ids))]
    cache = ours.new_cache()
    step = ours.prefill(ids[:n_prompt], cache)
    assert max_abs_diff(step, stepwise[0]) <= TOL
    for i in range(n_prompt, len(ids)):
        assert max_abs_diff(ours.decode(ids[i], cache), stepwise[i - n_prompt + 1]) <= TOL, f"position {i}"
    return ours, ref


@pytest.fixture(scope="module", params=FAMILIES)
def family(request, tmp_path_factory):
    return request.param, _folder(tmp_path_factory, request.param)


def test_forward_and_cached_decode_equal_transformers(family):
    shape, folder = family
    ours, ref = _forward_and_cached(folder, 40, 24)
    spec = testing.SHAPES[shape]
    assert ours.config.family == spec.get("family", spec["arch"])
    with open(os.path.join(folder, "config.json")) as f:
        assert type(ref).__name__ == json.load(f)["architectures"][0]


def test_greedy_64_tokens_and_beams_equal_transformers(family):
    import torch

    from reference import hf_greedy, hf_model

    _, folder = family
    ours, ref = decodelab.load(folder), hf_model(folder)
    ids = _prompt(ours.config.vocab_size, 12, 1)
    assert ours.generate(ids, max_new_tokens=64, eos_token_id=[]).token_ids == hf_greedy(ref, ids, 64, stop_on_eos=False)
    eos = [5, 7]
    with torch.no_grad():
        out = ref.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                           do_sample=False, num_beams=3, num_return_sequences=3, max_new_tokens=10,
                           eos_token_id=eos, pad_token_id=eos[0], length_penalty=1.0, early_stopping=False)
    want = []
    for row in out[:, len(ids):].tolist():
        want.append(row[:next((i + 1 for i, t in enumerate(row) if t in eos), len(row))])  # after EOS: padding
    got = ours.generate(ids, num_beams=3, num_return_sequences=3, max_new_tokens=10, eos_token_id=eos)
    assert [s.token_ids for s in got.sequences] == want


def test_sliding_window_past_the_window(tmp_path_factory):
    """Mistral with a window of 24 over 90 positions: prompt rows, cached decode and a batch all see
    only the latest 24 keys; with the window removed the logits differ (so the window is applied)."""
    folder = _folder(tmp_path_factory, "mistral-tiny")
    ours, _ = _forward_and_cached(folder, 50, 40, seed=2)
    ids = _prompt(ours.config.vocab_size, 90, 2)
    full = decodelab.load(_folder(tmp_path_factory, "mistral-tiny", sliding_window=None))
    assert np.abs(full.forward(ids)[-1] - ours.forward(ids)[-1]).max() > 1e-3
    # Batched decode gives each sequence its own window.
    caches = [ours.new_cache(), ours.new_cache()]
    ours.prefill(ids[:60], caches[0])
    ours.prefill(ids[:30], caches[1])
    batch = ours.decode_batch([ids[60], ids[30]], caches)
    want = ours.forward(ids[:61])[-1], ours.forward(ids[:31])[-1]
    np.testing.assert_allclose(batch, np.stack(want), atol=TOL)


@pytest.mark.parametrize("shape,layer_types", [("qwen2-tiny", None), ("qwen3-tiny", ["full_attention", "sliding_attention"])])
def test_qwen_sliding_layers(tmp_path_factory, shape, layer_types):
    """use_sliding_window: layers from max_window_layers on (or as layer_types says) slide."""
    extra = dict(use_sliding_window=True, sliding_window=16, max_window_layers=1)
    if layer_types:
        extra["layer_types"] = layer_types
    folder = _folder(tmp_path_factory, shape, **extra)
    ours, _ = _forward_and_cached(folder, 40, 10, seed=4)
    assert ours.config.sliding_window == (0, 16)


@pytest.mark.parametrize("scaling", [
    {"rope_type": "linear", "factor": 4.0},
    {"rope_type": "dynamic", "factor": 3.0},
    {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64},
    {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 64, "beta_fast": 16,
     "attention_factor": 1.3},
    {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
     "original_max_position_embeddings": 32},
])
def test_scaled_rope_equals_transformers(tmp_path_factory, scaling):
    """Each rope_type past its original context (dynamic: past max_position_embeddings, 64 here,
    which its factor stretches: the context window is 64 x 3)."""
    max_pos = 64 if scaling["rope_type"] == "dynamic" else 128
    folder = _folder(tmp_path_factory, "llama-tiny", rope_scaling=scaling, max_position_embeddings=max_pos)
    ours, _ = _forward_and_cached(folder, 50, 40, seed=5)
    assert ours.config.rope.rope_type == scaling["rope_type"]


@pytest.mark.parametrize("change,message", [
    ({"rope_scaling": {"rope_type": "su", "factor": 2.0}}, "rope scaling 'su' is not supported"),
    ({"rope_scaling": {"rope_type": "longrope", "short_factor": [1.0]}}, "'longrope' needs 'short_factor': 8 numbers"),
    ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, "rope scaling 'llama3' needs 'low_freq_factor'"),
    ({"rope_scaling": {"rope_type": "linear", "factor": -1}}, "'factor' must be a number > 0, got -1"),
    ({"sliding_window": 0}, "'sliding_window' must be an integer >= 1 or null, got 0"),
    ({"layer_types": ["full_attention", "sliding_attention"]}, "mistral with layer_types"),
])
def test_bad_family_configs_are_refused_by_name(tmp_path, change, message):
    folder = testing.write_checkpoint(str(tmp_path / "m"), "mistral-tiny")
    path = os.path.join(folder, "config.json")
    with open(path) as f:
        cfg = json.load(f)
    cfg.update(change)
    with open(path, "w") as f:
        json.dump(cfg, f)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        decodelab.load(folder)


def test_sampling_defaults_come_from_generation_config(tmp_path):
    """A folder's generation_config.json sets generate()'s sampling when the call names none, with
    transformers' defaults for the fields it leaves out; any explicit option replaces them all."""
    from decodelab import samplers

    folder = testing.write_checkpoint(str(tmp_path / "m"), "qwen2-tiny")
    with open(os.path.join(folder, "generation_config.json"), "w") as f:
        json.dump({"do_sample": True, "temperature": 0.7, "top_p": 0.8, "repetition_penalty": 1.05,
                   "eos_token_id": [2, 3]}, f)
    m = decodelab.load(folder)
    assert m.config.generation_defaults == {"temperature": 0.7, "top_k": 50, "top_p": 0.8,
                                            "repetition_penalty": 1.05}
    ids = _prompt(m.config.vocab_size, 6)
    a = m.generate(ids, max_new_tokens=12, seed=5, eos_token_id=[])
    b = m.generate(ids, max_new_tokens=12, eos_token_id=[], sampler=samplers.Chain(
        [samplers.RepetitionPenalty(1.05), samplers.Temperature(0.7), samplers.TopK(50), samplers.TopP(0.8),
         samplers.Dist(5)]))
    assert a.token_ids == b.token_ids
    greedy = m.generate(ids, max_new_tokens=12, temperature=0, eos_token_id=[])
    assert greedy.token_ids == m.generate(ids, max_new_tokens=12, temperature=0, eos_token_id=[]).token_ids
    with open(os.path.join(folder, "generation_config.json"), "w") as f:
        json.dump({"do_sample": True, "temperature": "hot"}, f)
    with pytest.raises(ValueError, match="generation_config.json 'temperature' must be a number >= 0, got 'hot'"):
        decodelab.load(folder)


# Gemma 3 as llama.cpp runs it: a global layer every 6th, local RoPE base 10000, scores by head_dim^-0.5.
_GEMMA3_GGUF = {"num_hidden_layers": 6, "sliding_window_pattern": 6, "rope_local_base_freq": 10000.0,
                "query_pre_attn_scalar": 32, "rope_scaling": {"rope_type": "linear", "factor": 8.0}}
_PHI3_LONGROPE = {"max_position_embeddings": 1024, "original_max_position_embeddings": 256,
                  "rope_scaling": {"rope_type": "longrope", "short_factor": [1.0 + 0.05 * i for i in range(8)],
                                   "long_factor": [1.5 + 0.3 * i for i in range(8)]}}


@pytest.mark.parametrize("shape,arch,overrides,n_check,precise,tol", [
    ("qwen2-tiny", "qwen2", {}, 48, False, 2e-3), ("qwen3-tiny", "qwen3", {}, 48, False, 2e-3),
    ("llama3-tiny", "llama", {}, 48, False, 2e-3), ("pythia-tiny", "gptneox", {}, 48, False, 2e-3),
    ("gemma2-tiny", "gemma2", {"query_pre_attn_scalar": 32}, 48, False, 2e-3),
    # llama.cpp's f16 GELU table adds about 5e-4 per Gemma 3 layer here (1 layer: 3.6e-4, 6: 3.4e-3 with
    # an f32 cache), the q/k norms' large scores magnifying it; with q/k norm weights of 1 it is 6e-4.
    ("gemma3-tiny", "gemma3", _GEMMA3_GGUF, 48, True, 5e-3),
    # llama.cpp turns Phi-3's sliding window (40 here) off, so it is checked inside the window.
    ("phi3-tiny", "phi3", {}, 32, True, 1e-4), ("phi3-tiny", "phi3", _PHI3_LONGROPE, 32, True, 1e-4)])
def test_gguf_export_and_load_per_family(tmp_path, shape, arch, overrides, n_check, precise, tol):
    """Our exporter writes each family as llama.cpp names it (Llama 3's RoPE factors in rope_freqs,
    GPT-NeoX's q/k/v rows as [q | k | v], Gemma's norms as 1 + w, Phi-3's fused matrices and
    longrope factors): decodelab reads the file back as the same model, and llama.cpp's logits on
    it agree with the folder's."""
    from decodelab.formats.gguf import export as gguf_export
    from decodelab.formats.gguf.reader import GGUFFile

    folder = testing.write_checkpoint(str(tmp_path / "hf"), dict(testing.SHAPES[shape], **overrides),
                                      byte_tokenizer=True)
    out = gguf_export.export(folder, str(tmp_path / "m.gguf"))
    with GGUFFile(out) as g:
        assert g.metadata["general.architecture"] == arch
    ours, ref = decodelab.load(out), decodelab.load(folder)
    assert (ours.config.family, ours.config.qkv_bias, ours.config.qk_norm, ours.config.sliding_window,
            ours.config.rope.rope_type, ours.config.rope_local) == \
        (ref.config.family, ref.config.qkv_bias, ref.config.qk_norm, ref.config.sliding_window,
         ref.config.rope.rope_type, ref.config.rope_local)
    ids = _prompt(ref.config.vocab_size, 80 if ref.config.rope.rope_type != "longrope" else 300, 6)
    np.testing.assert_allclose(ours.forward(ids), ref.forward(ids), atol=TOL, rtol=0)
    pytest.importorskip("llama_cpp", reason="llama-cpp-python runs the exported file")
    assert compare_gguf(folder, out, n_tokens=n_check, precise=precise) < tol


@pytest.mark.parametrize("tensor_type", ["Q8_0", "Q4_1"])
def test_phi3_fused_block_matrices_split_in_place(tmp_path, tensor_type):
    """A quantized Phi-3 file's fused q/k/v and gate/up blocks split into row ranges: llama.cpp's
    logits on the file agree with decodelab's exact reading of it (llama.cpp rounding activations
    to 8 bits accounts for the 5e-3 left), and the native int8 / int4 read stays close to it."""
    from decodelab.formats.gguf import export as gguf_export

    pytest.importorskip("llama_cpp", reason="llama-cpp-python runs the exported file")
    folder = testing.write_checkpoint(str(tmp_path / "hf"), "phi3-tiny", byte_tokenizer=True)
    out = gguf_export.export(folder, str(tmp_path / "m.gguf"), tensor_type)
    assert compare_gguf(folder, out, n_tokens=32, against="file", precise=True) < 1.5e-2
    ids = _prompt(512, 32, 2)
    exact, native = decodelab.load(out, dtype="float32"), decodelab.load(out)
    assert native.dtype == {"Q8_0": "int8", "Q4_1": "int4"}[tensor_type]
    assert np.abs(native.forward(ids) - exact.forward(ids)).max() < 0.1


@pytest.mark.parametrize("overrides,message", [
    (dict(_GEMMA3_GGUF, rope_local_base_freq=100.0), "RoPE base 10000"),
    (dict(_GEMMA3_GGUF, query_pre_attn_scalar=24), "a query_pre_attn_scalar of 24"),
    (dict(_GEMMA3_GGUF, sliding_window_pattern=2), "all but every 6th layer"),
    (dict(_GEMMA3_GGUF, final_logit_softcapping=30.0), "no soft caps")])
def test_gemma3_that_llama_cpp_runs_differently_is_not_exported(tmp_path, overrides, message):
    from decodelab.formats.gguf import export as gguf_export

    folder = testing.write_checkpoint(str(tmp_path / "hf"), dict(testing.SHAPES["gemma3-tiny"], **overrides))
    with pytest.raises(ValueError, match=message):
        gguf_export.export(folder, str(tmp_path / "m.gguf"))


def test_gemma2_scaling_llama_cpp_does_not_run_is_not_exported(tmp_path):
    from decodelab.formats.gguf import export as gguf_export

    folder = testing.write_checkpoint(str(tmp_path / "hf"), "gemma2-tiny")  # query_pre_attn_scalar 24, head 32
    with pytest.raises(ValueError, match="a query_pre_attn_scalar of 24 would not be the same model there"):
        gguf_export.export(folder, str(tmp_path / "m.gguf"))


def test_sliding_window_models_are_not_exported(tmp_path):
    from decodelab.formats.gguf import export as gguf_export

    folder = testing.write_checkpoint(str(tmp_path / "hf"), "mistral-tiny")
    with pytest.raises(ValueError, match="without sliding windows"):
        gguf_export.export(folder, str(tmp_path / "m.gguf"))


def test_phi3_fused_matrices_and_longrope(tmp_path_factory):
    """Phi-3: fused qkv_proj and gate_up_proj read as row ranges in place; its sliding window; and
    longrope (short factors up to the original length, long ones past it, with its attention
    factor) against transformers, decoding across the switch."""
    folder = _folder(tmp_path_factory, "phi3-tiny")
    ours, _ = _forward_and_cached(folder, 45, 20, seed=7)
    assert ours.config.sliding_window == (40, 40)
    rng = np.random.default_rng(8)
    scaling = {"rope_type": "longrope", "short_factor": (1 + rng.random(8)).tolist(),
               "long_factor": (2 + 4 * rng.random(8)).tolist()}
    folder = _folder(tmp_path_factory, "phi3-tiny", rope_scaling=scaling, original_max_position_embeddings=48,
                     sliding_window=None)
    ours, _ = _forward_and_cached(folder, 30, 40, seed=9)
    assert ours.config.rope.rope_type == "longrope" and ours.config.rope.attention_factor > 1


def test_pythia_sequential_residual_and_full_rotary(tmp_path_factory):
    """GPT-NeoX's other settings: use_parallel_residual false, and RoPE over the whole head."""
    folder = _folder(tmp_path_factory, "pythia-tiny", use_parallel_residual=False, rotary_pct=1.0)
    ours, _ = _forward_and_cached(folder, 30, 12, seed=11)
    assert not ours.config.parallel_residual and ours.config.rotary_dim == 0


def test_gemma_soft_caps_windows_and_local_rope_are_applied(tmp_path_factory):
    """Gemma 2's caps bound the logits (0.6 here) and change the scores (0.5); Gemma 3's sliding
    layers use their own RoPE base: without each, the logits move."""
    ids = _prompt(512, 60, 12)
    g2 = decodelab.load(_folder(tmp_path_factory, "gemma2-tiny"))
    logits = g2.forward(ids)
    assert np.abs(logits).max() < 0.6
    for change in ({"attn_logit_softcapping": None}, {"sliding_window": 1000}):
        other = decodelab.load(_folder(tmp_path_factory, "gemma2-tiny", **change))
        assert np.abs(other.forward(ids) - logits).max() > 1e-3, change
    g3 = decodelab.load(_folder(tmp_path_factory, "gemma3-tiny"))
    assert g3.config.sliding_window == (24, 0, 24) and g3.config.qk_norm
    same_base = decodelab.load(_folder(tmp_path_factory, "gemma3-tiny", rope_local_base_freq=1000000.0))
    assert np.abs(same_base.forward(ids) - g3.forward(ids)).max() > 1e-3


@pytest.mark.parametrize("shape", ["llama-tiny", "qwen3-tiny", "mistral-tiny", "phi3-tiny", "pythia-tiny",
                                   "gpt2-tiny", "gemma2-tiny", "gemma3-tiny"])
def test_attention_probabilities_equal_transformers(tmp_path_factory, shape):
    """forward(attentions=True) against transformers' output_attentions (eager) over 40 positions:
    grouped-query heads expanded, Qwen3's q/k norms, Gemma's scale, soft cap and 24-position windows."""
    import torch

    from reference import hf_model

    folder = _folder(tmp_path_factory, shape)
    ours, ref = decodelab.load(folder), hf_model(folder)
    ids = _prompt(ours.config.vocab_size, 40)
    logits, att = ours.forward(ids, attentions=True)
    with torch.no_grad():
        want = ref(torch.tensor([ids]), output_attentions=True).attentions
    assert len(att) == len(want) == ours.config.n_layers
    for layer, (a, w) in enumerate(zip(att, want)):
        assert a.shape == tuple(w.shape[1:]), layer
        assert np.abs(a - w[0].numpy()).max() <= 1e-5, (layer, np.abs(a - w[0].numpy()).max())
    np.testing.assert_array_equal(logits, ours.forward(ids))  # the logits do not change
