"""The linear-layer kernels on awkward shapes, against numpy emulations of their stated arithmetic.

Every path `linear()` can take is reached: for fp32 and bf16 weights one row (matrix-vector),
from 2 rows up to `_core.gemm_min_rows(dtype)` (register-tiled) and from there on (oneDNN; both
sides of each threshold are tested; bf16's matmul rounds x to bf16 with bf16_matmul where the
CPU has native bf16); for int8 (16-bit activations) and w8a8 (7-bit activations) the panel
kernels at every row count, and int8's bf16 matmul (bf16_matmul, where the CPU has native bf16)
from `gemm_min_rows("int8")` rows, in tiles of 1 to 4 rows and chunks of 48; with
sizes that leave tails after every vector width, panel and 256-value block.
"""
import numpy as np
import pytest

from decodelab._native import _core

I8_BLOCK = 256


def _bf16(w):
    u = w.astype(np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16 << 16
    return u.astype(np.uint32).view(np.float32)


def _int8(w):
    """(integer weights, per-row scales): symmetric, scale = max|row| / 127."""
    mx = np.abs(w).max(axis=1)
    scale = np.where(mx > 0, mx / np.float32(127), np.float32(1)).astype(np.float32)
    return np.rint(w / scale[:, None]).astype(np.int64), scale


def _round_blocks(x, top, ftype):
    """Integer activations, one scale per block: q = round-half-even(x * (top / max)), the product
    taken in `ftype` (the kernels' own precision); scale = max / top."""
    q = np.zeros(x.shape, np.int64)
    scales = []
    for b0 in range(0, x.size, I8_BLOCK):
        blk = x[b0:b0 + I8_BLOCK]
        mx = np.float32(np.abs(blk).max())
        inv = ftype(top) / ftype(mx) if mx > 0 else ftype(0)
        q[b0:b0 + I8_BLOCK] = np.rint((blk.astype(ftype) * inv).astype(ftype))
        scales.append(mx / np.float32(top))
    return q, np.array(scales, np.float64)


def _int16_blocks(x):
    """The int8 kernel's activations: 16-bit fixed point, the product in float64."""
    return _round_blocks(x, 32767, np.float64)


def _u7_blocks(x):
    """w8a8 activations: q in [-63, 63], the product in fp32."""
    return _round_blocks(x, 63, np.float32)


def _reference(x, w, dtype):
    x64 = x.astype(np.float64)
    if dtype == "i8_matmul":
        if _core.bf16_matmul_native() and x.shape[0] >= _core.gemm_min_rows("int8"):
            # the bf16 matmul on bf16(x) and the int8 values, exact in bf16; the scales after
            wq, scale = _int8(w)
            return (_bf16(x).astype(np.float64) @ wq.T.astype(np.float64)) * scale
        dtype = "int8"  # fewer rows, or no native bf16: the int8 panels
    if dtype == "float32":
        return x64 @ w.astype(np.float64).T
    if dtype == "bf16_matmul" and _core.bf16_matmul_native() and x.shape[0] >= _core.gemm_min_rows("bfloat16"):
        # the matmul rounds x to bf16 too: products of bf16 pairs, summed in fp32
        return _bf16(x).astype(np.float64) @ _bf16(w).astype(np.float64).T
    if dtype in ("bfloat16", "bf16_matmul"):
        return x64 @ _bf16(w).astype(np.float64).T
    wq, scale = _int8(w)
    # int8 (16-bit blocks) and w8a8 (7-bit blocks), at every row count: each row's products exact in
    # integers per block, then scaled.
    blocks = _u7_blocks if dtype == "w8a8" else _int16_blocks
    y = np.zeros((x.shape[0], w.shape[0]))
    for t in range(x.shape[0]):
        q, xs = blocks(x[t])
        for b, b0 in enumerate(range(0, x.shape[1], I8_BLOCK)):
            y[t] += xs[b] * (wq[:, b0:b0 + I8_BLOCK] @ q[b0:b0 + I8_BLOCK])
    return y * scale


# The row counts on both sides of the fp32, bf16 and int8 thresholds between the tiles (panels)
# and the matmul.
GEMM_EDGES = sorted({_core.gemm_min_rows(d) + k for d in ("float32", "bfloat16", "int8") for k in (-1, 0)})


def test_gemm_thresholds():
    assert 2 < _core.gemm_min_rows("float32") <= _core.gemm_min_rows("bfloat16") < 1000
    assert 2 < _core.gemm_min_rows("int8") < 1000
    assert _core.gemm_min_rows("w8a8") == 2**31 - 1


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "bf16_matmul", "int8", "i8_matmul", "w8a8"])
@pytest.mark.parametrize("T", [1, 2, 3, 4, 7, 16, 17, 33] + GEMM_EDGES)
@pytest.mark.parametrize("n_in,n_out", [(7, 5), (16, 4), (64, 37), (255, 9), (256, 8), (300, 13), (777, 6),
                                        (300, 1001)])  # enough work for the threaded split
def test_linear_matches_its_arithmetic(dtype, T, n_in, n_out):
    rng = np.random.default_rng(n_in * 1000 + n_out * 10 + T)
    x = rng.standard_normal((T, n_in)).astype(np.float32)
    x[:, ::97] *= 40.0  # outliers, as real activations have
    w = (0.05 * rng.standard_normal((n_out, n_in))).astype(np.float32)
    if dtype == "bf16_matmul":  # bf16 weights, load(bf16_matmul=True): fp32 x below the matmul's rows
        got = _core.linear(x, w, "bfloat16", bf16_matmul=True)
    elif dtype == "i8_matmul":  # int8 weights, load(bf16_matmul=True)
        got = _core.linear(x, w, "int8", bf16_matmul=True)
    else:
        got = _core.linear(x, w, dtype)
    want = _reference(x, w, dtype)
    # fp32 sums in a different order: error grows with the sum of |terms|, not with the result.
    mag = np.abs(x).astype(np.float64) @ np.abs(w).astype(np.float64).T
    assert got.shape == (T, n_out)
    np.testing.assert_array_less(np.abs(got - want), 1e-5 * mag + 1e-7)


def test_int8_one_row_error_bound_against_exact_products():
    """The 16-bit activations cost at most half a step of each block's scale per value: far below
    the int8 weights' own rounding."""
    rng = np.random.default_rng(5)
    n_in, n_out = 1000, 64
    x = rng.standard_normal((1, n_in)).astype(np.float32)
    x[0, 123] = 300.0
    w = (0.05 * rng.standard_normal((n_out, n_in))).astype(np.float32)
    wq, scale = _int8(w)
    wr = wq * scale[:, None].astype(np.float64)
    exact = x.astype(np.float64) @ wr.T
    got = _core.linear(x, w, "int8")
    _, xs = _int16_blocks(x[0])
    step = np.repeat(xs, I8_BLOCK)[:n_in] / 2  # largest rounding error per value
    bound = np.abs(wr) @ step + 1e-5 * (np.abs(wr) @ np.abs(x[0]))
    np.testing.assert_array_less(np.abs(got - exact)[0], bound)
    weight_err = np.abs(x.astype(np.float64) @ (wr - w.astype(np.float64)).T)[0]
    assert np.median(np.abs(got - exact)[0]) < 0.05 * np.median(weight_err)


def test_int8_one_row_zero_and_tiny_activations():
    w = np.ones((3, 300), np.float32)
    np.testing.assert_array_equal(_core.linear(np.zeros((1, 300), np.float32), w, "int8"), np.zeros((1, 3)))
    x = np.zeros((1, 300), np.float32)
    x[0, 290] = 1e-30  # alone in the second block; the first block is all zeros
    np.testing.assert_allclose(_core.linear(x, w, "int8"), np.full((1, 3), 1e-30), rtol=1e-6)
    # A subnormal block: its scale (max / 32767) keeps only a few bits, so the result is right to
    # within a few fp32 subnormal steps rather than relatively; no overflow, no NaN.
    x[0, 290] = 1e-40
    np.testing.assert_allclose(_core.linear(x, w, "int8"), np.full((1, 3), 1e-40), rtol=0, atol=1e-41)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int8", "w8a8"])
@pytest.mark.parametrize("T", [1, 3, 16, 20, 100])
def test_fused_layers_match_separate_calls(dtype, T):
    """A Llama layer's q, k, v (and gate, up) run in one parallel region over all their rows; each
    output must be what its own call gives, bit for bit, at every row count."""
    rng = np.random.default_rng(T)
    x = rng.standard_normal((T, 300)).astype(np.float32)
    ws = [(0.05 * rng.standard_normal((n, 300))).astype(np.float32) for n in (37, 90, 250)]
    fused = _core.linear_many(x, ws, dtype)
    for w, y in zip(ws, fused):
        np.testing.assert_array_equal(y, _core.linear(x, w, dtype))
    with pytest.raises(ValueError, match="weight 1 does not fit"):
        _core.linear_many(x, [ws[0], np.zeros((3, 299), np.float32)], dtype)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("n_in", [7, 16, 64, 172, 300])
@pytest.mark.parametrize("n_out", [1, 3, 15, 16, 17, 37])
def test_decode_row_is_the_same_on_one_thread_and_many(dtype, n_in, n_out):
    """A small fp32 or bf16 layer decoded alone runs on the calling thread, sixteen rows at a time;
    beside a large one it runs in the threaded split, four rows at a time. Each output must be the
    same to the bit either way, so a model's logits do not depend on its size or the thread count."""
    rng = np.random.default_rng(n_in * 100 + n_out)
    x = rng.standard_normal((1, n_in)).astype(np.float32)
    w = rng.standard_normal((n_out, n_in)).astype(np.float32)
    big = rng.standard_normal((70000 // n_in + 1, n_in)).astype(np.float32)  # past the threaded split
    alone = _core.linear(x, w, dtype)
    np.testing.assert_array_equal(_core.linear_many(x, [w, big], dtype)[0], alone)
    mag = np.abs(x).astype(np.float64) @ np.abs(w).astype(np.float64).T
    np.testing.assert_array_less(np.abs(alone - _reference(x, w, dtype)), 1e-5 * mag + 1e-7)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int8", "w8a8"])
@pytest.mark.parametrize("n_in", [7, 300, 777])
def test_decode_row_does_not_depend_on_the_rows_beside_it(dtype, n_in):
    """A decode step may read several groups of output rows at once (two fp32 groups of 4, four
    int8 / w8a8 panels of 16, where AVX2 has no AVX-512); each output must still be what its own
    group alone gives, to the bit. The layer is split into its groups (the last one short) and each
    piece run on its own."""
    rng = np.random.default_rng(n_in)
    unit = 16 if dtype in ("int8", "w8a8") else 4
    x = rng.standard_normal((1, n_in)).astype(np.float32)
    for n_out in (9 * unit + 3, 70000 // n_in + 5):  # one thread; past the threaded split
        w = (0.05 * rng.standard_normal((n_out, n_in))).astype(np.float32)
        whole = _core.linear(x, w, dtype)
        pieces = np.concatenate([_core.linear(x, w[o:o + unit], dtype) for o in range(0, n_out, unit)], axis=1)
        np.testing.assert_array_equal(whole, pieces)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["int8", "w8a8"])
@pytest.mark.parametrize("T", [2, 3, 5, 16, 17, 64, 150])
@pytest.mark.parametrize("n_out", [37, 100, 1000])
def test_8bit_rows_do_not_depend_on_how_many_are_batched(dtype, T, n_out):
    """Batched decode and beams run 2..16 rows through the same per-row arithmetic as one row, so a
    sequence's logits do not change with the batch it shares a step with; the panel kernels run
    every row count, prompts included, so this holds at any length. One row alone reads four
    panels of 16 outputs at once where AVX2 has no VNNI (100 outputs: one such run and three single
    panels, the last one short; 1000: many, over both threads)."""
    rng = np.random.default_rng(T)
    x = rng.standard_normal((T, 777)).astype(np.float32)
    w = (0.05 * rng.standard_normal((n_out, 777))).astype(np.float32)
    together = _core.linear(x, w, dtype)
    alone = np.concatenate([_core.linear(x[t:t + 1], w, dtype) for t in range(T)])
    np.testing.assert_array_equal(together, alone)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int8", "w8a8"])
def test_linear_repeats_give_the_same_product(dtype):
    """benchmarks/bench_linear.py times `repeats` products on one stored copy of the weights; each
    repeat must compute the same thing, and a count below 1 is refused."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((70, 96)).astype(np.float32)
    w = (0.05 * rng.standard_normal((40, 96))).astype(np.float32)
    np.testing.assert_array_equal(_core.linear(x, w, dtype, 3), _core.linear(x, w, dtype))
    with pytest.raises(ValueError, match="repeats must be >= 1, got 0"):
        _core.linear(x, w, dtype, 0)


def test_linear_seconds_times_each_product():
    """bench_linear.py's timer: one time per product, each positive; bad counts and shapes refused."""
    rng = np.random.default_rng(6)
    x = rng.standard_normal((3, 96)).astype(np.float32)
    w = (0.05 * rng.standard_normal((40, 96))).astype(np.float32)
    s = _core.linear_seconds(x, w, "int8", 4)
    assert s.shape == (4,) and s.dtype == np.float64 and (s > 0).all() and (s < 10).all()
    with pytest.raises(ValueError, match="repeats must be >= 1, got 0"):
        _core.linear_seconds(x, w, "float32", 0)
    with pytest.raises(ValueError, match=r"x \(3, 96\) does not fit w \(40, 95\)"):
        _core.linear_seconds(x, np.ascontiguousarray(w[:, :95]), "float32", 1)


def test_w8a8_error_bound_and_cost_against_int8():
    """7-bit activations cost at most half a step of each block's scale (max / 63) per value; that
    is more than int8's 16-bit activations, and it is stated, not hidden."""
    rng = np.random.default_rng(6)
    n_in, n_out, T = 1000, 64, 20
    x = rng.standard_normal((T, n_in)).astype(np.float32)
    x[:, 123] = 30.0
    w = (0.05 * rng.standard_normal((n_out, n_in))).astype(np.float32)
    wq, scale = _int8(w)
    wr = wq * scale[:, None].astype(np.float64)
    exact = x.astype(np.float64) @ wr.T
    got = _core.linear(x, w, "w8a8")
    for t in range(T):
        _, xs = _u7_blocks(x[t])
        step = np.repeat(xs, I8_BLOCK)[:n_in] / 2
        bound = np.abs(wr) @ step + 1e-5 * (np.abs(wr) @ np.abs(x[t]))
        np.testing.assert_array_less(np.abs(got[t] - exact[t]), bound)
    err_a8 = np.abs(got - exact).mean()
    err_i8 = np.abs(_core.linear(x, w, "int8") - exact).mean()
    assert 0 < err_i8 < err_a8


def test_w8a8_zero_and_tiny_activations():
    w = np.ones((3, 300), np.float32)
    for T in (1, 20):
        np.testing.assert_array_equal(_core.linear(np.zeros((T, 300), np.float32), w, "w8a8"), np.zeros((T, 3)))
    x = np.zeros((1, 300), np.float32)
    x[0, 290] = 1e-30  # alone in the second block (the scalar tail of a 44-value block)
    np.testing.assert_allclose(_core.linear(x, w, "w8a8"), np.full((1, 3), 1e-30), rtol=1e-5)
    # A subnormal block maximum: 63 / max overflows fp32, so the kernel rounds that block in double.
    x[0, 290] = 1e-40
    x[0, 10] = -3e-41
    np.testing.assert_allclose(_core.linear(x, w, "w8a8"), np.full((1, 3), 1e-40 - 3e-41), rtol=0, atol=2e-42)


# The panel kernels at one row, a few and a prompt's many: a NaN or inf in a row's activations
# reaches that row's outputs as NaN and no other row's.
@pytest.mark.parametrize("dtype,T", [("int8", 1), ("int8", 4), ("int8", 40), ("w8a8", 1), ("w8a8", 4), ("w8a8", 40)])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_int8_carries_nan_and_inf_as_nan(dtype, bad, T):
    x = np.ones((T, 600), np.float32)
    x[-1, 400] = bad
    y = _core.linear(x, np.ones((2, 600), np.float32), dtype)
    assert np.isnan(y[-1]).all() and np.isfinite(y[:-1]).all()


def test_linear_rejects_bad_shapes_and_dtype():
    with pytest.raises(ValueError, match="does not fit w"):
        _core.linear(np.zeros((2, 5), np.float32), np.zeros((3, 4), np.float32))
    with pytest.raises(ValueError, match="dtype must be 'float32', 'bfloat16', 'int8', 'w8a8' or 'int4', got 'int3'"):
        _core.linear(np.zeros((1, 4), np.float32), np.zeros((3, 4), np.float32), "int3")


def test_attention_seconds_times_each_step():
    """bench_attention.py's timer: one time per decode step, each positive; bad shapes refused with
    the value and the limit."""
    s = _core.attention_seconds(2, 4, 2, 16, 40, "bfloat16", 3, 2)
    assert s.shape == (3,) and (s > 0).all() and (s < 10).all()
    with pytest.raises(ValueError, match="n_kv_heads must divide n_heads = 4, got 3"):
        _core.attention_seconds(2, 4, 3, 16, 40)
    with pytest.raises(ValueError, match="n_ctx must be >= 1, got 0"):
        _core.attention_seconds(2, 4, 2, 16, 0)
    with pytest.raises(ValueError, match="more than the limit of 4096 MiB"):
        _core.attention_seconds(64, 64, 64, 128, 1 << 20)


def _halves_or_fp32(*arrays):
    """The layer's steps and minima as int4 keeps them: rounded to halves where every one is then a
    normal half or zero, else fp32 as they are."""
    with np.errstate(over="ignore"):  # past the largest half: inf, and then fp32
        rounded = [a.astype(np.float16) for a in arrays]
    ok = all(np.all((a == 0) | (np.isfinite(r) & (np.abs(r) >= np.float16(2 ** -14)))) for a, r in zip(arrays, rounded))
    return [r.astype(np.float32) for r in rounded] if ok else list(arrays)


def _int4_reference(x, w):
    """numpy emulation of the int4 kernel's arithmetic: Q4_1 weights per block of 32 (min, 15 steps
    to the max, values rounded as ggml rounds, the step and min then stored as halves), activations
    to int8 per block (max / 127), the integer block sums exact, scaled per block."""
    T, n = x.shape
    nb = (n + 31) // 32
    pad = nb * 32 - n
    blocks = [w[:, 32 * b:min(n, 32 * b + 32)] for b in range(nb)]
    lo = np.stack([b.min(axis=1) for b in blocks], axis=1)
    d = ((np.stack([b.max(axis=1) for b in blocks], axis=1) - lo) / np.float32(15)).astype(np.float32)
    inv = np.where(d > 0, np.float32(1) / np.where(d > 0, d, 1), 0).astype(np.float32)
    q = np.minimum(15, np.floor((np.pad(w, ((0, 0), (0, pad))).reshape(len(w), nb, 32) - lo[..., None]) *
                                inv[..., None] + np.float32(0.5))).astype(np.int64)
    if pad:
        q[:, -1, 32 - pad:] = 0
    xb = np.pad(x, ((0, 0), (0, pad))).reshape(T, nb, 32)
    dx = (np.abs(xb).max(axis=2) / np.float32(127)).astype(np.float32)
    xq = np.rint(xb * np.where(dx > 0, np.float32(1) / np.where(dx > 0, dx, 1), 0)[..., None]).astype(np.int64)
    d, lo = _halves_or_fp32(d, lo)
    ints = np.einsum("onk,tnk->ton", q, xq).astype(np.float64)
    return (ints * (d[None] * dx[:, None]) + lo[None] * (dx * xq.sum(axis=2))[:, None]).sum(axis=2)


@pytest.mark.parametrize("T", [1, 2, 5, 17])
@pytest.mark.parametrize("n_in,n_out", [(96, 37), (576, 100), (70, 16), (33, 5)])
def test_int4_kernel_equals_its_numpy_emulation(T, n_in, n_out):
    """Random weights with edge cases among them (an all-zero row, a constant block, one huge value),
    inputs not a multiple of 32, rows not a multiple of 4: the kernel's sums equal the emulation's
    up to float rounding of the block sums' order; and every row is the same bits at any T."""
    rng = np.random.default_rng(T * 1000 + n_in)
    x = rng.standard_normal((T, n_in)).astype(np.float32)
    x[0, :min(32, n_in)] = 0.0  # an all-zero activation block
    w = (0.05 * rng.standard_normal((n_out, n_in))).astype(np.float32)
    w[0] = 0.0
    w[1, :min(32, n_in)] = 0.25
    w[2, n_in // 2] = 40.0
    y = _core.linear(x, w, "int4")
    ref = _int4_reference(x, w)
    np.testing.assert_allclose(y, ref, rtol=2e-5, atol=2e-5 * np.abs(ref).max())
    alone = np.concatenate([_core.linear(x[t:t + 1], w, "int4") for t in range(T)])
    np.testing.assert_array_equal(y, alone)


@pytest.mark.parametrize("scale", [1e6, 1e-7])
def test_int4_steps_that_do_not_fit_a_half_stay_fp32(scale):
    # Steps past the largest half, or lost to a subnormal one: the layer keeps fp32 steps, and the
    # kernel still equals the emulation (which checks the same rule).
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 96)).astype(np.float32)
    w = (scale * rng.standard_normal((20, 96))).astype(np.float32)
    ref = _int4_reference(x, w)
    np.testing.assert_allclose(_core.linear(x, w, "int4"), ref, rtol=2e-5, atol=2e-5 * np.abs(ref).max())


def test_int4_blocks_are_ggufs_q4_1_blocks():
    # The int4 rule is GGUF's Q4_1: a layer quantized here equals gguf's Q4_1 blocks of it read
    # natively, bit for bit.
    gguf = pytest.importorskip("gguf")
    rng = np.random.default_rng(9)
    w = (0.05 * rng.standard_normal((48, 256))).astype(np.float32)
    w[3, :32] = 0.5  # a constant block
    x = rng.standard_normal((4, 256)).astype(np.float32)
    blocks = gguf.quants.quantize(w, gguf.GGMLQuantizationType.Q4_1)
    np.testing.assert_array_equal(_core.linear(x, w, "int4"),
                                  _core.linear_blocks(x, "Q4_1", blocks.tobytes(), 48, "int4"))
