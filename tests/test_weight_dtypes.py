"""bfloat16 and int8 weights: the engine computes what fp32 does on the rounded weights; w8a8 (int8
weights, 7-bit activations) stays close to it at a measured cost."""
import numpy as np
import pytest

import decodelab
from decodelab import testing


def _bf16_round(w):
    u = w.astype(np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16 << 16
    return u.astype(np.uint32).view(np.float32)


def _int8_round(w, in_major):
    m = w.T if in_major else w  # per output channel
    scale = np.abs(m).max(axis=1, keepdims=True) / 127.0
    scale[scale == 0] = 1.0
    q = np.rint(m / scale).clip(-127, 127) * scale
    return (q.T if in_major else q).astype(np.float32)


LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "c_attn", "c_proj", "c_fc",
          "lm_head")


# GPT-2's fused q, k, v layer runs as three views of its rows where the layout allows (hidden size
# a multiple of 4 for bf16, of 16 for int8: gpt2-tiny's 64), and fused with a copy after it where
# not (int8 at 40); both paths against the fp32 twin.
GPT2_NARROW = dict(arch="gpt2", n_layer=2, n_embd=40, n_head=4, vocab_size=50257, n_positions=128)


@pytest.mark.parametrize("shape", ["llama-tiny", "gpt2-tiny", "llama-tiny-tied", pytest.param(GPT2_NARROW, id="gpt2-narrow")])
@pytest.mark.parametrize("dtype", ["bfloat16", "int8"])
def test_reduced_weights_equal_fp32_on_rounded_weights(tmp_path, shape, dtype):
    cfg, tensors = testing.random_weights(shape, seed=3)
    src = testing.write_hf_folder(str(tmp_path / "src"), cfg, tensors)
    rounded = {}
    for name, t in tensors.items():
        if any(k in name for k in LINEAR) and t.ndim == 2:
            rounded[name] = _bf16_round(t) if dtype == "bfloat16" else _int8_round(t, in_major=cfg["model_type"] == "gpt2")
        else:
            rounded[name] = t
    head = "transformer.wte.weight" if cfg["model_type"] == "gpt2" else "model.embed_tokens.weight"
    tied = cfg.get("tie_word_embeddings", False)
    ref_dir = testing.write_hf_folder(str(tmp_path / "ref"), cfg, rounded)
    ids = np.random.default_rng(0).integers(0, cfg["vocab_size"], size=40).tolist()
    got_model = decodelab.load(src, dtype=dtype)
    assert got_model.dtype == dtype
    if tied:
        # The tied head is rounded as a (vocab, hidden) linear while the embedding lookup stays
        # fp32: the fp32 twin is an untied checkpoint with the rounded head.
        untied_cfg = dict(cfg, tie_word_embeddings=False)
        untied = dict(rounded)
        untied["lm_head.weight"] = (_bf16_round(tensors[head]) if dtype == "bfloat16"
                                    else _int8_round(tensors[head], in_major=False))
        ref_dir = testing.write_hf_folder(str(tmp_path / "ref_untied"), untied_cfg, untied)
    ref = decodelab.load(ref_dir)
    want = ref.forward(ids)
    # The int8 kernel also rounds the activations to 16-bit fixed point (tests/test_kernels.py pins
    # that arithmetic exactly); here it moves logits by ~3e-5.
    atol = 1e-4 if dtype == "int8" else 2e-5
    np.testing.assert_allclose(got_model.forward(ids), want, rtol=0, atol=atol)
    cache = got_model.new_cache()
    rows = [got_model.prefill(ids[:20], cache)] + [got_model.decode(t, cache) for t in ids[20:]]
    np.testing.assert_allclose(np.stack(rows), want[19:], rtol=0, atol=atol)


@pytest.mark.parametrize("shape", ["llama-tiny", "gpt2-tiny"])
def test_w8a8_is_int8_with_rounded_activations(tmp_path, shape):
    """Same weights as int8; the prompt and the token-by-token path agree (their linear layers run
    one kernel, so only attention's summation order differs), and both stay near int8."""
    cfg, tensors = testing.random_weights(shape, seed=4)
    src = testing.write_hf_folder(str(tmp_path / "src"), cfg, tensors)
    ids = np.random.default_rng(1).integers(0, cfg["vocab_size"], size=40).tolist()
    a8, i8 = decodelab.load(src, dtype="w8a8"), decodelab.load(src, dtype="int8")
    assert a8.dtype == "w8a8" and a8.weight_bytes["quantized"] > i8.weight_bytes["quantized"]
    full = a8.forward(ids)
    cache = a8.new_cache()
    rows = [a8.prefill(ids[:20], cache)] + [a8.decode(t, cache) for t in ids[20:]]
    np.testing.assert_allclose(np.stack(rows), full[19:], rtol=0, atol=1e-4)
    ref = i8.forward(ids)
    err = np.abs(full - ref).max()
    assert 0 < err < 0.05 * np.abs(ref).max()


def test_reduced_weights_cost_and_accuracy_on_stories260k(stories_bin):
    text_ids = decodelab.load(stories_bin).tokenizer.encode(
        "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, "
        "she saw a big red ball. She wanted to play with it, but it was too high. Lily's mom said, \"Lily, let's "
        "go to the park.\" Lily was happy and they played all day.")
    out = {}
    for dtype in ("float32", "bfloat16", "int8", "w8a8"):
        m = decodelab.load(stories_bin, dtype=dtype)
        logits = m.forward(text_ids).astype(np.float64)
        logp = logits - np.log(np.exp(logits - logits.max(1, keepdims=True)).sum(1, keepdims=True)) \
            - logits.max(1, keepdims=True)
        nll = -np.mean([logp[i, t] for i, t in enumerate(text_ids[1:])])
        out[dtype] = (logits, float(np.exp(nll)), m.weight_bytes["quantized"])
    f32 = out["float32"][0]
    assert np.abs(out["bfloat16"][0] - f32).max() < 0.5
    assert np.abs(out["int8"][0] - f32).max() < 1.0
    # Perplexity on a fixed text moves by a few percent at most.
    assert abs(out["bfloat16"][1] / out["float32"][1] - 1) < 0.02
    assert abs(out["int8"][1] / out["float32"][1] - 1) < 0.05
    assert out["int8"][2] < out["bfloat16"][2]
    # 7-bit activations on top of int8 weights: a larger, still bounded, cost.
    assert np.abs(out["int8"][0] - f32).max() < np.abs(out["w8a8"][0] - f32).max() < 1.5
    assert abs(out["w8a8"][1] / out["float32"][1] - 1) < 0.05


def test_bf16_matmul_rounds_the_inputs_of_long_prompts_only(tmp_path):
    """load(bf16_matmul=True) (bfloat16's default where it measures faster) on a CPU with native
    bf16 products: a linear layer over gemm_min_rows rows or more rounds its input to bf16 (the prompt's logits move
    by about that rounding); fewer rows give the same bits as bf16_matmul=False, which stays fp32
    arithmetic on the rounded weights at every length. Without native bf16 the option changes
    nothing (oneDNN's emulated bf16 products are slower than the fp32 matmul)."""
    from decodelab import _core
    cfg, tensors = testing.random_weights("llama-tiny", seed=6)
    src = testing.write_hf_folder(str(tmp_path / "src"), cfg, tensors)
    rounded = {n: _bf16_round(t) if any(k in n for k in LINEAR) and t.ndim == 2 else t for n, t in tensors.items()}
    ref = decodelab.load(testing.write_hf_folder(str(tmp_path / "ref"), cfg, rounded))
    on, off = (decodelab.load(src, dtype="bfloat16", bf16_matmul=True),
               decodelab.load(src, dtype="bfloat16", bf16_matmul=False))
    assert on.bf16_matmul == _core.bf16_matmul_native() and not off.bf16_matmul and not ref.bf16_matmul
    n = _core.gemm_min_rows("bfloat16")
    ids = np.random.default_rng(2).integers(0, cfg["vocab_size"], size=n + 20).tolist()
    np.testing.assert_array_equal(on.forward(ids[:n - 1]), off.forward(ids[:n - 1]))
    want = ref.forward(ids)
    np.testing.assert_allclose(off.forward(ids), want, rtol=0, atol=2e-5)
    if _core.bf16_matmul_native():
        err = np.abs(on.forward(ids) - want).max()
        assert 2e-5 < err < 0.02 * np.abs(want).max()
    else:
        np.testing.assert_array_equal(on.forward(ids), off.forward(ids))
    with pytest.raises(TypeError, match="bf16_matmul must be True, False or None"):
        decodelab.load(src, dtype="bfloat16", bf16_matmul=1)


def test_bf16_matmul_with_int8_weights(tmp_path):
    """int8 with bf16_matmul=True on a CPU with native bf16 products: from
    gemm_min_rows("int8") rows a layer runs the bf16 matmul on bf16-rounded inputs and the int8
    values (exact in bf16), so a long prompt's logits move by about the inputs' bf16 rounding, and
    fewer rows give the same bits as bf16_matmul=False (the int8 panels at every length). Without
    native bf16 the option changes nothing. The default (None) is off for int8, whose logits stay
    the same bits on every path."""
    from decodelab import _core
    cfg, tensors = testing.random_weights("llama-tiny", seed=7)
    src = testing.write_hf_folder(str(tmp_path / "src"), cfg, tensors)
    on, off = decodelab.load(src, dtype="int8", bf16_matmul=True), decodelab.load(src, dtype="int8", bf16_matmul=False)
    assert on.bf16_matmul == _core.bf16_matmul_native() and not off.bf16_matmul
    assert not decodelab.load(src, dtype="int8").bf16_matmul
    assert not decodelab.load(src, dtype="w8a8").bf16_matmul
    n = _core.gemm_min_rows("int8")
    ids = np.random.default_rng(3).integers(0, cfg["vocab_size"], size=n + 20).tolist()
    np.testing.assert_array_equal(on.forward(ids[:n - 1]), off.forward(ids[:n - 1]))
    want, got = off.forward(ids), on.forward(ids)
    if not _core.bf16_matmul_native():
        np.testing.assert_array_equal(got, want)
        return
    err = np.abs(got - want).max()
    assert 1e-5 < err < 0.02 * np.abs(want).max()
    # Against fp32 the int8 weights' own error dominates either way.
    ref = decodelab.load(src).forward(ids)
    assert np.abs(got - ref).max() < 2 * np.abs(want - ref).max()
