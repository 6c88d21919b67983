"""Q4_K blocks from float32 weights with numpy, for the GGUF exporter (the gguf package quantizes
Q4_0 to Q8_0 but none of the k-quants). A 256-value super-block holds 8 sub-blocks of 32 values,
each with a 6-bit scale and a 6-bit min under two f16 factors, and 4-bit values:
x ~ d sc q - dmin mn. blocks.py (and gguf.quants.dequantize) decode what this writes.

Examples:
    >>> Q4_K_BLOCK_BYTES          # per 256 values: 4.5 bits a value
    144
"""
from __future__ import annotations

import numpy as np

__all__ = ["Q4_K_BLOCK_BYTES", "quantize_q4_k"]

Q4_K_BLOCK_BYTES = 144  # f16 d, f16 dmin, 12 bytes of scales and mins, 128 bytes of nibbles


def quantize_q4_k(w: np.ndarray) -> np.ndarray:
    """A float matrix as Q4_K blocks, each row quantized on its own.

    Each sub-block of 32 values spans [min(x, 0), max(x)] in 15 steps; the steps and mins are then
    rounded to 6 bits of their super-block's largest (the f16 factors d and dmin), and the values
    to the nearest of the 16 levels that gives. A row of the result is the row's super-blocks, in
    order, as ggml lays them out.

    Args:
        w: the matrix, shape (rows, cols) with cols a multiple of 256; converted to float32.

    Returns:
        A uint8 array of shape (rows, cols / 256 x 144): the bytes of a GGUF Q4_K tensor of
        ggml shape (cols, rows).

    Raises:
        ValueError: ``w`` is not 2-D or its rows' width is not a multiple of 256.

    Examples:
        >>> from decodelab.formats.gguf.blocks import dequantize
        >>> w = np.linspace(-1, 1, 512, dtype=np.float32).reshape(2, 256)
        >>> q = quantize_q4_k(w)
        >>> q.dtype, q.shape
        (dtype('uint8'), (2, 144))
        >>> back = dequantize(q, "Q4_K", (256, 2))                 # ggml order: innermost first
        >>> back.shape, bool(np.abs(back - w).max() < 0.05)
        ((2, 256), True)
        >>> quantize_q4_k(np.zeros((2, 100)))
        Traceback (most recent call last):
        ...
        ValueError: Q4_K needs rows whose width is a multiple of 256, got shape (2, 100)
    """
    w = np.asarray(w, dtype=np.float32)
    if w.ndim != 2 or w.shape[1] % 256:
        raise ValueError(f"Q4_K needs rows whose width is a multiple of 256, got shape {w.shape}")
    rows = w.shape[0]
    x = w.reshape(-1, 8, 32)
    lo = np.minimum(x.min(axis=2), 0.0)
    step = (x.max(axis=2) - lo) / 15
    d = (step.max(axis=1) / 63).astype(np.float16)
    dmin = ((-lo).max(axis=1) / 63).astype(np.float16)
    df, dminf = d.astype(np.float32)[:, None], dmin.astype(np.float32)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(df > 0, np.rint(step / df), 0).clip(0, 63).astype(np.uint8)
        mn = np.where(dminf > 0, np.rint(-lo / dminf), 0).clip(0, 63).astype(np.uint8)
        scale = (df * sc)[:, :, None]
        q = np.where(scale > 0, np.rint((x + (dminf * mn)[:, :, None]) / scale), 0).clip(0, 15).astype(np.uint8)
    n = x.shape[0]
    out = np.empty((n, Q4_K_BLOCK_BYTES), np.uint8)
    out[:, 0:2] = d.reshape(n, 1).view(np.uint8)
    out[:, 2:4] = dmin.reshape(n, 1).view(np.uint8)
    # Scales and mins 0-3 in the low 6 bits of bytes 0-3 and 4-7; 4-7 split: low nibbles in bytes
    # 8-11, top two bits in the spare bits of bytes 0-7.
    out[:, 4:8] = (sc[:, :4] & 63) | ((sc[:, 4:] >> 4) << 6)
    out[:, 8:12] = (mn[:, :4] & 63) | ((mn[:, 4:] >> 4) << 6)
    out[:, 12:16] = (sc[:, 4:] & 0x0F) | ((mn[:, 4:] & 0x0F) << 4)
    # Per 32 bytes: sub-block 2c in the low nibbles, 2c + 1 in the high ones.
    out[:, 16:] = (q[:, 0::2] | (q[:, 1::2] << 4)).reshape(n, 128)
    return out.reshape(rows, -1)
