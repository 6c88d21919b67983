"""llama2.c checkpoints (Karpathy's run.c format, version 0): the header's config and each tensor's
offset in the file, checked against the file's size.

Examples:
    >>> import os
    >>> path = os.path.join(os.path.dirname(decodelab.__file__), "models", "stories260K", "stories260K.bin")
    >>> read_llama2c(path)[0].source
    'llama2c'
"""
from __future__ import annotations

import os
import struct
from typing import List, Tuple

from ..config import ModelConfig
from .hf import TensorEntry

__all__ = ["read_llama2c"]


LLAMA2C_HEADER = struct.Struct("<7i")


def read_llama2c(path: str) -> Tuple[ModelConfig, List[TensorEntry]]:
    """A llama2.c "v0" checkpoint's config and tensor table, checked against the file's size.

    The file is 7 int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
    negative vocab_size = untied classifier), then fp32 tensors in run.c order. Tensors are
    described per layer under Hugging Face Llama names, in place in the file; the two RoPE tables
    run.c stores are listed as ``llama2c.freq_cis_real`` and ``llama2c.freq_cis_imag`` (the engine
    computes RoPE and does not read them). Header values must lie in [1, limit]: dim up to 65536,
    hidden_dim 2^20, n_layers, n_heads and n_kv_heads 1024, vocab_size 2^24, seq_len 2^22.

    Args:
        path: the llama2.c checkpoint (a ``.bin`` file).

    Returns:
        ``(config, tensors)``: a ModelConfig (arch "llama", interleaved RoPE at base 10000, RMS norm
        eps 1e-5, BOS 1, EOS 2, source "llama2c") and one TensorEntry ``(name, "F32", shape, 0,
        offset, nbytes)`` per tensor, per layer, in file order.

    Raises:
        ValueError: the file is shorter than the 28-byte header, a header value is out of range,
            dim, n_heads and n_kv_heads do not give an even head size with n_kv_heads dividing
            n_heads, or the file's size is not the one the header implies (truncated, or not a v0
            checkpoint of this shape); the message names the file (and the tensor where one runs
            past the end).
        OSError: the file does not exist or cannot be read.

    Examples:
        >>> import os
        >>> path = os.path.join(os.path.dirname(decodelab.__file__), "models", "stories260K", "stories260K.bin")
        >>> config, tensors = read_llama2c(path)
        >>> config.n_layers, config.hidden_size, config.vocab_size, config.tie_word_embeddings
        (5, 64, 512, True)
        >>> len(tensors), tensors[1][:3]
        (49, ('model.layers.0.input_layernorm.weight', 'F32', [64]))
        >>> with open("short.bin", "wb") as f:
        ...     _ = f.write(b"llama")
        >>> read_llama2c("short.bin")
        Traceback (most recent call last):
        ...
        ValueError: short.bin: 5 bytes is too short for a llama2.c header (28 bytes)
    """
    size = os.path.getsize(path)
    if size < LLAMA2C_HEADER.size:
        raise ValueError(f"{path}: {size} bytes is too short for a llama2.c header ({LLAMA2C_HEADER.size} bytes)")
    with open(path, "rb") as f:
        dim, hidden, n_layers, n_heads, n_kv, vocab, seq_len = LLAMA2C_HEADER.unpack(f.read(LLAMA2C_HEADER.size))
    shared = vocab > 0
    vocab = abs(vocab)
    limits = {"dim": (dim, 1 << 16), "hidden_dim": (hidden, 1 << 20), "n_layers": (n_layers, 1024),
              "n_heads": (n_heads, 1024), "n_kv_heads": (n_kv, 1024), "vocab_size": (vocab, 1 << 24),
              "seq_len": (seq_len, 1 << 22)}
    for k, (v, hi) in limits.items():
        if not 1 <= v <= hi:
            raise ValueError(f"{path}: llama2.c header {k}={v} is outside [1, {hi}]")
    if dim % n_heads or n_heads % n_kv or (dim // n_heads) % 2:
        raise ValueError(f"{path}: llama2.c header dim={dim}, n_heads={n_heads}, n_kv_heads={n_kv} "
                         "must give an even head size and n_kv_heads dividing n_heads")
    hs = dim // n_heads
    kv_dim = n_kv * hs
    cfg = ModelConfig(arch="llama", n_layers=n_layers, hidden_size=dim, n_heads=n_heads, n_kv_heads=n_kv,
                      head_dim=hs, intermediate_size=hidden, vocab_size=vocab, max_position_embeddings=seq_len,
                      norm_eps=1e-5, rope_theta=10000.0, rope_interleaved=True, tie_word_embeddings=shared,
                      bos_token_id=1, eos_token_id=[2], source="llama2c")
    tensors: List[TensorEntry] = []
    offset = LLAMA2C_HEADER.size

    def take(name_fmt: str, per_layer_shape: List[int], layers: int = 0):
        nonlocal offset
        numel = 1
        for d in per_layer_shape:
            numel *= d
        for i in range(max(layers, 1)):
            name = name_fmt.format(i=i)
            nbytes = numel * 4
            if offset + nbytes > size:
                raise ValueError(f"{path}: tensor {name!r} needs bytes [{offset}, {offset + nbytes}) but the "
                                 f"file has {size} bytes; the checkpoint is truncated")
            tensors.append((name, "F32", list(per_layer_shape), 0, offset, nbytes))
            offset += nbytes

    p = "model.layers.{i}."
    take("model.embed_tokens.weight", [vocab, dim])
    take(p + "input_layernorm.weight", [dim], n_layers)
    take(p + "self_attn.q_proj.weight", [dim, dim], n_layers)
    take(p + "self_attn.k_proj.weight", [kv_dim, dim], n_layers)
    take(p + "self_attn.v_proj.weight", [kv_dim, dim], n_layers)
    take(p + "self_attn.o_proj.weight", [dim, dim], n_layers)
    take(p + "post_attention_layernorm.weight", [dim], n_layers)
    take(p + "mlp.gate_proj.weight", [hidden, dim], n_layers)
    take(p + "mlp.down_proj.weight", [dim, hidden], n_layers)
    take(p + "mlp.up_proj.weight", [hidden, dim], n_layers)
    take("model.norm.weight", [dim])
    take("llama2c.freq_cis_real", [seq_len, hs // 2])   # unused: RoPE is computed
    take("llama2c.freq_cis_imag", [seq_len, hs // 2])
    if not shared:
        take("lm_head.weight", [vocab, dim])
    if offset != size:
        raise ValueError(f"{path}: the header implies {offset} bytes but the file has {size}; "
                         "not a llama2.c v0 checkpoint of this shape")
    return cfg, tensors
