"""A GGUF file as a model: its metadata as the engine's config, its tensors under the engine's
(Hugging Face) names, for load() (its tokenizer: decodelab.formats.gguf.tokenizer). The
architectures in ARCHITECTURES, read as llama.cpp reads them (Gemma's fixed window patterns, RoPE
bases and query scales), except Phi-3's sliding window, which applies as in Hugging Face's model;
others are refused by name.

Tensors the engine reads as they are stay in the file's memory map: F32, F16, BF16 and ggml's block
formats (_core.BLOCK_DTYPES: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K), which the engine
repacks (4-bit layers into its int4 panels, exactly) or decodes a few rows at a time. The
exception is GPT-2's layer matrices: GGUF stores them (out, in) and the engine reads GPT-2's as
Hugging Face's Conv1D stores them, (in, out), so they are decoded to float32 (blocks.py) and
transposed into one scratch file that the engine maps, which load() removes once the engine holds
its own converted weights. llama.cpp's converter stores Llama's Q and K rows in Meta's
interleaved RoPE order, so the config says rope_interleaved, as for llama2.c files.

Examples:
    >>> from decodelab.testing import write_checkpoint
    >>> from decodelab.formats.gguf.export import export
    >>> from decodelab.formats.gguf.reader import GGUFFile
    >>> with GGUFFile(export(write_checkpoint("ckpt", "llama-tiny"), "m.gguf", "Q8_0")) as g:
    ...     config = config_from_gguf(g)
    ...     files, tensors, scratch = weight_table(g, config)
    >>> config.family, config.rope_interleaved, len(tensors), scratch
    ('llama', True, 21, None)
"""
from __future__ import annotations

import os
import tempfile
from typing import List, Optional, Tuple

import numpy as np

from ... import rope as rope_params
from ..._native import _core
from ...config import ModelConfig
from .. import hf
from . import blocks
from .reader import GGUFFile

__all__ = ["ARCHITECTURES", "config_from_gguf", "native_dtype", "weight_table"]

ARCHITECTURES = ("llama", "qwen2", "qwen3", "gemma2", "gemma3", "phi3", "gptneox", "gpt2")
_DIRECT = {"F32": "F32", "F16": "F16", "BF16": "BF16"}  # types the engine maps in place

# GGUF tensor names (llama.cpp's llama-arch.cpp) -> the engine's.
_GLOBAL = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
           "output.weight": "lm_head.weight"}
_LAYER = {"attn_norm.weight": "input_layernorm.weight", "attn_q.weight": "self_attn.q_proj.weight",
          "attn_k.weight": "self_attn.k_proj.weight", "attn_v.weight": "self_attn.v_proj.weight",
          "attn_output.weight": "self_attn.o_proj.weight", "ffn_norm.weight": "post_attention_layernorm.weight",
          "ffn_gate.weight": "mlp.gate_proj.weight", "ffn_up.weight": "mlp.up_proj.weight",
          "ffn_down.weight": "mlp.down_proj.weight", "attn_q.bias": "self_attn.q_proj.bias",
          "attn_k.bias": "self_attn.k_proj.bias", "attn_v.bias": "self_attn.v_proj.bias",
          "attn_output.bias": "self_attn.o_proj.bias", "attn_q_norm.weight": "self_attn.q_norm.weight",
          "attn_k_norm.weight": "self_attn.k_norm.weight"}


_GPT2_GLOBAL = {"token_embd.weight": "transformer.wte.weight", "position_embd.weight": "transformer.wpe.weight",
                "output_norm.weight": "transformer.ln_f.weight", "output_norm.bias": "transformer.ln_f.bias",
                "output.weight": "lm_head.weight"}
_GPT2_LAYER = {f"{src}.{kind}": f"{dst}.{kind}" for kind in ("weight", "bias") for src, dst in
               (("attn_norm", "ln_1"), ("ffn_norm", "ln_2"), ("attn_qkv", "attn.c_attn"),
                ("attn_output", "attn.c_proj"), ("ffn_up", "mlp.c_fc"), ("ffn_down", "mlp.c_proj"))}


_NEOX_GLOBAL = {"token_embd.weight": "gpt_neox.embed_in.weight", "output.weight": "embed_out.weight",
                "output_norm.weight": "gpt_neox.final_layer_norm.weight",
                "output_norm.bias": "gpt_neox.final_layer_norm.bias"}
_NEOX_LAYER = {f"{src}.{kind}": f"{dst}.{kind}" for kind in ("weight", "bias") for src, dst in
               (("attn_norm", "input_layernorm"), ("ffn_norm", "post_attention_layernorm"),
                ("attn_qkv", "attention.query_key_value"), ("attn_output", "attention.dense"),
                ("ffn_up", "mlp.dense_h_to_4h"), ("ffn_down", "mlp.dense_4h_to_h"))}


# Gemma 2's norms around the attention and the MLP (llama.cpp's names for its sandwich).
_GEMMA_LAYER = dict(_LAYER, **{"post_attention_norm.weight": "post_attention_layernorm.weight",
                               "ffn_norm.weight": "pre_feedforward_layernorm.weight",
                               "post_ffw_norm.weight": "post_feedforward_layernorm.weight"})


# Phi-3's fused q/k/v and [gate | up] matrices, split into row ranges by hf.split_fused.
_PHI3_LAYER = dict(_LAYER, **{"attn_qkv.weight": "self_attn.qkv_proj.weight",
                              "ffn_up.weight": "mlp.gate_up_proj.weight"})


def _engine_name(name: str, n_layers: int, family: str = "llama") -> Optional[str]:
    """The engine's name for GGUF tensor `name` of a model of this family (ModelConfig.family)."""
    top, layer, prefix = {"gpt2": (_GPT2_GLOBAL, _GPT2_LAYER, "transformer.h."),
                          "gpt_neox": (_NEOX_GLOBAL, _NEOX_LAYER, "gpt_neox.layers."),
                          "gemma2": (_GLOBAL, _GEMMA_LAYER, "model.layers."),
                          "gemma3": (_GLOBAL, _GEMMA_LAYER, "model.layers."),
                          "phi3": (_GLOBAL, _PHI3_LAYER, "model.layers.")}.get(
                              family, (_GLOBAL, _LAYER, "model.layers."))
    if name in top:
        return top[name]
    parts = name.split(".", 2)
    if len(parts) == 3 and parts[0] == "blk" and parts[1].isdigit() and int(parts[1]) < n_layers \
            and parts[2] in layer:
        return f"{prefix}{int(parts[1])}.{layer[parts[2]]}"
    return None


def _int(g: GGUFFile, key: str, default=None, lo: int = 1, hi: int = 1 << 24) -> int:
    v = g.metadata.get(key, default)
    if v is None:
        raise ValueError(f"{g.path}: GGUF metadata {key!r} is missing")
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or not lo <= int(v) <= hi:
        raise ValueError(f"{g.path}: GGUF metadata {key!r} must be an integer in [{lo}, {hi}], got {v!r}")
    return int(v)


def _float(g: GGUFFile, key: str, default: float, lo: float, hi: float) -> float:
    v = g.metadata.get(key, default)
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)) \
            or not lo <= float(v) <= hi:
        raise ValueError(f"{g.path}: GGUF metadata {key!r} must be a number in [{lo}, {hi}], got {v!r}")
    return float(v)


def config_from_gguf(g: GGUFFile) -> ModelConfig:
    """The model's config from a GGUF file's metadata, read as llama.cpp reads it.

    Reads ``general.architecture`` (one of ARCHITECTURES) and that architecture's keys (block
    count, embedding and feed-forward lengths, head counts, key length, context length, norm
    epsilon, RoPE base, dimension count and scaling, Gemma's soft caps and sliding window, Phi-3's
    sliding window), the vocabulary size from ``token_embd.weight``'s rows, and the BOS and EOS
    (and EOT) token ids. llama.cpp's defaults apply where a key is absent (head_count_kv =
    head_count, key_length = embedding_length / head_count, RoPE base 10000, norm epsilon 1e-5).

    Args:
        g: the open GGUFFile.

    Returns:
        A ModelConfig with ``source="gguf"``: arch "gpt2", "gpt_neox", or "llama" with ``family``
        the GGUF architecture (llama, qwen2, qwen3, gemma2, gemma3, phi3).

    Raises:
        ValueError: the architecture is not supported, a required key is missing, a value is not
            an integer or number in its range, the head counts do not divide evenly, value_length
            differs from key_length, the RoPE dimension count is partial (outside GPT-NeoX), the
            RoPE scaling is not none, linear, Llama 3's rope_freqs or Phi-3's longrope (or its
            factor tensors are malformed), token_embd.weight is missing or not (hidden, vocab), or
            the token list or vocab_size disagrees with it; the message names the file and the key
            or tensor.

    Examples:
        >>> import gguf
        >>> from decodelab.testing import write_checkpoint
        >>> from decodelab.formats.gguf.export import export
        >>> from decodelab.formats.gguf.reader import GGUFFile
        >>> with GGUFFile(export(write_checkpoint("ckpt", "llama-tiny"), "m.gguf", "Q8_0")) as g:
        ...     c = config_from_gguf(g)
        >>> c.arch, c.n_layers, c.hidden_size, c.n_heads, c.n_kv_heads, c.vocab_size, c.source
        ('llama', 2, 64, 4, 2, 512, 'gguf')
        >>> w = gguf.GGUFWriter("mamba.gguf", "mamba")
        >>> w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
        >>> with GGUFFile("mamba.gguf") as g:
        ...     config_from_gguf(g)
        Traceback (most recent call last):
        ...
        ValueError: mamba.gguf: GGUF architecture 'mamba' is not supported yet (supported: llama, qwen2, ...)
    """
    arch = g.metadata.get("general.architecture")
    if arch not in ARCHITECTURES:
        raise ValueError(f"{g.path}: GGUF architecture {arch!r} is not supported yet (supported: "
                         f"{', '.join(ARCHITECTURES)})")
    hidden = _int(g, f"{arch}.embedding_length", hi=1 << 16)
    heads = _int(g, f"{arch}.attention.head_count", hi=1024)
    kv = _int(g, f"{arch}.attention.head_count_kv", heads, hi=1024) if arch != "gpt2" else heads
    if heads % kv or (f"{arch}.attention.key_length" not in g.metadata and hidden % heads):
        raise ValueError(f"{g.path}: embedding_length {hidden}, head_count {heads} and head_count_kv {kv} do not "
                         "divide evenly")
    head_dim = _int(g, f"{arch}.attention.key_length", hidden // heads, hi=1024) if arch != "gpt2" else hidden // heads
    if arch != "gpt2" and _int(g, f"{arch}.attention.value_length", head_dim, hi=1024) != head_dim:
        raise ValueError(f"{g.path}: {arch}.attention.value_length differs from key_length {head_dim}")
    rot = _int(g, f"{arch}.rope.dimension_count", head_dim, hi=1 << 16) if arch != "gpt2" else head_dim
    if arch == "gptneox" and (rot < 2 or rot % 2 or rot > head_dim):
        raise ValueError(f"{g.path}: gptneox.rope.dimension_count {rot} must be even and in [2, {head_dim}]")
    if rot != head_dim and arch != "gptneox":
        raise ValueError(f"{g.path}: {arch}.rope.dimension_count {rot} differs from the head size {head_dim}; "
                         "partial rotary embeddings are not supported")
    if "token_embd.weight" not in g.tensors:
        raise ValueError(f"{g.path}: GGUF tensor 'token_embd.weight' is missing")
    emb = g.tensors["token_embd.weight"]
    if len(emb.shape) != 2 or emb.shape[0] != hidden:
        raise ValueError(f"{g.path}: token_embd.weight has shape {list(emb.shape)}, expected [{hidden}, vocab]")
    vocab = emb.shape[1]
    tokens = g.metadata.get("tokenizer.ggml.tokens")
    if tokens is not None and len(tokens) != vocab:
        raise ValueError(f"{g.path}: tokenizer.ggml.tokens has {len(tokens)} tokens but token_embd.weight "
                         f"has {vocab} rows")
    if f"{arch}.vocab_size" in g.metadata and _int(g, f"{arch}.vocab_size", hi=1 << 24) != vocab:
        raise ValueError(f"{g.path}: {arch}.vocab_size {g.metadata[f'{arch}.vocab_size']} differs from the "
                         f"{vocab} rows of token_embd.weight")
    eos = [_int(g, k, lo=0, hi=vocab - 1) for k in ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id")
           if k in g.metadata]
    bos = _int(g, "tokenizer.ggml.bos_token_id", lo=0, hi=vocab - 1) \
        if "tokenizer.ggml.bos_token_id" in g.metadata else None
    if arch == "gptneox":  # llama.cpp's converter stores the fused q/k/v rows as [q | k | v]
        theta = _float(g, "gptneox.rope.freq_base", 10000.0, 1.0, 1e12)
        return ModelConfig(arch="gpt_neox", family="gpt_neox", n_layers=_int(g, "gptneox.block_count", hi=1024),
                           hidden_size=hidden, n_heads=heads, n_kv_heads=heads, head_dim=head_dim,
                           intermediate_size=_int(g, "gptneox.feed_forward_length", 4 * hidden, hi=1 << 20),
                           vocab_size=vocab, max_position_embeddings=_int(g, "gptneox.context_length", hi=1 << 22),
                           norm_eps=_float(g, "gptneox.attention.layer_norm_epsilon", 1e-5, 1e-12, 1.0),
                           rope_theta=theta, rope=rope_params.Rope("default", theta),
                           rotary_dim=rot if rot < head_dim else 0,
                           parallel_residual=bool(g.metadata.get("gptneox.use_parallel_residual", True)),
                           qkv_per_head=False, tie_word_embeddings="output.weight" not in g.tensors,
                           bos_token_id=bos, eos_token_id=sorted(set(eos)) or None, source="gguf")
    if arch == "gpt2":
        return ModelConfig(arch="gpt2", n_layers=_int(g, "gpt2.block_count", hi=1024), hidden_size=hidden,
                           n_heads=heads, n_kv_heads=heads, head_dim=head_dim,
                           intermediate_size=_int(g, "gpt2.feed_forward_length", 4 * hidden, hi=1 << 20),
                           vocab_size=vocab, max_position_embeddings=_int(g, "gpt2.context_length", hi=1 << 22),
                           norm_eps=_float(g, "gpt2.attention.layer_norm_epsilon", 1e-5, 1e-12, 1.0),
                           tie_word_embeddings="output.weight" not in g.tensors, bos_token_id=bos,
                           eos_token_id=sorted(set(eos)) or None, source="gguf")
    theta = _float(g, f"{arch}.rope.freq_base", 10000.0, 1.0, 1e12)
    n_layers = _int(g, f"{arch}.block_count", hi=1024)
    gemma, windows, rope_local = None, None, None
    if arch in ("gemma2", "gemma3"):
        # llama.cpp's reading: norms stored as 1 + w; scores scaled by head_dim^-0.5, or by
        # (hidden / heads)^-0.5 for the 27B layer counts; a sliding window on all but every 2nd
        # (Gemma 2) or 6th (Gemma 3) layer; Gemma 3's sliding layers at RoPE base 10000.
        big = n_layers == {"gemma2": 46, "gemma3": 62}[arch]
        gemma = {"embed_scale": float(np.float32(hidden ** 0.5)),
                 "attn_scale": (hidden // heads) ** -0.5 if big else head_dim ** -0.5,
                 "attn_softcap": _float(g, "gemma2.attn_logit_softcapping", 0.0, 0.0, 1e6) if arch == "gemma2" else 0.0,
                 "final_softcap": _float(g, f"{arch}.final_logit_softcapping", 0.0, 0.0, 1e6) if arch == "gemma2"
                 else 0.0, "norm_plus_one": False}
        window = _int(g, f"{arch}.attention.sliding_window", 0, lo=0, hi=1 << 22)
        every = 2 if arch == "gemma2" else 6
        windows = tuple(window if (i + 1) % every else 0 for i in range(n_layers)) if window else None
        if arch == "gemma3":
            local = (1.0 / 10000.0 ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)).astype(np.float32)
            rope_local = rope_params.Rope("default", 10000.0, tuple(float(v) for v in local))
    if arch == "phi3":  # every layer slides, as in Hugging Face's Phi-3 (llama.cpp turns the window off)
        window = _int(g, "phi3.attention.sliding_window", 0, lo=0, hi=1 << 22)
        windows = (window,) * n_layers if window else None
    return ModelConfig(arch="llama", family=arch, gemma=gemma, sliding_window=windows, rope_local=rope_local,
                       n_layers=n_layers,
                       hidden_size=hidden, n_heads=heads, n_kv_heads=kv, head_dim=head_dim,
                       intermediate_size=_int(g, f"{arch}.feed_forward_length", hi=1 << 20), vocab_size=vocab,
                       max_position_embeddings=_int(g, f"{arch}.context_length", hi=1 << 22),
                       norm_eps=_float(g, f"{arch}.attention.layer_norm_rms_epsilon", 1e-5, 1e-12, 1.0),
                       rope_theta=theta, rope=_rope(g, arch, theta, head_dim),
                       # llama.cpp's converter stores Llama's q and k rows in Meta's interleaved order
                       rope_interleaved=arch == "llama",
                       qkv_bias="blk.0.attn_q.bias" in g.tensors, o_bias="blk.0.attn_output.bias" in g.tensors,
                       qk_norm="blk.0.attn_q_norm.weight" in g.tensors,
                       tie_word_embeddings="output.weight" not in g.tensors, bos_token_id=bos,
                       eos_token_id=sorted(set(eos)) or None, source="gguf")


def _rope(g: GGUFFile, arch: str, theta: float, head_dim: int) -> rope_params.Rope:
    """RoPE from the metadata: linear scaling's factor, or Llama 3's per-frequency factors in the
    rope_freqs tensor (llama.cpp divides each frequency by its factor); YaRN is refused by name."""
    kind = g.metadata.get(f"{arch}.rope.scaling.type", "none")
    base = (1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)).astype(np.float32)
    if "rope_factors_long.weight" in g.tensors or "rope_factors_short.weight" in g.tensors:
        return _longrope(g, arch, theta, head_dim)
    if "rope_freqs.weight" in g.tensors:
        t = g.tensors["rope_freqs.weight"]
        if t.type.name != "F32" or list(t.shape) != [head_dim // 2]:
            raise ValueError(f"{g.path}: rope_freqs.weight must be F32 with {head_dim // 2} values, got "
                             f"{t.type.name} {list(t.shape)}")
        factors = blocks.dequantize_tensor(g, t).reshape(-1)
        if not np.all(np.isfinite(factors)) or np.any(factors <= 0):
            raise ValueError(f"{g.path}: rope_freqs.weight holds factors that are not finite and > 0")
        return rope_params.Rope("llama3", theta, tuple(float(v) for v in base / factors))
    if kind in ("none", None):
        return rope_params.Rope("default", theta)
    if kind == "linear":
        factor = _float(g, f"{arch}.rope.scaling.factor", 1.0, 1e-6, 1e6)
        return rope_params.Rope("linear", theta, tuple(float(v) for v in base / np.float32(factor)))
    raise ValueError(f"{g.path}: GGUF rope scaling {kind!r} is not supported (supported: none, linear, and "
                     "Llama 3's rope_freqs)")


def _factors(g: GGUFFile, name: str, head_dim: int) -> np.ndarray:
    t = g.tensors.get(name)
    if t is None:
        raise ValueError(f"{g.path}: {name} is missing (longrope needs rope_factors_long and rope_factors_short)")
    if t.type.name != "F32" or list(t.shape) != [head_dim // 2]:
        raise ValueError(f"{g.path}: {name} must be F32 with {head_dim // 2} values, got {t.type.name} {list(t.shape)}")
    f = blocks.dequantize_tensor(g, t).reshape(-1)
    if not np.all(np.isfinite(f)) or np.any(f <= 0):
        raise ValueError(f"{g.path}: {name} holds factors that are not finite and > 0")
    return f


def _longrope(g: GGUFFile, arch: str, theta: float, head_dim: int) -> rope_params.Rope:
    """Phi-3's longrope as Hugging Face runs it: the short factors up to the original context, the
    long ones for calls past it, cos and sin times the attention factor (llama.cpp instead picks
    one set by its context size)."""
    short, long_ = (_factors(g, f"rope_factors_{k}.weight", head_dim) for k in ("short", "long"))
    original = _int(g, f"{arch}.rope.scaling.original_context_length", hi=1 << 22)
    return rope_params.Rope(
        "longrope", theta, tuple(float(v) for v in rope_params.longrope_frequencies(short, theta, head_dim)),
        attention_factor=_float(g, f"{arch}.rope.scaling.attn_factor", 1.0, 1e-3, 1e3), original_max=original,
        long_inv_freq=tuple(float(v) for v in rope_params.longrope_frequencies(long_, theta, head_dim)))


_FOUR_BIT = ("Q4_0", "Q4_1", "Q4_K")


def native_dtype(g: GGUFFile) -> Optional[str]:
    """The weight dtype that keeps a file's precision in memory.

    Args:
        g: the open GGUFFile.

    Returns:
        "int4" where its layers hold 4-bit blocks (Q4_0, Q4_1 or Q4_K; its wider layers then keep
        8 bits), "int8" for other block formats, None for a file of F32, F16 and BF16 tensors only.

    Examples:
        >>> from decodelab.testing import write_checkpoint
        >>> from decodelab.formats.gguf.export import export
        >>> from decodelab.formats.gguf.reader import GGUFFile
        >>> folder = write_checkpoint("ckpt", "llama-tiny")
        >>> for kind in ("F32", "Q8_0", "Q4_0"):
        ...     with GGUFFile(export(folder, f"m-{kind}.gguf", kind)) as g:
        ...         print(kind, native_dtype(g))
        F32 None
        Q8_0 int8
        Q4_0 int4
    """
    types = {t.type.name for t in g.tensors.values()}
    if types & set(_FOUR_BIT):
        return "int4"
    return "int8" if types - set(_DIRECT) else None


def weight_table(g: GGUFFile, config: ModelConfig) -> Tuple[List[str], list, Optional[str]]:
    """The files and tensor table the engine maps for a GGUF file, under the engine's names.

    The file's own tensors stay in place (F32, F16, BF16 and the block formats in
    _core.BLOCK_DTYPES); GPT-2's layer matrices, and any tensor of a type only blocks.py decodes,
    are decoded to float32 (GPT-2's transposed to Conv1D's (in, out)) into one scratch file,
    each tensor on a 64-byte boundary. Tensors the engine does not read (rope_freqs, ...) are
    left out. Phi-3's fused matrices are split with decodelab.formats.hf.split_fused.

    Args:
        g: the open GGUFFile.
        config: its ModelConfig, from config_from_gguf.

    Returns:
        ``(files, tensors, scratch)``: ``files`` is ``[g.path]``, plus the scratch file where there
        is one; ``tensors`` one TensorEntry ``(name, dtype, shape, file index, offset, nbytes)``
        per tensor the engine reads, shape outermost first; ``scratch`` the scratch file's path for
        the caller to remove once the engine is built, or None. On an error the scratch file is
        removed.

    Raises:
        ValueError: a tensor has a type decodelab cannot read yet, or a Phi-3 fused matrix does
            not have the rows the config implies; the message names the file and the tensor.

    Examples:
        >>> from decodelab.testing import write_checkpoint
        >>> from decodelab.formats.gguf.export import export
        >>> from decodelab.formats.gguf.reader import GGUFFile
        >>> with GGUFFile(export(write_checkpoint("ckpt", "llama-tiny"), "m.gguf", "Q8_0")) as g:
        ...     files, tensors, scratch = weight_table(g, config_from_gguf(g))
        >>> files == ["m.gguf"], scratch
        (True, None)
        >>> [t[:4] for t in tensors if t[0] == "model.layers.0.self_attn.q_proj.weight"]
        [('model.layers.0.self_attn.q_proj.weight', 'Q8_0', [64, 64], 0)]
    """
    tensors = []
    scratch_path = None
    scratch = None
    offset = 0
    try:
        for name, t in g.tensors.items():
            target = _engine_name(name, config.n_layers, config.family)
            if target is None:
                continue  # a tensor the engine does not read (rope_freqs, ...)
            shape = [int(d) for d in t.shape[::-1]]
            # GPT-2's layer matrices, (out, in) here, as Conv1D's (in, out).
            conv1d = config.arch == "gpt2" and len(shape) == 2 and target.startswith("transformer.h.")
            if t.type.name in _DIRECT and not conv1d:
                tensors.append((target, _DIRECT[t.type.name], shape, 0, t.offset, t.nbytes))
                continue
            if t.type.name in _core.BLOCK_DTYPES and not conv1d:  # the engine reads the blocks
                tensors.append((target, t.type.name, shape, 0, t.offset, t.nbytes))
                continue
            if t.type.name not in blocks.DEQUANTIZERS:
                raise ValueError(f"{g.path}: tensor {name!r} has type {t.type.name}, which decodelab cannot read "
                                 f"yet (it reads {', '.join(blocks.DEQUANTIZERS)})")
            if scratch is None:
                fd, scratch_path = tempfile.mkstemp(prefix="decodelab-gguf-", suffix=".f32")
                scratch = os.fdopen(fd, "wb")
            values = blocks.dequantize_tensor(g, t)
            if conv1d:
                values = np.ascontiguousarray(values.T)
                shape = shape[::-1]
            pad = -offset % 64  # each tensor on a cache line, as the engine reads in place
            scratch.write(b"\0" * pad)
            offset += pad
            scratch.write(memoryview(np.ascontiguousarray(values)).cast("B"))  # no bytes copy
            tensors.append((target, "F32", shape, 1, offset, values.nbytes))
            offset += values.nbytes
        if scratch is not None:
            scratch.close()
    except BaseException:
        if scratch is not None:
            scratch.close()
            os.unlink(scratch_path)
        raise
    if config.family == "phi3":
        try:
            tensors = hf.split_fused(tensors, config)
        except ValueError as e:
            if scratch_path:
                os.unlink(scratch_path)
            raise ValueError(f"{g.path}: {e}") from None
    files = [g.path] + ([scratch_path] if scratch_path else [])
    return files, tensors, scratch_path
