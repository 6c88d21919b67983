"""ggml's block formats decoded to float32 with numpy: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
Q4_K, Q5_K and Q6_K, each value rounded as ggml's reference dequantizers round it (products and
sums in float32, in their order), so the results equal gguf.quants.dequantize bit for bit.

Block layouts (ggml-common.h), all little-endian, f16 scales:
  Q8_0  d, int8 q[32]                           x = d q
  Q4_0  d, uint8 qs[16]                          x = d (q - 8); low nibbles are values 0-15, high 16-31
  Q4_1  d, m, qs[16]                             x = d q + m
  Q5_0  d, uint32 qh, qs[16]                     q = nibble | bit j of qh << 4; x = d (q - 16)
  Q5_1  d, m, qh, qs[16]                         x = d q + m
  Q4_K  d, dmin, scales[12], qs[128]             8 sub-blocks of 32, 6-bit scale and min each
  Q5_K  d, dmin, scales[12], qh[32], qs[128]     as Q4_K with a fifth bit from qh
  Q6_K  ql[128], qh[64], int8 scales[16], d      16 sub-blocks of 16, x = d scale (q - 32)

Examples:
    >>> sorted(DEQUANTIZERS) == sorted(["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1",
    ...                                 "Q4_K", "Q5_K", "Q6_K"])
    True
"""
from __future__ import annotations

from typing import Callable, Dict

import numpy as np

from .reader import TensorInfo

__all__ = ["DEQUANTIZERS", "dequantize", "dequantize_tensor"]


def _f16(b: np.ndarray) -> np.ndarray:
    """Little-endian f16 bytes (..., 2) as float32 (..., 1)."""
    return np.ascontiguousarray(b).view(np.float16).astype(np.float32)


def _blocks(raw: np.ndarray, block_bytes: int) -> np.ndarray:
    return raw.reshape(-1, block_bytes)


def _low_high(qs: np.ndarray) -> np.ndarray:
    """Nibbles of qs (n, 16) in value order: the 16 low nibbles, then the 16 high ones."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=1)


def _fifth_bits(qh: np.ndarray) -> np.ndarray:
    """Bit j of the little-endian uint32 qh (n, 4 bytes) for j = 0..31, as 0 or 16."""
    bits = qh.view("<u4").astype(np.uint32)  # (n, 1)
    return (((bits >> np.arange(32, dtype=np.uint32)) & 1) << 4).astype(np.uint8)


def _q8_0(raw):
    b = _blocks(raw, 34)
    return _f16(b[:, :2]) * b[:, 2:].view(np.int8).astype(np.float32)


def _q4_0(raw):
    b = _blocks(raw, 18)
    return _f16(b[:, :2]) * (_low_high(b[:, 2:]).astype(np.int8) - np.int8(8)).astype(np.float32)


def _q4_1(raw):
    b = _blocks(raw, 20)
    return _f16(b[:, :2]) * _low_high(b[:, 4:]).astype(np.float32) + _f16(b[:, 2:4])


def _q5_0(raw):
    b = _blocks(raw, 22)
    q = _low_high(b[:, 6:]) | _fifth_bits(b[:, 2:6])
    return _f16(b[:, :2]) * (q.astype(np.int8) - np.int8(16)).astype(np.float32)


def _q5_1(raw):
    b = _blocks(raw, 24)
    q = _low_high(b[:, 8:]) | _fifth_bits(b[:, 4:8])
    return _f16(b[:, :2]) * q.astype(np.float32) + _f16(b[:, 2:4])


def _k_scales(s: np.ndarray):
    """The 8 6-bit scales and mins of a Q4_K / Q5_K block from its 12 scale bytes (n, 12)."""
    sc = np.empty((s.shape[0], 8), np.uint8)
    mn = np.empty((s.shape[0], 8), np.uint8)
    sc[:, :4] = s[:, 0:4] & 63
    mn[:, :4] = s[:, 4:8] & 63
    sc[:, 4:] = (s[:, 8:12] & 0x0F) | ((s[:, 0:4] >> 6) << 4)
    mn[:, 4:] = (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)
    return sc.astype(np.float32), mn.astype(np.float32)


def _k_nibbles(qs: np.ndarray) -> np.ndarray:
    """qs (n, 128) as (n, 8, 32): per 32 bytes, the low nibbles form one sub-block, the high the next."""
    q = qs.reshape(-1, 4, 1, 32)
    return np.concatenate([q & 0x0F, q >> 4], axis=2).reshape(-1, 8, 32)


def _q4_k(raw):
    b = _blocks(raw, 144)
    d, dmin = _f16(b[:, 0:2]), _f16(b[:, 2:4])
    sc, mn = _k_scales(b[:, 4:16])
    q = _k_nibbles(b[:, 16:]).astype(np.float32)
    return ((d * sc)[:, :, None] * q - (dmin * mn)[:, :, None]).reshape(-1, 256)


def _q5_k(raw):
    b = _blocks(raw, 176)
    d, dmin = _f16(b[:, 0:2]), _f16(b[:, 2:4])
    sc, mn = _k_scales(b[:, 4:16])
    qh = b[:, 16:48]  # bit k of qh[l] is the fifth bit of value l of sub-block k
    high = ((qh[:, None, :] >> np.arange(8, dtype=np.uint8)[None, :, None]) & 1) << 4
    q = (_k_nibbles(b[:, 48:]) | high).astype(np.float32)
    return ((d * sc)[:, :, None] * q - (dmin * mn)[:, :, None]).reshape(-1, 256)


def _q6_k(raw):
    b = _blocks(raw, 210)
    ql, qh = b[:, :128].reshape(-1, 2, 64), b[:, 128:192].reshape(-1, 2, 32)
    sc = b[:, 192:208].view(np.int8).astype(np.float32).reshape(-1, 16)
    d = _f16(b[:, 208:210])
    # Per half of 128 values: four runs of 32, low / high nibbles of ql[0:32] and ql[32:64], with
    # two bits each from qh.
    lo = np.stack([ql[:, :, :32] & 0x0F, ql[:, :, 32:] & 0x0F, ql[:, :, :32] >> 4, ql[:, :, 32:] >> 4], axis=2)
    hi = np.stack([(qh >> s) & 3 for s in (0, 2, 4, 6)], axis=2)
    q = ((lo | (hi << 4)).astype(np.int8) - np.int8(32)).astype(np.float32)  # (n, 2, 4, 32)
    scale = (d * sc).reshape(-1, 2, 4, 2, 1)  # sub-blocks of 16: scale index 8 half + 2 run + l / 16
    return (scale * q.reshape(-1, 2, 4, 2, 16)).reshape(-1, 256)


DEQUANTIZERS: Dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "F32": lambda raw: raw.view("<f4").astype(np.float32),
    "F16": lambda raw: raw.view("<f2").astype(np.float32),
    "BF16": lambda raw: (raw.view("<u2").astype(np.uint32) << 16).view(np.float32),
    "Q8_0": _q8_0, "Q4_0": _q4_0, "Q4_1": _q4_1, "Q5_0": _q5_0, "Q5_1": _q5_1,
    "Q4_K": _q4_k, "Q5_K": _q5_k, "Q6_K": _q6_k,
}


def dequantize(raw: np.ndarray, type_name: str, shape) -> np.ndarray:
    """The float32 values of a tensor's bytes of a ggml type, shaped as numpy sees it.

    Each value is rounded as ggml's reference dequantizers round it, so the result equals
    gguf.quants.dequantize bit for bit; infinite and NaN scales decode as ggml's do, without warnings.

    Args:
        raw: the tensor's bytes, a uint8 array (or anything numpy reads as one) whose length is a
            whole number of the type's blocks, such as GGUFFile.data(name).
        type_name: the ggml type, one of the keys of DEQUANTIZERS: F32, F16, BF16, Q8_0, Q4_0,
            Q4_1, Q5_0, Q5_1, Q4_K, Q5_K or Q6_K.
        shape: the tensor's dimensions in ggml order (innermost first), as TensorInfo.shape gives
            them; their product must be the number of values the bytes hold.

    Returns:
        A float32 array of shape ``shape[::-1]``.

    Raises:
        ValueError: ``type_name`` is not a supported type, or ``shape`` does not match the number
            of values in ``raw``.

    Examples:
        >>> scale = np.array([0.5], np.float16).view(np.uint8)          # one Q8_0 block: f16 d, int8 q[32]
        >>> raw = np.concatenate([scale, np.arange(32, dtype=np.int8).view(np.uint8)])
        >>> x = dequantize(raw, "Q8_0", (32,))
        >>> x.dtype, x.shape, x[:4]
        (dtype('float32'), (32,), array([0. , 0.5, 1. , 1.5], dtype=float32))
        >>> dequantize(np.zeros(8, np.uint8), "F32", (1, 2)).shape      # 2 float32 values, numpy order
        (2, 1)
        >>> dequantize(raw, "IQ2_XS", (256,))
        Traceback (most recent call last):
        ...
        ValueError: tensor type IQ2_XS is not supported; supported: F32, F16, BF16, Q8_0, ...
    """
    if type_name not in DEQUANTIZERS:
        raise ValueError(f"tensor type {type_name} is not supported; supported: {', '.join(DEQUANTIZERS)}")
    with np.errstate(invalid="ignore", over="ignore"):  # inf and NaN scales decode as ggml's do
        out = DEQUANTIZERS[type_name](np.ascontiguousarray(raw, dtype=np.uint8))
    return out.reshape(tuple(int(d) for d in shape)[::-1])


def dequantize_tensor(f, t: TensorInfo) -> np.ndarray:
    """The float32 values of tensor ``t`` of the GGUFFile ``f``.

    Args:
        f: the open GGUFFile that holds the tensor.
        t: the tensor's TensorInfo, an entry of ``f.tensors``.

    Returns:
        A float32 array of numpy shape ``t.shape[::-1]`` (outermost first), a copy decoded from
        the map.

    Raises:
        ValueError: the tensor's type is not one dequantize supports.

    Examples:
        >>> from decodelab.testing import write_checkpoint
        >>> from decodelab.formats.gguf.export import export
        >>> from decodelab.formats.gguf.reader import GGUFFile
        >>> with GGUFFile(export(write_checkpoint("ckpt", "llama-tiny"), "m.gguf", "Q8_0")) as g:
        ...     w = dequantize_tensor(g, g.tensors["blk.0.ffn_up.weight"])
        >>> w.dtype, w.shape         # (intermediate_size, hidden_size), as in the Hugging Face folder
        (dtype('float32'), (160, 64))
    """
    return dequantize(f.data(t.name), t.type.name, t.shape)
