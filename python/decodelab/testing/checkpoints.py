"""Checkpoints for tests and benchmarks.

``write_checkpoint`` writes deterministic random-initialised Hugging Face checkpoints of any
shape (the compute cost and numerics of a shape do not depend on training), one tensor at a time
(a 3B fp32 checkpoint is 12 GB; only one of its tensors is in memory at once), and
``convert_llama2c`` turns a llama2.c checkpoint into a Hugging Face Llama folder, permuting the
q/k rows from Meta's interleaved RoPE order to Hugging Face's rotate_half order.

``SHAPES`` names the shapes: published widths (gpt2-124m, llama-110m, qwen2.5-0.5b, qwen3-0.6b,
llama-3.2-1b, qwen2.5-3b, llama-3-8b, mistral-7b, phi-3-mini, pythia-160m, gemma-2-2b, gemma-3-1b)
and tiny ones for fast
tests (gpt2-tiny, llama-tiny, llama-tiny-tied, qwen2-tiny, qwen3-tiny, mistral-tiny, phi3-tiny,
pythia-tiny, gemma2-tiny, gemma3-tiny, llama3-tiny). Each is a dict of config.json keys plus
"arch" ("gpt2", "llama" or "gpt_neox") and, for the Llama family, "family" ("llama", "qwen2",
"qwen3", "mistral", "phi3", "gemma2", "gemma3"); a dict of the same form may be passed instead of
a name.

Examples:
    >>> import decodelab.testing
    >>> path = decodelab.testing.write_checkpoint("ckpt", "llama-tiny", byte_tokenizer=True)
    >>> model = decodelab.load(path)
    >>> model.config.vocab_size, model.config.n_layers, model.tokenizer is not None
    (512, 2, True)
"""
from __future__ import annotations

import itertools
import json
import os
import shutil
from typing import Dict, Optional

import numpy as np
from tqdm.auto import tqdm

from ..formats import llama2c

__all__ = ["SHAPES", "write_checkpoint", "write_hf_folder", "random_weights", "convert_llama2c", "byte_level_tokenizer",
           "meta_to_hf_rope_rows"]

SHAPES: Dict[str, dict] = {
    # GPT-2 small (124M parameters).
    "gpt2-124m": dict(arch="gpt2", n_layer=12, n_embd=768, n_head=12, vocab_size=50257, n_positions=1024),
    # Tiny GPT-2 with the real vocabulary, so the shared GPT-2 tokenizer applies.
    "gpt2-tiny": dict(arch="gpt2", n_layer=2, n_embd=64, n_head=4, vocab_size=50257, n_positions=128),
    # Llama ~110M with grouped-query attention (12 heads, 4 kv heads) and an untied head.
    "llama-110m": dict(arch="llama", hidden_size=768, intermediate_size=2048, num_hidden_layers=12,
                       num_attention_heads=12, num_key_value_heads=4, vocab_size=32000,
                       max_position_embeddings=1024, tie_word_embeddings=False),
    "llama-tiny": dict(arch="llama", hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, vocab_size=512,
                       max_position_embeddings=128, tie_word_embeddings=False),
    "llama-tiny-tied": dict(arch="llama", hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=1, vocab_size=512,
                            max_position_embeddings=128, tie_word_embeddings=True),
    # The Llama family at their published widths (config.json of each), and tiny ones for fast tests.
    "qwen2.5-0.5b": dict(arch="llama", family="qwen2", hidden_size=896, intermediate_size=4864,
                         num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2, vocab_size=151936,
                         max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6,
                         tie_word_embeddings=True),
    "qwen3-0.6b": dict(arch="llama", family="qwen3", hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                       num_attention_heads=16, num_key_value_heads=8, head_dim=128, vocab_size=151936,
                       max_position_embeddings=40960, rope_theta=1000000.0, rms_norm_eps=1e-6,
                       tie_word_embeddings=True),
    "llama-3.2-1b": dict(arch="llama", hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                         num_attention_heads=32, num_key_value_heads=8, head_dim=64, vocab_size=128256,
                         max_position_embeddings=131072, rope_theta=500000.0, tie_word_embeddings=True,
                         rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                       "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}),
    "qwen2.5-3b": dict(arch="llama", family="qwen2", hidden_size=2048, intermediate_size=11008,
                       num_hidden_layers=36, num_attention_heads=16, num_key_value_heads=2, vocab_size=151936,
                       max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6,
                       tie_word_embeddings=True),
    "llama-3-8b": dict(arch="llama", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                       num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                       max_position_embeddings=8192, rope_theta=500000.0, tie_word_embeddings=False),
    "mistral-7b": dict(arch="llama", family="mistral", hidden_size=4096, intermediate_size=14336,
                       num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8, vocab_size=32000,
                       max_position_embeddings=32768, sliding_window=4096, tie_word_embeddings=False),
    "qwen2-tiny": dict(arch="llama", family="qwen2", hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, vocab_size=512, max_position_embeddings=256,
                       rope_theta=1000000.0, tie_word_embeddings=True),
    "qwen3-tiny": dict(arch="llama", family="qwen3", hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=32, vocab_size=512,
                       max_position_embeddings=256, rope_theta=1000000.0, tie_word_embeddings=True),
    "mistral-tiny": dict(arch="llama", family="mistral", hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, vocab_size=512, max_position_embeddings=256,
                         sliding_window=24, tie_word_embeddings=False),
    "phi-3-mini": dict(arch="llama", family="phi3", hidden_size=3072, intermediate_size=8192, num_hidden_layers=32,
                       num_attention_heads=32, num_key_value_heads=32, vocab_size=32064,
                       max_position_embeddings=4096, original_max_position_embeddings=4096, sliding_window=2047,
                       tie_word_embeddings=False),
    "phi3-tiny": dict(arch="llama", family="phi3", hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, vocab_size=512, max_position_embeddings=256,
                      original_max_position_embeddings=256, sliding_window=40, tie_word_embeddings=False,
                      pad_token_id=0),
    "pythia-160m": dict(arch="gpt_neox", hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                        num_attention_heads=12, vocab_size=50304, max_position_embeddings=2048, rotary_pct=0.25),
    "pythia-tiny": dict(arch="gpt_neox", hidden_size=64, intermediate_size=256, num_hidden_layers=2,
                        num_attention_heads=4, vocab_size=512, max_position_embeddings=256, rotary_pct=0.25),
    "gemma-2-2b": dict(arch="llama", family="gemma2", hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
                       num_attention_heads=8, num_key_value_heads=4, head_dim=256, vocab_size=256000,
                       max_position_embeddings=8192, sliding_window=4096, rms_norm_eps=1e-6,
                       tie_word_embeddings=True),
    "gemma-3-1b": dict(arch="llama", family="gemma3", hidden_size=1152, intermediate_size=6912, num_hidden_layers=26,
                       num_attention_heads=4, num_key_value_heads=1, head_dim=256, vocab_size=262144,
                       max_position_embeddings=32768, sliding_window=512, rms_norm_eps=1e-6,
                       rope_theta=1000000.0, rope_local_base_freq=10000.0, tie_word_embeddings=True),
    "gemma2-tiny": dict(arch="llama", family="gemma2", hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, head_dim=32, vocab_size=512,
                        max_position_embeddings=256, sliding_window=24, rms_norm_eps=1e-6, tie_word_embeddings=True,
                        query_pre_attn_scalar=24, attn_logit_softcapping=0.5, final_logit_softcapping=0.6),
    "gemma3-tiny": dict(arch="llama", family="gemma3", hidden_size=64, intermediate_size=160, num_hidden_layers=3,
                        num_attention_heads=4, num_key_value_heads=1, head_dim=32, vocab_size=512,
                        max_position_embeddings=256, sliding_window=24, rms_norm_eps=1e-6, tie_word_embeddings=True,
                        rope_theta=1000000.0, rope_local_base_freq=100.0, sliding_window_pattern=2,
                        query_pre_attn_scalar=24),
    "llama3-tiny": dict(arch="llama", hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, vocab_size=512, max_position_embeddings=256,
                        rope_theta=500000.0, tie_word_embeddings=True,
                        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                      "high_freq_factor": 4.0, "original_max_position_embeddings": 32}),
}
# Hugging Face's names for each Llama-family member.
_FAMILY_ARCH = {"llama": ("LlamaForCausalLM", "llama"), "qwen2": ("Qwen2ForCausalLM", "qwen2"),
                "gemma2": ("Gemma2ForCausalLM", "gemma2"), "gemma3": ("Gemma3ForCausalLM", "gemma3_text"),
                "phi3": ("Phi3ForCausalLM", "phi3"),
                "qwen3": ("Qwen3ForCausalLM", "qwen3"), "mistral": ("MistralForCausalLM", "mistral")}


# The keys a shape dict must give, per arch (the rest have transformers' defaults).
_REQUIRED = {"gpt2": ("n_embd", "n_layer", "n_head", "vocab_size", "n_positions"),
             "llama": ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                       "intermediate_size", "vocab_size", "max_position_embeddings"),
             "gpt_neox": ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                          "vocab_size", "max_position_embeddings")}


def _config_and_shapes(shape: dict):
    s = dict(shape)
    if "arch" not in s:
        raise ValueError("a shape dict needs 'arch': 'gpt2', 'llama' or 'gpt_neox'")
    arch = s.pop("arch")
    missing = [k for k in _REQUIRED.get(arch, ()) if k not in s]
    if missing:
        raise ValueError(f"the {arch!r} shape lacks {', '.join(map(repr, missing))}")
    if arch == "gpt2":
        D, L, V, P = s["n_embd"], s["n_layer"], s["vocab_size"], s["n_positions"]
        H = s.get("n_inner") or 4 * D
        cfg = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": D, "n_layer": L,
               "n_head": s["n_head"], "n_positions": P, "n_ctx": P, "n_inner": None, "vocab_size": V,
               "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new", "bos_token_id": 50256,
               "eos_token_id": 50256, "tie_word_embeddings": True, "dtype": "float32"}
        shapes = {"transformer.wte.weight": (V, D), "transformer.wpe.weight": (P, D),
                  "transformer.ln_f.weight": (D,), "transformer.ln_f.bias": (D,)}
        for i in range(L):
            p = f"transformer.h.{i}."
            shapes.update({
                p + "ln_1.weight": (D,), p + "ln_1.bias": (D,),
                p + "attn.c_attn.weight": (D, 3 * D), p + "attn.c_attn.bias": (3 * D,),
                p + "attn.c_proj.weight": (D, D), p + "attn.c_proj.bias": (D,),
                p + "ln_2.weight": (D,), p + "ln_2.bias": (D,),
                p + "mlp.c_fc.weight": (D, H), p + "mlp.c_fc.bias": (H,),
                p + "mlp.c_proj.weight": (H, D), p + "mlp.c_proj.bias": (D,),
            })
        return cfg, shapes
    if arch == "gpt_neox":
        return _neox_config_and_shapes(s)
    if arch != "llama":
        raise ValueError(f"unknown arch {arch!r}; supported: 'gpt2', 'llama', 'gpt_neox'")
    family = s.pop("family", "llama")
    if family not in _FAMILY_ARCH:
        raise ValueError(f"unknown family {family!r}; supported: {', '.join(_FAMILY_ARCH)}")
    D, L, V = s.pop("hidden_size"), s.pop("num_hidden_layers"), s.pop("vocab_size")
    NH, KV, H = s.pop("num_attention_heads"), s.pop("num_key_value_heads"), s.pop("intermediate_size")
    hd = s.pop("head_dim", D // NH)
    cfg = {"architectures": [_FAMILY_ARCH[family][0]], "model_type": _FAMILY_ARCH[family][1], "hidden_size": D,
           "intermediate_size": H, "num_hidden_layers": L, "num_attention_heads": NH,
           "num_key_value_heads": KV, "head_dim": hd, "vocab_size": V,
           "max_position_embeddings": s.pop("max_position_embeddings"), "rms_norm_eps": s.pop("rms_norm_eps", 1e-5),
           "rope_theta": s.pop("rope_theta", 10000.0), "hidden_act": "silu",
           "tie_word_embeddings": s.pop("tie_word_embeddings", False), "bos_token_id": 1, "eos_token_id": 2,
           "attention_bias": s.pop("attention_bias", False), "dtype": "float32"}
    if family == "llama":
        cfg["mlp_bias"] = False
    if family in ("mistral", "phi3", "gemma2", "gemma3"):
        cfg["sliding_window"] = s.pop("sliding_window", None)
    if family in ("gemma2", "gemma3"):
        del cfg["hidden_act"]
        cfg["hidden_activation"] = "gelu_pytorch_tanh"
    cfg.update(s)  # the rest as given: rope_scaling, use_sliding_window, layer_types ...
    # Biases: Qwen2's q, k and v always; attention_bias adds q, k, v and o (Llama, Qwen3).
    bias = {"q", "k", "v"} if family == "qwen2" else set()
    if cfg["attention_bias"]:
        bias |= {"q", "k", "v", "o"}
    shapes = {"model.embed_tokens.weight": (V, D), "model.norm.weight": (D,)}
    for i in range(L):
        p = f"model.layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": (D,), p + "post_attention_layernorm.weight": (D,),
            p + "self_attn.q_proj.weight": (NH * hd, D), p + "self_attn.k_proj.weight": (KV * hd, D),
            p + "self_attn.v_proj.weight": (KV * hd, D), p + "self_attn.o_proj.weight": (D, NH * hd),
            p + "mlp.gate_proj.weight": (H, D), p + "mlp.up_proj.weight": (H, D),
            p + "mlp.down_proj.weight": (D, H),
        })
        if family == "phi3":  # fused, as Phi-3 stores them: [q | k | v] and [gate | up] rows
            for part in ("q", "k", "v"):
                del shapes[p + f"self_attn.{part}_proj.weight"]
            del shapes[p + "mlp.gate_proj.weight"], shapes[p + "mlp.up_proj.weight"]
            shapes[p + "self_attn.qkv_proj.weight"] = ((NH + 2 * KV) * hd, D)
            shapes[p + "mlp.gate_up_proj.weight"] = (2 * H, D)
        out = {"q": NH * hd, "k": KV * hd, "v": KV * hd, "o": D}
        shapes.update({p + f"self_attn.{b}_proj.bias": (out[b],) for b in sorted(bias)})
        if family in ("qwen3", "gemma3"):
            shapes.update({p + "self_attn.q_norm.weight": (hd,), p + "self_attn.k_norm.weight": (hd,)})
        if family in ("gemma2", "gemma3"):
            shapes.update({p + "pre_feedforward_layernorm.weight": (D,), p + "post_feedforward_layernorm.weight": (D,)})
    if not cfg["tie_word_embeddings"]:
        shapes["lm_head.weight"] = (V, D)
    return cfg, shapes


def _neox_config_and_shapes(s: dict):
    """GPT-NeoX as transformers' GPTNeoXForCausalLM names it: one fused query_key_value per layer."""
    D, L, V, NH, H = (s.pop(k) for k in ("hidden_size", "num_hidden_layers", "vocab_size", "num_attention_heads",
                                        "intermediate_size"))
    cfg = {"architectures": ["GPTNeoXForCausalLM"], "model_type": "gpt_neox", "hidden_size": D,
           "intermediate_size": H, "num_hidden_layers": L, "num_attention_heads": NH, "vocab_size": V,
           "max_position_embeddings": s.pop("max_position_embeddings"), "rotary_pct": s.pop("rotary_pct", 0.25),
           "rotary_emb_base": s.pop("rotary_emb_base", 10000), "layer_norm_eps": 1e-5, "hidden_act": "gelu",
           "use_parallel_residual": s.pop("use_parallel_residual", True), "tie_word_embeddings": False,
           "bos_token_id": 0, "eos_token_id": 2, "dtype": "float32"}
    cfg.update(s)
    shapes = {"gpt_neox.embed_in.weight": (V, D), "gpt_neox.final_layer_norm.weight": (D,),
              "gpt_neox.final_layer_norm.bias": (D,), "embed_out.weight": (V, D)}
    for i in range(L):
        p = f"gpt_neox.layers.{i}."
        for name, shape in (("input_layernorm", (D,)), ("post_attention_layernorm", (D,))):
            shapes[p + name + ".weight"] = shape
            shapes[p + name + ".bias"] = shape
        for name, out, inp in (("attention.query_key_value", 3 * D, D), ("attention.dense", D, D),
                               ("mlp.dense_h_to_4h", H, D), ("mlp.dense_4h_to_h", D, H)):
            shapes[p + name + ".weight"] = (out, inp)
            shapes[p + name + ".bias"] = (out,)
    return cfg, shapes


def write_hf_folder(out_dir: str, config: dict, tensors: Dict[str, np.ndarray], dtype: str = "float32",
                    shards: int = 1) -> str:
    """Write config.json and model.safetensors (or ``shards`` files plus an index) into a folder.

    The config is written with ``"dtype"`` set to ``dtype``; the tensors are cast to it. With
    shards > 1 the tensors are split, in order, into ``shards`` files of about equal size
    (model-00001-of-0000N.safetensors, ...) and model.safetensors.index.json maps each name to its
    file, as Hugging Face writes sharded checkpoints.

    Args:
        out_dir: the folder, created if needed; files already there are overwritten.
        config: the config.json contents.
        tensors: the weights by name, numpy arrays (float32 from ``random_weights``).
        dtype: the stored dtype, "float32", "float16" or "bfloat16" (rounded to nearest even); default "float32".
        shards: how many safetensors files, >= 1; default 1.

    Returns:
        ``out_dir``.

    Raises:
        ValueError: an unknown dtype, or shards below 1.

    Examples:
        >>> import os
        >>> import decodelab.testing
        >>> config, tensors = decodelab.testing.random_weights("llama-tiny")
        >>> decodelab.testing.write_hf_folder("sharded", config, tensors, dtype="float16", shards=2)
        'sharded'
        >>> sorted(os.listdir("sharded"))
        ['config.json', 'model-00001-of-00002.safetensors', 'model-00002-of-00002.safetensors',
         'model.safetensors.index.json']
        >>> decodelab.load("sharded").config.hidden_size
        64
    """
    return _write_folder(out_dir, config, {n: t.shape for n, t in tensors.items()}, tensors.items(), dtype, shards)


def _write_folder(out_dir: str, config: dict, shapes: Dict[str, tuple], tensors, dtype: str, shards: int) -> str:
    """write_hf_folder from ``shapes`` and an iterator of (name, fp32 array) in the same order:
    each array is written as it comes, so a generator's tensors are never all in memory."""
    if dtype not in _ST_DTYPES:
        raise ValueError(f"dtype must be float32, float16 or bfloat16, got {dtype!r}")
    if shards < 1:
        raise ValueError(f"shards must be >= 1, got {shards}")
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(dict(config, dtype=dtype), f, indent=2)
    if shards == 1:
        _stream_safetensors(os.path.join(out_dir, "model.safetensors"), shapes, tensors, dtype)
        return out_dir
    sizes = {n: int(np.prod(shp, dtype=np.int64)) for n, shp in shapes.items()}
    total = sum(sizes.values())
    groups, acc, cur = [[] for _ in range(shards)], 0, 0
    for n in shapes:
        groups[min(cur, shards - 1)].append(n)
        acc += sizes[n]
        if acc >= total * (cur + 1) / shards:
            cur += 1
    weight_map, it = {}, iter(tensors)
    for i, g in enumerate(groups):
        fname = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        _stream_safetensors(os.path.join(out_dir, fname), {n: shapes[n] for n in g}, itertools.islice(it, len(g)),
                            dtype)
        weight_map.update({n: fname for n in g})
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f, indent=2)
    return out_dir


def random_weights(shape, seed: int = 0, progress: bool = False):
    """Random weights of a shape: (config dict, {name: fp32 array}), deterministic in ``seed``.

    Norm weights are drawn around 1 (1 + 0.1 x N(0, 1)), every other tensor as 0.02 x N(0, 1), in
    Hugging Face's tensor names for the architecture.

    Args:
        shape: a name from SHAPES, or a dict in the same form.
        seed: the seed of numpy's default_rng; default 0.
        progress: show a tqdm bar over the tensors; default False.

    Returns:
        (config, tensors): the config.json contents and the float32 weights by name.

    Raises:
        ValueError: ``shape`` is a name not in SHAPES, or a dict with an unknown arch or family.

    Examples:
        >>> import decodelab.testing
        >>> config, tensors = decodelab.testing.random_weights("llama-tiny", seed=1)
        >>> config["model_type"], config["num_hidden_layers"], len(tensors)
        ('llama', 2, 21)
        >>> tensors["model.embed_tokens.weight"].shape, tensors["model.embed_tokens.weight"].dtype
        ((512, 64), dtype('float32'))
        >>> again = decodelab.testing.random_weights("llama-tiny", seed=1)[1]
        >>> all(np.array_equal(tensors[k], again[k]) for k in tensors)
        True
    """
    cfg, shapes = _spec(shape)
    return cfg, dict(_random_tensors(shapes, seed, progress))


def _spec(shape):
    """(config, {name: shape}) of a SHAPES name or a dict in the same form."""
    if isinstance(shape, str) and shape not in SHAPES:
        raise ValueError(f"unknown shape {shape!r}; known: {', '.join(SHAPES)}")
    return _config_and_shapes(SHAPES[shape] if isinstance(shape, str) else shape)


def _random_tensors(shapes: Dict[str, tuple], seed: int, progress: bool):
    """(name, fp32 array) for each of ``shapes`` in order, from one generator: norms around 1,
    the rest 0.02 x N(0, 1)."""
    rng = np.random.default_rng(seed)
    for name, shp in tqdm(shapes.items(), desc="random weights", unit="tensor", disable=not progress):
        if name.endswith(("norm.weight", "ln_1.weight", "ln_2.weight", "ln_f.weight", "layernorm.weight")):
            t = 1.0 + 0.1 * rng.standard_normal(shp, dtype=np.float32)
        else:
            t = 0.02 * rng.standard_normal(shp, dtype=np.float32)
        yield name, t.astype(np.float32)


_ST_DTYPES = {"float32": ("F32", 4), "float16": ("F16", 2), "bfloat16": ("BF16", 2)}


def _stored(t: np.ndarray, dtype: str) -> np.ndarray:
    """An fp32 array as safetensors stores ``dtype``: bfloat16 rounded to nearest even, as uint16."""
    if dtype == "float32":
        return np.ascontiguousarray(t, np.float32)
    if dtype == "float16":
        return t.astype(np.float16)
    u = np.ascontiguousarray(t, np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def _stream_safetensors(path: str, shapes: Dict[str, tuple], tensors, dtype: str) -> None:
    """One safetensors file written a tensor at a time: the header from ``shapes``, then each
    array of the ``tensors`` iterator ((name, fp32 array) in the same order) in ``dtype``."""
    code, size = _ST_DTYPES[dtype]
    header, at = {}, 0
    for name, shp in shapes.items():
        n = int(np.prod(shp, dtype=np.int64)) * size
        header[name] = {"dtype": code, "shape": list(shp), "data_offsets": [at, at + n]}
        at += n
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the data starts on 8 bytes, as safetensors writes it
    with open(path, "wb") as f:
        f.write(len(raw).to_bytes(8, "little"))
        f.write(raw)
        for name, t in tensors:
            if name not in shapes or tuple(t.shape) != tuple(shapes[name]):
                raise ValueError(f"{name}: shape {t.shape} differs from the header's {shapes.get(name)}")
            _stored(t, dtype).tofile(f)


def write_checkpoint(out_dir: str, shape="llama-tiny", *, seed: int = 0, dtype: str = "float32", shards: int = 1,
                     tokenizer_dir: Optional[str] = None, byte_tokenizer: bool = False,
                     progress: bool = False) -> str:
    """Write a random-initialised Hugging Face checkpoint of ``shape`` that ``decodelab.load`` reads.

    The weights are ``random_weights(shape, seed)``, written by ``write_hf_folder``. Without
    ``tokenizer_dir`` or ``byte_tokenizer`` the folder has no tokenizer: prompts must be token ids.

    Args:
        out_dir: the folder to write, created if needed.
        shape: a name from SHAPES or a dict in the same form; default "llama-tiny".
        seed: the weights' seed; default 0.
        dtype: the stored dtype, "float32", "float16" or "bfloat16"; default "float32".
        shards: how many safetensors files, >= 1; default 1.
        tokenizer_dir: a folder whose tokenizer files (tokenizer.json, vocab.json, merges.txt,
            tokenizer.bin, those that exist) are copied beside the weights; default None.
        byte_tokenizer: without ``tokenizer_dir``, write byte_level_tokenizer(vocab_size) as
            tokenizer.json, so that text prompts work (only for vocabularies of at least 257
            tokens; smaller ones get no tokenizer); default False.
        progress: tqdm bars; default False.

    Returns:
        ``out_dir``.

    Raises:
        ValueError: an unknown shape name, dtype or arch, or shards below 1.

    Examples:
        >>> import decodelab.testing
        >>> path = decodelab.testing.write_checkpoint("no_tokenizer", "llama-tiny")
        >>> model = decodelab.load(path)
        >>> model.tokenizer is None, model.forward([1, 2, 3]).shape
        (True, (3, 512))
        >>> decodelab.testing.write_checkpoint("other", "llama-huge")
        Traceback (most recent call last):
        ...
        ValueError: unknown shape 'llama-huge'; known: gpt2-124m, gpt2-tiny, ...
    """
    cfg, shapes = _spec(shape)
    _write_folder(out_dir, cfg, shapes, _random_tensors(shapes, seed, progress), dtype, shards)  # a tensor at a time
    if tokenizer_dir:
        for name in ("tokenizer.json", "vocab.json", "merges.txt", "tokenizer.bin"):
            src = os.path.join(tokenizer_dir, name)
            if os.path.exists(src):
                shutil.copy(src, os.path.join(out_dir, name))
    elif byte_tokenizer and cfg["vocab_size"] >= 257:
        byte_level_tokenizer(cfg["vocab_size"]).save(os.path.join(out_dir, "tokenizer.json"))
    return out_dir


def byte_level_tokenizer(vocab_size: int):
    """A ``tokenizers.Tokenizer`` for random checkpoints: one token per byte, no merges.

    One token per byte (GPT-2's byte-level alphabet, ids 0-255, token i is byte i), "<|endoftext|>"
    at 256, and unused "<|extra_N|>" tokens up to vocab_size. Any text round-trips; the ids mean
    nothing to random weights.

    Args:
        vocab_size: the vocabulary size, at least 257.

    Returns:
        The ``tokenizers.Tokenizer`` (save it with ``.save(path)`` as tokenizer.json).

    Raises:
        ValueError: vocab_size is below 257.

    Examples:
        >>> import decodelab.testing
        >>> tok = decodelab.testing.byte_level_tokenizer(300)
        >>> tok.get_vocab_size(), tok.encode("hé").ids, tok.decode(tok.encode("hé").ids)
        (300, [104, 195, 169], 'hé')
    """
    from tokenizers import Tokenizer as _T, decoders, models, pre_tokenizers

    if vocab_size < 257:
        raise ValueError(f"a byte-level tokenizer needs a vocabulary of at least 257 tokens, got {vocab_size}")
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet(), key=lambda ch: _BYTE_OF[ch])
    tok = _T(models.BPE(vocab={ch: i for i, ch in enumerate(alphabet)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<|endoftext|>"] + [f"<|extra_{i}|>" for i in range(vocab_size - 257)])
    return tok


def _bytes_to_unicode() -> Dict[str, int]:
    """GPT-2's printable stand-in for each byte, as a map from the character to the byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


_BYTE_OF = _bytes_to_unicode()


def meta_to_hf_rope_rows(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Reorder q/k projection rows from Meta's interleaved RoPE pairs to Hugging Face's rotate_half pairs.

    Within each head, rows (2i, 2i+1) of Meta's layout become rows (i, i + head_dim/2): the even
    rows first, then the odd ones.

    Args:
        w: a q or k projection weight, shape (n_heads x head_dim, in_features).
        n_heads: the heads it holds (the key/value heads for k under grouped-query attention).

    Returns:
        The reordered weight, same shape (a new array).

    Examples:
        >>> import decodelab.testing
        >>> w = np.arange(8.0).reshape(4, 2)  # one head of dimension 4: rows 0, 1, 2, 3
        >>> decodelab.testing.meta_to_hf_rope_rows(w, 1)[:, 0]  # rows 0, 2, 1, 3
        array([0., 4., 2., 6.])
    """
    out, dim = w.shape
    hd = out // n_heads
    return w.reshape(n_heads, hd // 2, 2, dim).transpose(0, 2, 1, 3).reshape(out, dim)


def convert_llama2c(checkpoint: str, out_dir: str, tokenizer: Optional[str] = None, progress: bool = False) -> str:
    """Convert a llama2.c checkpoint into a Hugging Face LlamaForCausalLM folder.

    The weights are kept in float32, the q/k rows reordered for rotate_half RoPE
    (``meta_to_hf_rope_rows``); BOS is 1 and EOS 2, as in llama2.c.

    Args:
        checkpoint: the llama2.c .bin file.
        out_dir: the folder to write, created if needed.
        tokenizer: a llama2.c tokenizer .bin to copy beside the weights as tokenizer.bin; default
            None: tokenizer.bin or tok{vocab_size}.bin beside the checkpoint, if there is one.
        progress: a tqdm bar over the tensors; default False.

    Returns:
        ``out_dir``.

    Examples:
        >>> import os
        >>> import decodelab.testing
        >>> from decodelab.loading import BUILTIN
        >>> decodelab.testing.convert_llama2c(BUILTIN["stories260K"], "stories_hf")  # finds tok512.bin beside it
        'stories_hf'
        >>> sorted(os.listdir("stories_hf"))
        ['config.json', 'model.safetensors', 'tokenizer.bin']
        >>> hf, bin_ = decodelab.load("stories_hf"), decodelab.load("stories260K")
        >>> bool(np.allclose(hf.forward([1, 403, 407]), bin_.forward([1, 403, 407]), atol=1e-4))
        True
    """
    cfg, entries = llama2c.read_llama2c(checkpoint)
    data = np.memmap(checkpoint, dtype=np.uint8, mode="r")
    tensors = {}
    for name, _dtype, shape, _file, offset, nbytes in tqdm(entries, desc="converting", unit="tensor",
                                                           disable=not progress):
        if name.startswith("llama2c."):
            continue
        t = np.frombuffer(data, dtype=np.float32, count=nbytes // 4, offset=offset).reshape(shape)
        if name.endswith("q_proj.weight"):
            t = meta_to_hf_rope_rows(t, cfg.n_heads)
        elif name.endswith("k_proj.weight"):
            t = meta_to_hf_rope_rows(t, cfg.n_kv_heads)
        tensors[name] = np.array(t, dtype=np.float32)
    hf = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": cfg.hidden_size,
          "intermediate_size": cfg.intermediate_size, "num_hidden_layers": cfg.n_layers,
          "num_attention_heads": cfg.n_heads, "num_key_value_heads": cfg.n_kv_heads, "head_dim": cfg.head_dim,
          "vocab_size": cfg.vocab_size, "max_position_embeddings": cfg.max_position_embeddings,
          "rms_norm_eps": cfg.norm_eps, "rope_theta": cfg.rope_theta, "hidden_act": "silu",
          "tie_word_embeddings": cfg.tie_word_embeddings, "bos_token_id": 1, "eos_token_id": 2,
          "attention_bias": False, "mlp_bias": False}
    write_hf_folder(out_dir, hf, tensors)
    if tokenizer is None:
        d = os.path.dirname(os.path.abspath(checkpoint))
        for name in ("tokenizer.bin", f"tok{cfg.vocab_size}.bin"):
            if os.path.exists(os.path.join(d, name)):
                tokenizer = os.path.join(d, name)
                break
    if tokenizer is not None:
        shutil.copy(tokenizer, os.path.join(out_dir, "tokenizer.bin"))
    return out_dir
