"""RoPE's scaled variants as transformers defines them (modeling_rope_utils.py).

The frequencies of "linear", "llama3" and "yarn" and YaRN's factor on cos and sin are computed
here in float32 in transformers' order; "dynamic" (NTK) depends on each call's length, so the
engine computes it from its factor; "longrope" (Phi-3) gives two sets, the long one for calls past
the original length. An unknown rope_type, or one missing a field it needs, is refused by name.

Examples:
    >>> from decodelab import rope
    >>> r = rope.from_config({"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, head_dim=8, max_pos=128)
    >>> r.rope_type, [round(f, 6) for f in r.inv_freq]
    ('linear', [0.5, 0.05, 0.005, 0.0005])
"""
from __future__ import annotations

import dataclasses
import math
from typing import Optional, Tuple

import numpy as np

__all__ = ["Rope", "from_config", "longrope_frequencies", "ROPE_TYPES"]

ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "llama3", "longrope")


@dataclasses.dataclass(frozen=True)
class Rope:
    """What the engine needs of a model's RoPE (``ModelConfig.rope``).

    Frequencies are per pair of rotated values, head_dim / 2 of them, the i-th
    1 / theta ** (2i / head_dim) before scaling; None means exactly these (the engine computes them).

    Attributes:
        rope_type: one of ``ROPE_TYPES``: "default", "linear", "dynamic", "yarn", "llama3" or "longrope";
            default "default".
        theta: the base of the frequencies (config.json's rope_theta), > 0; default 10000.0.
        inv_freq: the head_dim / 2 frequencies where they are scaled ("linear", "yarn", "llama3"; "longrope":
            the short ones), float32 values; default None: the unscaled ones.
        attention_factor: YaRN and longrope: cos and sin times this; default 1.0, no change.
        dynamic_factor: dynamic NTK: its factor (>= 1); default 0.0: not dynamic.
        original_max: dynamic NTK, longrope: the length past which they change; default 0 (unused).
        long_inv_freq: longrope: the frequencies past ``original_max``; default None (not longrope).

    Examples:
        >>> from decodelab.rope import Rope
        >>> Rope()
        Rope(rope_type='default', theta=10000.0, inv_freq=None, attention_factor=1.0, dynamic_factor=0.0,
        original_max=0, long_inv_freq=None)
    """

    rope_type: str = "default"
    theta: float = 10000.0
    inv_freq: Optional[Tuple[float, ...]] = None  # head_dim / 2 frequencies where they are scaled
    attention_factor: float = 1.0                 # YaRN: cos and sin times this
    dynamic_factor: float = 0.0                   # dynamic NTK: its factor (0: not dynamic)
    original_max: int = 0                         # dynamic NTK, longrope: the length past which they change
    long_inv_freq: Optional[Tuple[float, ...]] = None  # longrope: the frequencies past original_max


def _need(params: dict, key: str, rope_type: str):
    v = params.get(key)
    if v is None:
        raise ValueError(f"rope scaling {rope_type!r} needs {key!r} in the config's rope parameters")
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        raise ValueError(f"rope parameter {key!r} must be a number > 0, got {v!r}")
    return float(v)


def _base_inv_freq(base: float, dim: int) -> np.ndarray:
    """1 / base ** (arange(0, dim, 2) / dim), in float32 as transformers computes it."""
    exps = np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / np.float32(dim)
    return (np.float32(1.0) / (np.float32(base) ** exps)).astype(np.float32)


def _yarn(params: dict, base: float, dim: int, max_pos: int) -> Tuple[np.ndarray, float]:
    factor = params.get("factor")
    original = int(_need(params, "original_max_position_embeddings", "yarn"))
    factor = max_pos / original if factor is None else _need(params, "factor", "yarn")

    def get_mscale(scale, mscale=1.0):
        return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0

    attention_factor = params.get("attention_factor")
    if attention_factor is None:
        mscale, mscale_all_dim = params.get("mscale"), params.get("mscale_all_dim")
        if mscale and mscale_all_dim:
            attention_factor = get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)
        else:
            attention_factor = get_mscale(factor)
    beta_fast = params.get("beta_fast") or 32
    beta_slow = params.get("beta_slow") or 1

    def correction_dim(rotations):
        return (dim * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if params.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # transformers' guard against a zero-width ramp
    pos_freqs = np.float32(base) ** (np.arange(0, dim, 2).astype(np.float32) / np.float32(dim))
    extrapolation = np.float32(1.0) / pos_freqs
    interpolation = np.float32(1.0) / (np.float32(factor) * pos_freqs)
    ramp = np.clip((np.arange(dim // 2, dtype=np.float32) - np.float32(low)) / np.float32(high - low), 0, 1)
    extra_factor = np.float32(1) - ramp.astype(np.float32)
    inv = interpolation * (np.float32(1) - extra_factor) + extrapolation * extra_factor
    return inv.astype(np.float32), float(attention_factor)


def _llama3(params: dict, base: float, dim: int) -> np.ndarray:
    inv = _base_inv_freq(base, dim)
    factor = np.float32(_need(params, "factor", "llama3"))
    low_ff = _need(params, "low_freq_factor", "llama3")
    high_ff = _need(params, "high_freq_factor", "llama3")
    old = _need(params, "original_max_position_embeddings", "llama3")
    if high_ff == low_ff:
        raise ValueError("rope scaling 'llama3' needs high_freq_factor != low_freq_factor")
    low_wavelen, high_wavelen = old / low_ff, old / high_ff
    wavelen = np.float32(2 * math.pi) / inv
    scaled = np.where(wavelen > np.float32(low_wavelen), inv / factor, inv).astype(np.float32)
    smooth = ((np.float32(old) / wavelen - np.float32(low_ff)) / np.float32(high_ff - low_ff)).astype(np.float32)
    smoothed = (np.float32(1) - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < np.float32(high_wavelen)) & ~(wavelen > np.float32(low_wavelen))
    return np.where(medium, smoothed, scaled).astype(np.float32)


def _longrope(params: dict, base: float, dim: int, max_pos: int) -> Tuple[np.ndarray, np.ndarray, float]:
    original = params["original_max_position_embeddings"]
    factors = []
    for key in ("short_factor", "long_factor"):
        f = params.get(key)
        if not isinstance(f, list) or len(f) != dim // 2 or \
                any(isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0 for v in f):
            raise ValueError(f"rope scaling 'longrope' needs {key!r}: {dim // 2} numbers > 0")
        factors.append(np.asarray(f, dtype=np.float32))
    factor = params.get("factor")
    factor = max_pos / original if factor is None else _need(params, "factor", "longrope")
    attention_factor = params.get("attention_factor")
    if attention_factor is None:
        attention_factor = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original))
    short, long_ = (longrope_frequencies(f, base, dim) for f in factors)
    return short, long_, float(attention_factor)


def longrope_frequencies(factors: np.ndarray, base: float, dim: int) -> np.ndarray:
    """Longrope's frequencies for one set of per-frequency factors, in float32 as transformers.

    The i-th frequency is 1 / (factors[i] * base ** (2i / dim)).

    Args:
        factors: dim / 2 numbers > 0 (a config's short_factor or long_factor), array-like.
        base: the RoPE base (rope_theta), > 0.
        dim: the rotated values per head (even, > 0).

    Returns:
        np.ndarray: dim / 2 float32 frequencies.

    Examples:
        >>> from decodelab.rope import longrope_frequencies
        >>> longrope_frequencies([1.0, 2.0], 10000.0, 4).tolist()
        [1.0, 0.004999999888241291]
    """
    shape = np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / np.float32(dim)
    powers = np.float32(base) ** shape
    return (np.float32(1.0) / (np.asarray(factors, np.float32) * powers)).astype(np.float32)


def from_config(cfg: dict, head_dim: int, max_pos: int, family: str = "llama", default_theta: float = 10000.0) -> Rope:
    """The RoPE of a Hugging Face config: rope_parameters (transformers 5) or rope_scaling and rope_theta.

    rope_scaling (earlier configs) overrides rope_parameters key by key; the type is ``rope_type``
    or the older ``type``. "llama3", "yarn" and "longrope" take original_max_position_embeddings
    from their parameters, else the config, else ``max_pos`` (Phi-3: the config's, default 4096,
    and its older names "su" and "yarn" mean "longrope"). Missing "yarn" and "longrope" factors are
    max_pos / original_max_position_embeddings, as transformers sets them.

    Args:
        cfg: the config.json dict (rope_parameters, rope_scaling, rope_theta, original_max_position_embeddings
            are read).
        head_dim: the rotated values per head (GPT-NeoX rotates a part), even and > 0.
        max_pos: the model's max_position_embeddings, >= 1.
        family: the model family ("llama", "mistral", "qwen2", "qwen3", "phi3", "gpt_neox", "gemma2",
            "gemma3"); default "llama". Only "phi3" (its longrope names) and "gpt_neox" (partial_rotary_factor
            allowed) change anything.
        default_theta: the base where the config gives no rope_theta; default 10000.0.

    Returns:
        The ``Rope``.

    Raises:
        ValueError: if rope_parameters or rope_scaling is not an object, the type is not one of ``ROPE_TYPES``,
            a parameter the type needs is missing or not a number > 0 (dynamic: factor >= 1; llama3:
            high_freq_factor != low_freq_factor; longrope: head_dim / 2 factors > 0 per set), rope_theta is
            not a finite number > 0, or partial_rotary_factor != 1 outside GPT-NeoX.

    Examples:
        >>> from decodelab.rope import from_config
        >>> from_config({"rope_theta": 500000.0}, head_dim=8, max_pos=128)
        Rope(rope_type='default', theta=500000.0, inv_freq=None, attention_factor=1.0, dynamic_factor=0.0,
        original_max=0, long_inv_freq=None)
        >>> yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}
        >>> r = from_config({"rope_scaling": yarn}, head_dim=8, max_pos=128)
        >>> round(r.attention_factor, 4), [round(f, 6) for f in r.inv_freq]
        (1.1386, [1.0, 0.025, 0.0025, 0.00025])
        >>> from_config({"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}, 8, 128).dynamic_factor
        2.0
        >>> from_config({"rope_scaling": {"rope_type": "ntk", "factor": 2.0}}, 8, 128)
        Traceback (most recent call last):
        ...
        ValueError: rope scaling 'ntk' is not supported; supported: 'default', 'linear', 'dynamic', 'yarn', 'llama3',
        'longrope'
    """
    params = dict(cfg.get("rope_parameters") or {})
    scaling = cfg.get("rope_scaling") or {}
    if not isinstance(params, dict) or not isinstance(scaling, dict):
        raise ValueError("rope_parameters and rope_scaling must be objects")
    params.update(scaling)
    rope_type = params.get("rope_type", params.get("type")) or "default"
    if family == "phi3" and rope_type in ("su", "yarn"):  # Phi-3's older names for longrope
        rope_type = "longrope"
    if rope_type in ("llama3", "yarn", "longrope"):  # the pretraining length, as transformers finds it
        if family == "phi3":
            params["original_max_position_embeddings"] = cfg.get("original_max_position_embeddings", 4096)
        params.setdefault("original_max_position_embeddings", cfg.get("original_max_position_embeddings", max_pos))
        _need(params, "original_max_position_embeddings", rope_type)
    if rope_type not in ROPE_TYPES:
        raise ValueError(f"rope scaling {rope_type!r} is not supported; supported: "
                         + ", ".join(repr(t) for t in ROPE_TYPES))
    theta = params.get("rope_theta", cfg.get("rope_theta", default_theta))
    if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not theta > 0 or not math.isfinite(theta):
        raise ValueError(f"rope_theta must be a number > 0, got {theta!r}")
    theta = float(theta)
    if family != "gpt_neox" and params.get("partial_rotary_factor", 1.0) != 1.0:
        raise ValueError("partial_rotary_factor != 1 is not supported for this architecture")
    if rope_type == "default":
        return Rope("default", theta)
    if rope_type == "linear":
        inv = _base_inv_freq(theta, head_dim) / np.float32(_need(params, "factor", "linear"))
        return Rope("linear", theta, tuple(float(v) for v in inv))
    if rope_type == "dynamic":
        factor = _need(params, "factor", "dynamic")
        if factor < 1:
            raise ValueError(f"rope scaling 'dynamic' needs factor >= 1, got {factor}")
        return Rope("dynamic", theta, dynamic_factor=factor, original_max=max_pos)
    if rope_type == "llama3":
        return Rope("llama3", theta, tuple(float(v) for v in _llama3(params, theta, head_dim)))
    if rope_type == "longrope":
        short, long_, attention_factor = _longrope(params, theta, head_dim, max_pos)
        return Rope("longrope", theta, tuple(float(v) for v in short), attention_factor,
                    original_max=int(params["original_max_position_embeddings"]),
                    long_inv_freq=tuple(float(v) for v in long_))
    inv, attention_factor = _yarn(params, theta, head_dim, max_pos)
    return Rope("yarn", theta, tuple(float(v) for v in inv), attention_factor)
