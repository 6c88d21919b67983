"""ggml's block formats read natively: the engine's decoder equals gguf's on every format, 4-bit
layers keep the file's values (the int4 kernel against a numpy emulation of its arithmetic on the
blocks' own steps, minima and nibbles), and so do wider ones and the head under int4 (the 8-bit
block kernel against the exact values), under other dtypes they convert a panel of rows at a time
exactly as from fp32, and a GGUF file of 4-bit layers loads as int4 without an fp32 copy."""
import os

import gguf
import numpy as np
import pytest

import decodelab
from decodelab import _core, testing

FORMATS = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K"]
# Byte offsets of each block's f16 scales (d, and m / dmin where there is one).
SCALES = {"Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0], "Q4_K": [0, 2], "Q5_K": [0, 2],
          "Q6_K": [208]}


def random_blocks(fmt, n_blocks, rng):
    """Random bytes with finite f16 scales of either sign, some of them zero (an all-zero block)."""
    size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[fmt]][1]
    raw = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    for at in SCALES[fmt]:
        scale = (rng.standard_normal(n_blocks) * 0.01).astype(np.float16)
        scale[0] = 0.0
        raw[:, at:at + 2] = scale.view(np.uint8).reshape(n_blocks, 2)
    return raw


def test_the_block_formats_are_ggml_s():
    assert _core.BLOCK_DTYPES == tuple(FORMATS)
    for fmt in FORMATS:
        elems, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[fmt]]
        assert len(_core.dequantize_blocks(fmt, bytes(size))) == elems


@pytest.mark.parametrize("fmt", FORMATS)
def test_decoding_equals_gguf_bit_for_bit(fmt):
    raw = random_blocks(fmt, 40, np.random.default_rng(FORMATS.index(fmt)))
    ours = _core.dequantize_blocks(fmt, raw.tobytes())
    theirs = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType[fmt]).reshape(-1)
    np.testing.assert_array_equal(ours.view(np.uint32), theirs.astype(np.float32).view(np.uint32))


def test_bad_blocks_are_refused():
    with pytest.raises(ValueError, match="Q4_1 blocks are 20 bytes each; got 21 bytes"):
        _core.dequantize_blocks("Q4_1", bytes(21))
    with pytest.raises(ValueError, match="one of ggml's block formats .* got 'Q3_K'"):
        _core.dequantize_blocks("Q3_K", bytes(110))
    with pytest.raises(ValueError, match="data must hold 80 bytes"):
        _core.linear_blocks(np.zeros((1, 64), np.float32), "Q4_1", bytes(79), 2)


def _f16(raw, at):
    return raw[:, at:at + 2].copy().view(np.float16).astype(np.float32)[:, 0]


def four_bit_parts(fmt, raw):
    """(q, step, min) per 32 values of 4-bit blocks, as ggml defines them: Q4_0 (d, -8 d), Q4_1
    (d, m), Q4_K (d x scale, -(dmin x min) per sub-block, the products in fp32)."""
    if fmt in ("Q4_0", "Q4_1"):
        qs = raw[:, 2:] if fmt == "Q4_0" else raw[:, 4:]
        q = np.concatenate([qs & 0x0F, qs >> 4], axis=1)
        d = _f16(raw, 0)
        m = -8 * d if fmt == "Q4_0" else _f16(raw, 2)
        return q, d[:, None], m[:, None]
    from decodelab.formats.gguf.blocks import _k_scales

    d, dmin = _f16(raw, 0), _f16(raw, 2)
    sc, mn = _k_scales(raw[:, 4:16])
    ql = raw[:, 16:].reshape(-1, 4, 32)
    q = np.stack([ql & 0x0F, ql >> 4], axis=2).reshape(-1, 256)
    return q, (d[:, None] * sc).astype(np.float32), -(dmin[:, None] * mn).astype(np.float32)


def int4_emulation(x, fmt, raw, out):
    """The int4 kernel's arithmetic on blocks: activations rounded to int8 per 32 (max / 127), each
    32 values' integer sum exact, scaled by step dx, plus min dx sum(xq)."""
    q, step, mn = four_bit_parts(fmt, raw)
    T, n = x.shape
    q = q.reshape(out, n // 32, 32).astype(np.int64)
    step, mn = step.reshape(out, n // 32), mn.reshape(out, n // 32)
    xb = x.reshape(T, n // 32, 32)
    dx = (np.abs(xb).max(axis=2) / np.float32(127)).astype(np.float32)
    xq = np.rint(xb * np.where(dx > 0, np.float32(1) / np.where(dx > 0, dx, 1), 0)[..., None]).astype(np.int64)
    ints = np.einsum("onk,tnk->ton", q, xq).astype(np.float64)
    return (ints * (step[None] * dx[:, None]) + mn[None] * (dx * xq.sum(axis=2))[:, None]).sum(axis=2)


@pytest.mark.parametrize("fmt", ["Q4_0", "Q4_1", "Q4_K"])
@pytest.mark.parametrize("T,out", [(1, 37), (5, 16), (10, 9), (17, 3)])
def test_int4_layers_keep_the_files_values(fmt, T, out):
    """4-bit blocks repacked as they are: the kernel equals the emulation on the file's own q, step
    and min, and each row is the same bits at any row count."""
    rng = np.random.default_rng(T * 100 + out)
    n = 512 if fmt == "Q4_K" else 96
    elems, _ = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[fmt]]
    raw = random_blocks(fmt, out * n // elems, rng)
    x = rng.standard_normal((T, n)).astype(np.float32)
    x[0, :32] = 0.0  # an all-zero activation block
    y = _core.linear_blocks(x, fmt, raw.tobytes(), out)
    ref = int4_emulation(x, fmt, raw, out)
    np.testing.assert_allclose(y, ref, rtol=2e-5, atol=2e-5 * np.abs(ref).max())
    alone = np.concatenate([_core.linear_blocks(x[t:t + 1], fmt, raw.tobytes(), out) for t in range(T)])
    np.testing.assert_array_equal(y, alone)


def blocks_emulation(x, fmt, raw, out):
    """The 8-bit block kernel's arithmetic: activations rounded to int8 per 32 (max / 127) against
    the file's exact values (gguf's decoding), each block's sum scaled by its dx, in float64."""
    T, n = x.shape
    w = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType[fmt]).reshape(out, n).astype(np.float64)
    xb = x.reshape(T, n // 32, 32)
    dx = (np.abs(xb).max(axis=2) / np.float32(127)).astype(np.float32)
    xq = np.rint(xb * np.where(dx > 0, np.float32(1) / np.where(dx > 0, dx, 1), 0)[..., None])
    return (xq * dx[..., None]).reshape(T, n).astype(np.float64) @ w.T


# Every format as the head (4-bit layers take the int4 kernel, test_int4_layers_keep_the_files_values).
_EIGHT_BIT_CASES = [(fmt, T, out, as_head) for fmt in FORMATS
                    for T, out, as_head in [(1, 37, False), (6, 16, True), (17, 3, False)]
                    if as_head or fmt not in ("Q4_0", "Q4_1", "Q4_K")]


@pytest.mark.parametrize("fmt,T,out,as_head", _EIGHT_BIT_CASES)
def test_8_bit_block_layers_keep_the_files_values(fmt, T, out, as_head):
    """Under int4, 5- to 8-bit layers (and any format as the head) keep the file's int8 codes and
    steps (Q6_K's per 16 values, minima where the format has them): the kernel equals the exact
    values against the rounded activations, and each row is the same bits at any row count."""
    rng = np.random.default_rng(T * 100 + out + FORMATS.index(fmt))
    n = 512
    elems, _ = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[fmt]]
    raw = random_blocks(fmt, out * n // elems, rng)
    x = rng.standard_normal((T, n)).astype(np.float32)
    x[0, :32] = 0.0
    y = _core.linear_blocks(x, fmt, raw.tobytes(), out, "int4", as_head=as_head)
    ref = blocks_emulation(x, fmt, raw, out)
    np.testing.assert_allclose(y, ref, rtol=0, atol=1e-6 * np.abs(ref).max())
    alone = np.concatenate([_core.linear_blocks(x[t:t + 1], fmt, raw.tobytes(), out, as_head=as_head)
                            for t in range(T)])
    np.testing.assert_array_equal(y, alone)


@pytest.mark.parametrize("fmt", ["Q5_0", "Q5_1", "Q5_K", "Q6_K"])
@pytest.mark.parametrize("T,out", [(1, 37), (2, 16), (3, 20), (4, 33), (5, 16), (6, 20), (7, 3), (9, 17),
                                   (70, 5)])
def test_5_and_6_bit_layers_give_the_8_bit_layers_bits(fmt, T, out):
    """Under int4, 5-bit layers and Q6_K's keep their codes in 5 and 6 bits (about the file's
    size) and give the same bits as the same codes held in 8, at every tile width (1 to 4 rows,
    or 6 with AVX-512, then full tiles and the rest) and where a prompt's rows unpack each panel once to 8 bits."""
    rng = np.random.default_rng(T * 1000 + out + FORMATS.index(fmt))
    n = 768
    elems, _ = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[fmt]]
    raw = random_blocks(fmt, out * n // elems, rng)
    x = rng.standard_normal((T, n)).astype(np.float32)
    x[-1, 32:64] = 0.0  # an all-zero activation block
    x[0, 64:96] *= 1000.0  # and a block far larger than the rest
    five = _core.linear_blocks(x, fmt, raw.tobytes(), out, "int4")
    eight = _core.linear_blocks(x, fmt, raw.tobytes(), out, "int4", narrow=False)
    np.testing.assert_array_equal(five, eight)
    assert np.abs(five).max() > 0


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", ["int8", "bfloat16"])
def test_wider_layers_convert_as_from_fp32(fmt, dtype):
    """Blocks decoded a panel of rows at a time give the conversion of the whole decoded matrix."""
    rng = np.random.default_rng(7)
    out, n = 37, 512
    elems, _ = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[fmt]]
    raw = random_blocks(fmt, out * n // elems, rng)
    w = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType[fmt]).reshape(out, n).astype(np.float32)
    x = rng.standard_normal((3, n)).astype(np.float32)
    np.testing.assert_array_equal(_core.linear_blocks(x, fmt, raw.tobytes(), out, dtype), _core.linear(x, w, dtype))


@pytest.fixture(scope="module")
def tiny_q4k(tmp_path_factory):
    """A tiny random Llama exported with Q4_K layers (rows of 256 values) and Q5_0 where a row is
    not a multiple of 256, as llama.cpp's Q4_K_M does."""
    from decodelab.formats.gguf import export as gguf_export

    tmp = tmp_path_factory.mktemp("q4k")
    folder = str(tmp / "model")
    testing.write_checkpoint(folder, {"arch": "llama", "hidden_size": 256, "intermediate_size": 384, "num_hidden_layers": 2,
                                      "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 320,
                                      "max_position_embeddings": 256, "tie_word_embeddings": True})
    path = str(tmp / "model.Q4_K.gguf")
    gguf_export.export(folder, path, "Q4_K")
    return path


def test_a_4_bit_gguf_loads_as_int4_from_its_mapping(tiny_q4k):
    from decodelab.formats.gguf.reader import GGUFFile

    with GGUFFile(tiny_q4k) as g:
        types = {t.type.name for t in g.tensors.values()}
        vectors = sum(4 * int(np.prod(t.shape)) for t in g.tensors.values() if len(t.shape) == 1)
    assert {"Q4_K", "Q5_0"} <= types, types
    m = decodelab.load(tiny_q4k)
    assert m.dtype == "int4"
    assert m.weight_bytes["converted"] == vectors > 0  # no fp32 copy of any matrix; the norms read with pread
    exact = decodelab.load(tiny_q4k, dtype="float32")
    ids = list(range(3, 67))
    a, b = m.forward(ids), exact.forward(ids)
    assert (a.argmax(-1) == b.argmax(-1)).mean() >= 0.9
    np.testing.assert_allclose(a, b, atol=0.05 * np.abs(b).max())
    # Greedy decoding runs on the native layers, and dtype="int8" reads the same file too.
    assert len(m.generate(ids[:4], max_new_tokens=8, eos_token_id=[]).token_ids) == 8
    assert decodelab.load(tiny_q4k, dtype="int8").dtype == "int8"


@pytest.mark.parametrize("fmt,per_block", [("Q4_1", 4), ("Q4_0", 2), ("Q4_K", 2.5)])
def test_int4_steps_stay_halves_where_the_file_has_halves(tmp_path, fmt, per_block):
    # Q4_0 / Q4_1 steps and minima are halves in the file: kept as halves, a decode step reads 4
    # bytes of them per 32 weights (the kernel's arithmetic is the same: see the emulation above),
    # and Q4_0's minima, all -8 steps, are formed from the steps: 2 bytes, as the file stores them;
    # Q4_K's steps are products of a half and a 6-bit scale: kept as the file's codes, a byte each
    # for step and minimum per 32 weights and two halves per 256 (2.5 bytes; the file: 2).
    from decodelab.formats.gguf import export as gguf_export

    folder = testing.write_checkpoint(str(tmp_path / "model"), {
        "arch": "llama", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 1, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 320, "max_position_embeddings": 64, "tie_word_embeddings": False})
    path = str(tmp_path / f"model.{fmt}.gguf")
    gguf_export.export(folder, path, fmt)
    m = decodelab.load(path)
    assert m.dtype == "int4"
    c = m.new_cache()
    m.prefill([3, 4], c)
    with m.profile() as prof:
        m.decode(5, c)
    rows = {r.op: r for r in prof.ops("decode")}
    D, H = 256, 512
    assert rows["mlp_in"].weight_bytes == 2 * (D * H / 2 + per_block * H * D / 32)
    assert rows["mlp_out"].weight_bytes == H * D / 2 + per_block * D * H / 32
    exact = decodelab.load(path, dtype="float32")
    ids = list(range(3, 40))
    assert (m.forward(ids).argmax(-1) == exact.forward(ids).argmax(-1)).mean() >= 0.9
