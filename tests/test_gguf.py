"""GGUF files read as untrusted input (decodelab.formats.gguf.reader) and their tensors decoded
(decodelab.formats.gguf.blocks): the shared SmolLM2 file against the gguf package's reader and
dequantizers, bit for bit; each malformed-file class a crafted file; a seeded mutator."""
import os
import struct

import numpy as np
import pytest

import decodelab
from decodelab.formats.gguf import reader as gguf_file
from decodelab.formats.gguf import blocks as gguf_quants
from decodelab.formats.gguf.reader import GGUFFile

from conftest import MODELS, _need

gguf = pytest.importorskip("gguf", reason="the gguf package (a test extra) is the reference reader")
from gguf import GGMLQuantizationType as QT  # noqa: E402
from gguf import quants  # noqa: E402

SMOLLM = os.path.join(MODELS, "smollm2-135m-instruct", "SmolLM2-135M-Instruct.Q4_1.gguf")

# --- a small GGUF writer, so that every field can be set to what a hostile file would hold ------


def _s(text) -> bytes:
    b = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(b)) + b


def _kv(key, vtype, payload: bytes) -> bytes:
    return _s(key) + struct.pack("<I", vtype) + payload


def _u32(key, v):
    return _kv(key, 4, struct.pack("<I", v))


def _str(key, v):
    return _kv(key, 8, _s(v))


def _tensor(name, dims, type_id, offset) -> bytes:
    return _s(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims) + \
        struct.pack("<IQ", type_id, offset)


def make(kvs=(), tensors=(), data=b"", *, version=3, n_tensors=None, n_kv=None, alignment=32) -> bytes:
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors) if n_tensors is None else n_tensors,
                                 len(kvs) if n_kv is None else n_kv)
    body = head + b"".join(kvs) + b"".join(tensors)
    pad = -len(body) % alignment
    return body + b"\0" * pad + data


def valid() -> bytes:
    """Two tensors (F32 (4, 2), Q8_0 (32,)) and a little metadata."""
    f32 = np.arange(8, dtype=np.float32).tobytes()
    q8 = np.float16(0.5).tobytes() + bytes(range(32))
    return make([_str("general.architecture", "llama"), _u32("llama.block_count", 1),
                 _kv("tokenizer.ggml.tokens", 9, struct.pack("<IQ", 8, 2) + _s("a") + _s("b"))],
                [_tensor("w", (4, 2), 0, 0), _tensor("q", (32,), 8, 32)],
                f32 + b"\0" * 0 + q8)


def _write(tmp_path, data: bytes, name="m.gguf") -> str:
    p = tmp_path / name
    p.write_bytes(data)
    return str(p)


def test_a_small_file_reads_back(tmp_path):
    with GGUFFile(_write(tmp_path, valid())) as g:
        assert g.version == 3 and g.alignment == 32
        assert g.metadata["general.architecture"] == "llama" and g.metadata["llama.block_count"] == 1
        assert g.metadata["tokenizer.ggml.tokens"] == ["a", "b"]
        w = gguf_quants.dequantize_tensor(g, g.tensors["w"])
        assert w.shape == (2, 4) and w.ravel().tolist() == list(range(8))
        q = gguf_quants.dequantize_tensor(g, g.tensors["q"])
        assert q.tolist() == [0.5 * v for v in np.arange(32, dtype=np.int8)]


@pytest.mark.slow
def test_the_shared_file_agrees_with_the_gguf_package():
    _need(SMOLLM)
    ref = gguf.GGUFReader(SMOLLM)
    with GGUFFile(SMOLLM) as g:
        assert (g.version, len(g.tensors), len(g.metadata)) == (3, 272, 33)
        assert g.metadata["general.architecture"] == "llama"
        assert g.metadata["llama.attention.head_count_kv"] == 3
        assert len(g.metadata["tokenizer.ggml.tokens"]) == 49152
        assert g.metadata["tokenizer.ggml.tokens"][:3] == ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
        for t in ref.tensors:
            mine = g.tensors[t.name]
            assert (mine.offset, mine.nbytes, list(mine.shape), mine.type.name) == \
                (t.data_offset, t.n_bytes, t.shape.tolist(), t.tensor_type.name)
            raw = g.data(t.name)
            got = gguf_quants.dequantize(raw, mine.type.name, mine.shape)
            want = np.asarray(quants.dequantize(raw.view(np.float32) if mine.type.name == "F32" else raw,
                                                QT[mine.type.name]), dtype=np.float32).reshape(got.shape)
            assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), t.name


@pytest.mark.parametrize("type_name", ["F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K",
                                       "Q6_K"])
def test_dequantization_equals_the_reference_bit_for_bit(type_name):
    block, block_bytes = quants.GGML_QUANT_SIZES[QT[type_name]]
    rng = np.random.default_rng(7)
    raw = rng.integers(0, 256, size=(256, block_bytes), dtype=np.uint8)  # every f16 scale: tiny, huge, inf, NaN
    if block_bytes >= 4 and block > 1:  # and some blocks with ordinary scales
        raw[:64, :2] = np.frombuffer(np.float16([0.01] * 64).tobytes(), np.uint8).reshape(64, 2)
    got = gguf_quants.dequantize(raw.ravel(), type_name, (block * 256,))
    with np.errstate(invalid="ignore", over="ignore"):  # the reference warns on inf and NaN scales
        want = np.asarray(quants.dequantize(raw, QT[type_name]), dtype=np.float32).ravel()
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_an_unsupported_type_is_named():
    with pytest.raises(ValueError, match="tensor type IQ2_XXS is not supported"):
        gguf_quants.dequantize(np.zeros(66, np.uint8), "IQ2_XXS", (256,))


HUGE = 1 << 63
MALFORMED = {
    "bad magic": (b"GGUX" + valid()[4:], "not a GGUF file"),
    "version 1": (make(version=1), "GGUF version 1 is not supported"),
    "tensor count 2^63": (make(n_tensors=HUGE), "tensor count 9223372036854775808 is more than the limit"),
    "metadata count 2^64-1": (make(n_kv=(1 << 64) - 1), "metadata count .* is more than the limit"),
    "key length 2^63": (make([struct.pack("<Q", HUGE) + b"k"], n_kv=1), "metadata key #0 is 9223372036854775808 bytes"),
    "string length wraps to 0": (make([_kv("s", 8, struct.pack("<Q", (1 << 64) - 1))]), "is 18446744073709551615 bytes"),
    "string past the end": (make([_kv("s", 8, struct.pack("<Q", 100) + b"abc")]), "past the end of the file"),
    "array count 2^63": (make([_kv("a", 9, struct.pack("<IQ", 4, HUGE))]), "has 9223372036854775808 elements"),
    "array past the end": (make([_kv("a", 9, struct.pack("<IQ", 4, 1 << 20))]), "past the end of the file"),
    "array element type 13": (make([_kv("a", 9, struct.pack("<IQ", 13, 1) + b"\0" * 8)]), "array element type 13"),
    "array of arrays": (make([_kv("a", 9, struct.pack("<IQ", 9, 1) + struct.pack("<IQ", 4, 0))]), "array of arrays"),
    "value type 99": (make([_kv("v", 99, b"")]), "value type 99"),
    "bool of 2": (make([_kv("b", 7, b"\x02")]), "is a bool of value 2"),
    "duplicate key": (make([_u32("k", 1), _u32("k", 2)]), "metadata key 'k' appears twice"),
    "alignment 48": (make([_u32("general.alignment", 48)]), "general.alignment 48 is not a power of two"),
    "alignment 0": (make([_u32("general.alignment", 0)]), "general.alignment 0 is not a power of two"),
    "duplicate tensor": (make([], [_tensor("t", (4,), 0, 0), _tensor("t", (4,), 0, 32)], b"\0" * 64),
                         "tensor 't' appears twice"),
    "0 dimensions": (make([], [_tensor("t", (), 0, 0)], b"\0" * 32), "has 0 dimensions"),
    "5 dimensions": (make([], [_tensor("t", (1, 1, 1, 1, 1), 0, 0)], b"\0" * 32), "has 5 dimensions"),
    "a dimension of 0": (make([], [_tensor("t", (4, 0), 0, 0)], b"\0" * 32), "has a dimension of 0"),
    "element count overflows": (make([], [_tensor("t", (1 << 32, 1 << 32), 0, 0)], b"\0" * 32),
                                "has more than 281474976710656 elements"),
    "size wraps to 0": (make([], [_tensor("t", (1 << 62, 4), 0, 0)], b"\0" * 32), "has more than"),
    "unknown type": (make([], [_tensor("t", (4,), 99, 0)], b"\0" * 32), "type id 99, not a known ggml type"),
    "row not whole blocks": (make([], [_tensor("t", (33,), 2, 0)], b"\0" * 64), "not a multiple of its block of 32"),
    "offset not aligned": (make([], [_tensor("t", (4,), 0, 4)], b"\0" * 64), "offset 4 is not a multiple"),
    "offset past the end": (make([], [_tensor("t", (4,), 0, 1 << 40)], b"\0" * 32), "runs past the end"),
    "offset 2^64 - 32": (make([], [_tensor("t", (4,), 0, (1 << 64) - 32)], b"\0" * 32), "runs past the end"),
    "data past the end": (make([], [_tensor("t", (1024,), 0, 0)], b"\0" * 32), "runs past the end"),
    "overlapping tensors": (make([], [_tensor("a", (16,), 0, 0), _tensor("b", (16,), 0, 32)], b"\0" * 128),
                            "tensors 'a' and 'b' overlap"),
    "name past the limit": (make([], [_tensor("n" * 300, (4,), 0, 0)], b"\0" * 32), "is 300 bytes long"),
    "not UTF-8": (make([_kv("s", 8, _s(b"\xff\xfe"))]), "not valid UTF-8"),
    "header only": (b"GGUF\x03\x00\x00\x00" + b"\x00" * 10, "too short for a GGUF header"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_each_malformed_class_is_a_value_error(tmp_path, case):
    data, msg = MALFORMED[case]
    path = _write(tmp_path, data)
    with pytest.raises(ValueError, match=msg):
        GGUFFile(path).close()
    with pytest.raises(ValueError):  # load() says so too, and nothing else
        decodelab.load(path)


@pytest.mark.fuzz
def test_every_truncation_and_a_seeded_mutator_raise_only_value_errors(tmp_path):
    base = valid()
    path = str(tmp_path / "f.gguf")
    rng = np.random.default_rng(1234)
    cases = [base[:n] for n in range(len(base))]
    for _ in range(1500):
        b = bytearray(base)
        for _ in range(int(rng.integers(1, 4))):
            kind = rng.integers(0, 3)
            at = int(rng.integers(0, len(b)))
            if kind == 0:
                b[at] = int(rng.integers(0, 256))
            elif kind == 1:  # a large or boundary integer over a length, count, dimension or offset
                vals = [0, 1, 2**31, 2**32 - 1, 2**32, 2**63, 2**64 - 1, int(rng.integers(0, 2**20))]
                v = vals[int(rng.integers(0, len(vals)))]
                b[at:at + 8] = struct.pack("<Q", v)[:len(b) - at]
            else:
                del b[at:at + int(rng.integers(1, 16))]
        cases.append(bytes(b))
    parsed = 0
    for data in cases:
        with open(path, "wb") as f:
            f.write(data)
        try:
            with GGUFFile(path) as g:
                for t in g.tensors.values():
                    if t.type.name in gguf_quants.DEQUANTIZERS:
                        gguf_quants.dequantize_tensor(g, t)
            parsed += 1
        except ValueError:
            pass
    assert parsed < len(cases)  # most mutations break the file, and every break is a ValueError


def test_is_gguf_tells_the_formats_apart():
    _need(SMOLLM)
    assert gguf_file.is_gguf(SMOLLM) and not gguf_file.is_gguf(os.path.join(MODELS, "stories260K", "stories260K.bin"))


# The error each stored type allows on a weight of a block whose largest magnitude is amax: Q8_0
# and Q4_0 round w / d to an integer (Q4_0 clamping the largest to 7 steps, a whole step off), with
# d = amax / 127 or amax / 8, then store d in f16: up to 127 or 8 steps of d's rounding on top.
def _bound(amax, tensor_type):
    d = amax / (127 if tensor_type == "Q8_0" else 8)
    steps = 127 if tensor_type == "Q8_0" else 8
    return d * (0.5 if tensor_type == "Q8_0" else 1.0) + steps * d * 2**-11 + 1e-12


# Q5_0 as Q4_0 with 16 steps a side; Q4_1 and Q5_1 span [min, max] of the block in 15 or 31 steps,
# off by half a step plus the f16 rounding of the step and the minimum.
def _block_bound(w, tensor_type):
    b = w.reshape(-1, 32)
    if tensor_type == "Q5_0":
        d = np.abs(b).max(axis=1, keepdims=True) / 16
        return d + 16 * d * 2**-11 + 1e-12
    levels = 15 if tensor_type == "Q4_1" else 31
    lo, hi = b.min(axis=1, keepdims=True), b.max(axis=1, keepdims=True)
    d = (hi - lo) / levels
    return d / 2 + levels * d * 2**-11 + np.abs(lo) * 2**-11 + 1e-12


@pytest.mark.parametrize("tensor_type", ["F32", "F16", "Q8_0", "Q5_1", "Q5_0", "Q4_1", "Q4_0"])
def test_exported_files_load_and_match_the_source(tmp_path, tensor_type):
    from safetensors.numpy import load_file

    from decodelab import testing
    from decodelab.formats.gguf import export as gguf_export
    folder = testing.write_checkpoint(str(tmp_path / "hf"), "llama-tiny", byte_tokenizer=True)
    out = gguf_export.export(folder, str(tmp_path / f"m.{tensor_type}.gguf"), tensor_type)
    src = load_file(os.path.join(folder, "model.safetensors"))
    with GGUFFile(out) as g:
        for name, t in g.tensors.items():
            target = decodelab.formats.gguf.model._engine_name(name, 2)
            w = src[target].astype(np.float32)
            got = gguf_quants.dequantize_tensor(g, t)
            if name.endswith(("attn_q.weight", "attn_k.weight")):  # stored in interleaved RoPE order
                heads = 4 if "attn_q" in name else 2
                w = gguf_export._unpermute(w, heads)
            assert got.shape == w.shape, name
            if tensor_type == "F16" and w.ndim == 2:
                assert np.all(np.abs(got - w) <= np.abs(w) * 2**-11 + 6e-8), name
            elif w.ndim == 2 and tensor_type in ("Q5_1", "Q5_0", "Q4_1"):
                assert np.all(np.abs(got - w).reshape(-1, 32) <= _block_bound(w, tensor_type)), name
            elif w.ndim == 2 and tensor_type != "F32":
                amax = np.abs(w.reshape(-1, 32)).max(axis=1, keepdims=True)
                assert np.all(np.abs(got - w).reshape(-1, 32) <= _bound(amax, tensor_type)), name
            else:
                assert np.array_equal(got, w), name
    ours = decodelab.load(out, dtype="float32")
    assert ours.tokenizer is None and ours.config.rope_interleaved
    ref = decodelab.load(folder)
    ids = list(range(3, 40))
    tol = {"F32": 1e-4, "F16": 2e-3, "Q8_0": 2e-2, "Q5_1": 0.1, "Q5_0": 0.15, "Q4_1": 0.2, "Q4_0": 0.3}[tensor_type]
    np.testing.assert_allclose(ours.forward(ids), ref.forward(ids), atol=tol, rtol=0)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_checkpoints_are_written_a_tensor_at_a_time_with_the_same_values(tmp_path, dtype):
    from safetensors import safe_open

    from decodelab import testing
    from decodelab.formats.gguf import export as gguf_export
    shape = dict(testing.SHAPES["llama-tiny"], num_hidden_layers=3)
    folder = testing.write_checkpoint(str(tmp_path / "hf"), shape, dtype=dtype)
    _, want = testing.random_weights(shape)
    with safe_open(os.path.join(folder, "model.safetensors"), "numpy") as f:
        assert sorted(f.keys()) == sorted(want)  # the safetensors package reads the header
    raw = gguf_export._Folder(folder)  # the exporter's reader: BF16 widened to fp32
    for name, w in want.items():
        got = raw[name]
        if dtype == "bfloat16":
            assert np.all(np.abs(got - w) <= np.abs(w) * 2**-8), name
        else:
            assert np.array_equal(got, w.astype(dtype).astype(np.float32)), name
    assert decodelab.load(folder).forward([1, 2, 3]).shape == (3, 512)


@pytest.mark.parametrize("folder_dtype,tensor_type", [("float32", "F32"), ("float32", "Q8_0"), ("bfloat16", "F32")])
def test_export_holds_one_tensor_at_a_time(tmp_path, folder_dtype, tensor_type):
    """The exporter streams a folder: its Python-side peak (numpy's buffers are traced) stays near
    the largest tensor's fp32 size, far below the model's; reading the whole folder first, as it
    once did, held all of it, and converting every bf16 matrix when the tensor list was built held
    it all in fp32 (an 8B folder ran out of 24 GiB)."""
    import tracemalloc

    from decodelab import testing
    from decodelab.formats.gguf import export as gguf_export
    shape = dict(testing.SHAPES["llama-tiny"], hidden_size=128, intermediate_size=384, num_hidden_layers=16,
                 vocab_size=1024)
    folder = testing.write_checkpoint(str(tmp_path / "hf"), shape, dtype=folder_dtype)
    as_fp32 = os.path.getsize(os.path.join(folder, "model.safetensors")) * (2 if folder_dtype == "bfloat16" else 1)
    largest = 1024 * 128 * 4
    tracemalloc.start()
    try:
        out = gguf_export.export(folder, str(tmp_path / "m.gguf"), tensor_type)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 6 * largest < as_fp32 / 3, (peak, largest, as_fp32)
    ids = list(range(3, 30))
    np.testing.assert_allclose(decodelab.load(out, dtype="float32").forward(ids), decodelab.load(folder).forward(ids),
                               atol=1e-4 if tensor_type == "F32" else 2e-2, rtol=0)


def test_q4_k_blocks_decode_as_gguf_decodes_them_within_a_step():
    """Our Q4_K encoder: gguf's dequantizer and ours give the same values; each value is within one
    step of its sub-block's range (the 6-bit scales cost up to half a step more than Q4_1's exact
    ones); all-zero, constant and one-signed rows survive; widths not a multiple of 256 are refused."""
    from decodelab.formats.gguf.quantize import quantize_q4_k

    rng = np.random.default_rng(0)
    w = (0.05 * rng.standard_normal((12, 512))).astype(np.float32)
    w[0] = 0.0
    w[1, :256] = 3.0
    w[2] = np.abs(w[2])
    w[3, :32] *= 1000  # one sub-block far larger than the rest of its super-block
    raw = quantize_q4_k(w)
    assert raw.shape == (12, 2 * 144) and raw.dtype == np.uint8
    ours = gguf_quants.dequantize(raw.reshape(-1), "Q4_K", (512, 12))
    assert np.array_equal(ours, gguf.quants.dequantize(raw, gguf.GGMLQuantizationType.Q4_K))
    b, err = w.reshape(-1, 32), np.abs(ours - w).reshape(-1, 32)
    step = (b.max(axis=1) - np.minimum(b.min(axis=1), 0)) / 15
    big = np.abs(w.reshape(-1, 256)).max(axis=1).repeat(8) / 63 / 15 * 2  # a 6-bit scale of the largest
    assert np.all(err.max(axis=1) <= np.maximum(step, big) + 1e-6)
    assert np.all(ours[0] == 0) and np.allclose(ours[1, :256], 3.0, atol=3.0 / 63)
    with pytest.raises(ValueError, match="multiple of 256, got shape \\(2, 320\\)"):
        quantize_q4_k(np.zeros((2, 320), np.float32))


def test_q4_k_export_loads_and_matches_the_source(tmp_path):
    """A checkpoint with 256- and 512-wide rows as Q4_K: decodelab reads it, with logits about as
    far from the source's as Q4_1 (exact scales per 32 values) puts them."""
    from decodelab import testing
    from decodelab.formats.gguf import export as gguf_export
    shape = dict(arch="llama", hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=300, max_position_embeddings=128, tie_word_embeddings=False)
    cfg, tensors = testing.random_weights(shape, seed=4)
    folder = testing.write_hf_folder(str(tmp_path / "hf"), cfg, tensors)
    out = gguf_export.export(folder, str(tmp_path / "m.gguf"), "Q4_K")
    with GGUFFile(out) as g:
        types = {t.type.name for t in g.tensors.values() if len(t.shape) == 2}
    assert types == {"Q4_K"}
    ids = list(range(3, 40))
    ref = decodelab.load(folder).forward(ids)
    err = {}
    for t, path in (("Q4_K", out), ("Q4_1", gguf_export.export(folder, str(tmp_path / "m41.gguf"), "Q4_1"))):
        err[t] = np.sqrt(np.mean((decodelab.load(path, dtype="float32").forward(ids) - ref) ** 2))
    assert 0 < err["Q4_K"] < 1.5 * err["Q4_1"], err


@pytest.mark.parametrize("tensor_type", ["F32", "Q8_0"])
def test_gpt2_gguf_files_load_as_the_source(tmp_path, tensor_type):
    from decodelab import testing
    from decodelab.formats.gguf import export as gguf_export
    folder = testing.write_checkpoint(str(tmp_path / "hf"), "gpt2-tiny", byte_tokenizer=True)
    out = gguf_export.export(folder, str(tmp_path / "g.gguf"), tensor_type)
    ours = decodelab.load(out, dtype="float32")
    ref = decodelab.load(folder)
    assert (ours.config.arch, ours.config.n_layers, ours.config.vocab_size) == \
        (ref.config.arch, ref.config.n_layers, ref.config.vocab_size)
    ids = list(range(3, 40))
    np.testing.assert_allclose(ours.forward(ids), ref.forward(ids), atol={"F32": 1e-4, "Q8_0": 2e-2}[tensor_type],
                               rtol=0)


def _bpe_gguf(tmp_path, pre: str) -> str:
    """A GGUF file holding only a byte-level BPE tokenizer: the 256 byte symbols, and merges whose
    results depend on where the pre-tokenizer cuts: '3 4' first, then '1 2', '12 3', '4 5'."""
    from tokenizers import pre_tokenizers
    tokens = sorted(pre_tokenizers.ByteLevel.alphabet()) + ["34", "12", "123", "45"]
    w = gguf.GGUFWriter(str(tmp_path / f"{pre}.gguf"), "llama")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_merges(["3 4", "1 2", "12 3", "4 5"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(tmp_path / f"{pre}.gguf")


@pytest.mark.parametrize("pre,pieces", [
    ("gpt2", ["12", "34", "5"]),          # one digit run: '3 4' merges first
    ("smollm", ["1", "2", "3", "4", "5"]),  # every digit alone
    ("llama-bpe", ["123", "45"]),         # runs of up to three digits: '123' | '45'
    ("qwen2", ["1", "2", "3", "4", "5"]),   # one digit at a time
])
def test_pre_tokenizers_cut_where_llama_cpp_cuts(tmp_path, pre, pieces):
    with GGUFFile(_bpe_gguf(tmp_path, pre)) as g:
        tok = decodelab.formats.gguf.tokenizer.tokenizer_from_gguf(g)
    ids = tok.encode("12345")
    assert [tok.id_to_piece(i) for i in ids] == pieces
    assert tok.decode(tok.encode("(hello) 123\n\n  x")) == "(hello) 123\n\n  x"


def test_an_unknown_pre_tokenizer_is_named(tmp_path):
    with GGUFFile(_bpe_gguf(tmp_path, "kimi-k2")) as g:
        with pytest.raises(ValueError, match="GGUF pre-tokenizer 'kimi-k2' is not supported yet"):
            decodelab.formats.gguf.tokenizer.tokenizer_from_gguf(g)
