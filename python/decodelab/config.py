"""Model configuration: what the engine runs, read from config.json or a llama2.c header.

``from_hf_dict`` maps a Hugging Face config.json onto a ``ModelConfig`` (GGUF metadata and llama2.c
headers have their own readers in ``decodelab.formats``); a loaded model's is ``model.config``.
Architectures the engine does not run are refused by name.

Examples:
    >>> from decodelab.config import from_hf_dict
    >>> cfg = from_hf_dict({"architectures": ["Qwen2ForCausalLM"], "hidden_size": 64, "intermediate_size": 160,
    ...                     "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    ...                     "vocab_size": 512})
    >>> cfg.arch, cfg.family, cfg.head_dim, cfg.qkv_bias, cfg.max_position_embeddings
    ('llama', 'qwen2', 16, True, 32768)
"""
from __future__ import annotations

import dataclasses
import json
from typing import Any, Dict, Optional, Tuple

import numpy as np

from . import rope as rope_params
from ._native import _core

# Hugging Face architectures the engine runs, by family. The Llama family shares the engine's
# "llama" forward pass with the options each member needs (biases, q/k norms, sliding windows).
FAMILIES = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral", "Qwen2ForCausalLM": "qwen2",
            "Qwen3ForCausalLM": "qwen3", "Phi3ForCausalLM": "phi3", "GPT2LMHeadModel": "gpt2",
            "GPTNeoXForCausalLM": "gpt_neox", "Gemma2ForCausalLM": "gemma2", "Gemma3ForCausalLM": "gemma3"}
SUPPORTED_ARCHITECTURES = {a: f if f in ("gpt2", "gpt_neox") else "llama" for a, f in FAMILIES.items()}
_MODEL_TYPES = dict({f: f for f in FAMILIES.values()}, gemma3_text="gemma3")

__all__ = ["ModelConfig", "from_hf_dict", "load_json", "FAMILIES", "SUPPORTED_ARCHITECTURES"]


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """The architecture of a loaded model, in the field's own names (``model.config``).

    Frozen: change a field with ``dataclasses.replace``. ``to_core`` gives the engine's own config.

    Attributes:
        arch: the engine's forward pass: "llama" (also Mistral, Qwen2, Qwen3, Phi-3, Gemma 2 and 3),
            "gpt2" or "gpt_neox".
        n_layers: the number of transformer layers.
        hidden_size: the width of the residual stream.
        n_heads: query heads per layer.
        n_kv_heads: key/value heads per layer (fewer than n_heads: grouped-query attention); divides n_heads.
        head_dim: values per head.
        intermediate_size: the width of the MLP's hidden layer.
        vocab_size: the number of token ids.
        max_position_embeddings: the longest context the model takes (dynamic NTK RoPE: stretched by its
            factor).
        norm_eps: the epsilon of the RMSNorms or LayerNorms.
        rope_theta: the RoPE base (the same as ``rope.theta``); default 10000.0.
        rope_interleaved: RoPE rotates adjacent pairs of values (Meta's interleaved order, which llama2.c
            checkpoints and GGUF llama files keep) instead of the two halves of each head; default False.
        tie_word_embeddings: the output projection is the token embedding matrix; default False.
        bos_token_id: the beginning-of-sequence token id, or None (default).
        eos_token_id: the end-of-sequence token ids (a list), or None (default): generation stops at any of them.
        source: where the config came from: "hf" (config.json, the default), "gguf" or "llama2c".
        family: the model family: "llama", "mistral", "qwen2", "qwen3", "phi3", "gpt2", "gpt_neox", "gemma2"
            or "gemma3"; default "": the same as ``arch``.
        qkv_bias: the q, k, v projections have biases (Qwen2; Llama's attention_bias); default False.
        o_bias: the output projection has a bias (Llama's attention_bias); default False.
        qk_norm: RMSNorm of each query and key head before RoPE (Qwen3, Gemma 3); default False.
        sliding_window: per layer, the keys a query sees (0: all of them), or None (default): no layer slides.
        rope: the ``decodelab.rope.Rope`` (scaling type and frequencies); default the unscaled RoPE.
        rotary_dim: GPT-NeoX: the values of each head RoPE rotates; default 0: all of them.
        parallel_residual: GPT-NeoX: x + attn(ln1(x)) + mlp(ln2(x)) instead of two residual steps; default True.
        qkv_per_head: GPT-NeoX: the fused q/k/v rows are grouped per head (Hugging Face), else [q | k | v]
            (GGUF); default True.
        gemma: Gemma 2 / 3's scalars (embed_scale, attn_scale, attn_softcap, final_softcap; 0: no soft cap),
            or None (default): not Gemma.
        rope_local: Gemma 3: the RoPE of the sliding-window layers, or None (default).
        generation_defaults: generation_config.json's sampling options (``loading.generation_defaults``): what
            ``generate()`` uses when given no sampling option, sampler or preset; default {}. Not compared by ==.

    Examples:
        >>> from decodelab.config import from_hf_dict
        >>> cfg = from_hf_dict({"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 160,
        ...                     "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        ...                     "vocab_size": 512, "max_position_embeddings": 128, "eos_token_id": 2})
        >>> cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.eos_token_id, cfg.source
        (2, 4, 2, 16, [2], 'hf')
        >>> decodelab.load("stories260K").config.source
        'llama2c'
    """

    arch: str                      # "llama", "gpt2" or "gpt_neox" (the engine's forward pass)
    n_layers: int
    hidden_size: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int
    norm_eps: float
    rope_theta: float = 10000.0
    rope_interleaved: bool = False  # llama2.c checkpoints keep Meta's interleaved RoPE order
    tie_word_embeddings: bool = False
    bos_token_id: Optional[int] = None
    eos_token_id: Optional[list] = None
    source: str = "hf"             # "hf" or "llama2c"
    family: str = ""               # "llama", "mistral", "qwen2", "qwen3", "gpt2" (default: arch)
    qkv_bias: bool = False         # q, k, v projections with biases (Qwen2; Llama's attention_bias)
    o_bias: bool = False           # the output projection with a bias (Llama's attention_bias)
    qk_norm: bool = False          # RMSNorm of each query and key head before RoPE (Qwen3)
    sliding_window: Optional[Tuple[int, ...]] = None  # per layer: keys a query sees (0: all)
    rope: rope_params.Rope = rope_params.Rope()
    rotary_dim: int = 0            # GPT-NeoX: the values of each head RoPE rotates (0: all)
    parallel_residual: bool = True  # GPT-NeoX: x + attn(ln1(x)) + mlp(ln2(x))
    qkv_per_head: bool = True      # GPT-NeoX: fused rows per head (Hugging Face), else [q | k | v] (GGUF)
    gemma: Optional[dict] = None   # Gemma 2 / 3: embed_scale, attn_scale, attn_softcap, final_softcap
    rope_local: Optional[rope_params.Rope] = None  # Gemma 3: the sliding layers' RoPE
    # generation_config.json's sampling options (loading.generation_defaults): what generate()
    # uses when given no sampling option, sampler or preset.
    generation_defaults: dict = dataclasses.field(default_factory=dict, compare=False)

    def __post_init__(self):
        if not self.family:  # a GGUF, llama2.c or GPT-2 config: the family is the arch
            object.__setattr__(self, "family", self.arch)

    def to_core(self) -> "_core.ModelConfig":
        """The engine's own config (``_core.ModelConfig``), checked by the engine.

        Returns:
            The ``_core.ModelConfig``, its fields in the engine's names (``dim`` for hidden_size,
            ``hidden_dim`` for intermediate_size, ...).

        Raises:
            ValueError: if the engine refuses the shape (``_core.ModelConfig.validate``; e.g. n_kv_heads not
                dividing n_heads), the message naming the field and its value.
        """
        c = _core.ModelConfig()
        c.arch = self.arch
        c.n_layers = self.n_layers
        c.dim = self.hidden_size
        c.n_heads = self.n_heads
        c.n_kv_heads = self.n_kv_heads
        c.head_dim = self.head_dim
        c.hidden_dim = self.intermediate_size
        c.vocab_size = self.vocab_size
        c.max_position = self.max_position_embeddings
        c.norm_eps = self.norm_eps
        c.rope_theta = self.rope_theta
        c.rope_interleaved = self.rope_interleaved
        c.tie_word_embeddings = self.tie_word_embeddings
        c.qkv_bias = self.qkv_bias
        c.o_bias = self.o_bias
        c.qk_norm = self.qk_norm
        c.sliding_window = list(self.sliding_window or [])
        c.rope_inv_freq = list(self.rope.inv_freq or [])
        c.rope_attention_factor = self.rope.attention_factor
        c.rope_dynamic_factor = self.rope.dynamic_factor
        c.rope_original_max = self.rope.original_max
        c.rope_long_inv_freq = list(self.rope.long_inv_freq or [])
        c.rotary_dim = self.rotary_dim
        c.parallel_residual = self.parallel_residual
        c.qkv_per_head = self.qkv_per_head
        if self.gemma:
            c.sandwich_norms = c.gelu_gate = True
            c.norm_plus_one = self.gemma.get("norm_plus_one", True)  # GGUF files store 1 + w already
            c.embed_scale = self.gemma["embed_scale"]
            c.attn_scale = self.gemma["attn_scale"]
            c.attn_softcap = self.gemma["attn_softcap"]
            c.final_softcap = self.gemma["final_softcap"]
        if self.rope_local is not None:
            c.rope_local_inv_freq = list(self.rope_local.inv_freq)
        c.validate()
        return c


def _int(cfg: dict, key: str, default: Any = None) -> int:
    v = cfg.get(key, default)
    if v is None:
        raise ValueError(f"config.json lacks {key!r}")
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"config.json {key!r} must be an integer, got {v!r}")
    if not -2**31 <= v < 2**31:
        raise ValueError(f"config.json {key!r} = {v} is outside the 32-bit range the engine takes")
    return v


def _special_ids(cfg: dict, key: str) -> Optional[list]:
    """bos_token_id / eos_token_id: None, one id or a list of ids, each in the vocabulary."""
    v = cfg.get(key)
    if v is None:
        return None
    ids = v if isinstance(v, list) else [v]
    vocab = cfg.get("vocab_size")
    for t in ids:
        if isinstance(t, bool) or not isinstance(t, int):
            raise ValueError(f"config {key!r} must be a token id or a list of them, got {v!r}")
        if isinstance(vocab, int) and not 0 <= t < vocab:
            raise ValueError(f"config {key!r} {t} is outside the vocabulary [0, {vocab})")
    return ids


def from_hf_dict(cfg: dict) -> ModelConfig:
    """Map a Hugging Face config.json onto ModelConfig, refusing what the engine does not run.

    The family comes from ``architectures`` (or, without it, ``model_type``); defaults for missing
    keys are those of transformers' config classes (e.g. head_dim: hidden_size / heads, 128 for
    Qwen3, 256 for Gemma; max_position_embeddings: 2048 for Llama, 32768 for Qwen2 and Qwen3).

    Args:
        cfg: the config.json dict (as ``load_json`` reads it).

    Returns:
        The ``ModelConfig`` (``source="hf"``).

    Raises:
        ValueError: if the architecture is not one of ``SUPPORTED_ARCHITECTURES`` (the message lists them), a
            required key is missing or not an integer in the 32-bit range, a value is out of range (heads
            <= 0, odd head_dim, a token id outside the vocabulary, ...), or the config asks for an option the
            engine does not run (another activation, mlp_bias, unsupported RoPE scaling, ...), each naming the
            key and its value.

    Examples:
        >>> from decodelab.config import from_hf_dict
        >>> cfg = from_hf_dict({"architectures": ["GPT2LMHeadModel"], "n_embd": 64, "n_head": 4, "n_layer": 2,
        ...                     "vocab_size": 300})
        >>> cfg.arch, cfg.head_dim, cfg.intermediate_size, cfg.max_position_embeddings, cfg.tie_word_embeddings
        ('gpt2', 16, 256, 1024, True)
        >>> from_hf_dict({"architectures": ["BertModel"]})
        Traceback (most recent call last):
        ...
        ValueError: unknown architecture 'BertModel'; supported: GPT2LMHeadModel, ...
    """
    archs = cfg.get("architectures") or []
    model_type = cfg.get("model_type")
    family = None
    for a in archs:
        family = FAMILIES.get(a, family)
    if family is None and model_type in _MODEL_TYPES and not archs:
        family = _MODEL_TYPES[model_type]
    if family is None:
        got = archs[0] if archs else model_type
        raise ValueError(
            f"unknown architecture {got!r}; supported: {', '.join(sorted(SUPPORTED_ARCHITECTURES))}")
    arch = family if family in ("gpt2", "gpt_neox") else "llama"
    bos_ids = _special_ids(cfg, "bos_token_id")
    bos = bos_ids[0] if bos_ids else None
    eos = _special_ids(cfg, "eos_token_id")
    if arch == "llama":
        return _llama_family(cfg, family, bos, eos)
    if arch == "gpt_neox":
        return _gpt_neox(cfg, bos, eos)
    act = cfg.get("activation_function", "gelu_new")
    if act not in ("gelu_new", "gelu_pytorch_tanh"):
        raise ValueError(f"GPT-2 activation_function {act!r} is not supported; supported: 'gelu_new'")
    if cfg.get("scale_attn_by_inverse_layer_idx"):
        raise ValueError("GPT-2 with scale_attn_by_inverse_layer_idx=true is not supported")
    if cfg.get("scale_attn_weights") is False:
        raise ValueError("GPT-2 with scale_attn_weights=false is not supported")
    hidden = _int(cfg, "n_embd")
    heads = _int(cfg, "n_head")
    if heads <= 0:
        raise ValueError(f"config.json 'n_head' must be > 0, got {heads}")
    inner = cfg.get("n_inner")
    return ModelConfig(
        arch="gpt2",
        n_layers=_int(cfg, "n_layer"),
        hidden_size=hidden,
        n_heads=heads,
        n_kv_heads=heads,
        head_dim=hidden // heads,
        intermediate_size=int(inner) if inner is not None else 4 * hidden,
        vocab_size=_int(cfg, "vocab_size"),
        max_position_embeddings=_int(cfg, "n_positions", 1024),
        norm_eps=float(cfg.get("layer_norm_epsilon", 1e-5)),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", True)),
        bos_token_id=bos,
        eos_token_id=eos,
    )


def _sliding_windows(cfg: dict, family: str, n_layers: int) -> Optional[Tuple[int, ...]]:
    """Each layer's window as transformers sets it: Mistral's sliding_window on every layer; Qwen2
    and Qwen3 only with use_sliding_window, on the layers layer_types marks "sliding_attention"
    (by default those from max_window_layers on)."""
    if family == "llama":
        return None
    window = cfg.get("sliding_window", None if family == "phi3" else 4096)
    if family in ("qwen2", "qwen3") and not cfg.get("use_sliding_window", False):
        window = None
    if family in ("gemma2", "gemma3") and cfg.get("use_bidirectional_attention"):
        raise ValueError(f"{family} with use_bidirectional_attention=true is not supported")
    if window is None:
        return None
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"config.json 'sliding_window' must be an integer >= 1 or null, got {window!r}")
    if family in ("mistral", "phi3"):  # every layer slides
        if cfg.get("layer_types") is not None:
            raise ValueError(f"{family} with layer_types (alternating attention) is not supported")
        return (window,) * n_layers
    types = cfg.get("layer_types")
    if types is None and family in ("gemma2", "gemma3"):  # every n-th layer global, the rest sliding
        every = 2 if family == "gemma2" else _int(cfg, "sliding_window_pattern", 6)
        if every < 1:
            raise ValueError(f"config.json 'sliding_window_pattern' must be >= 1, got {every}")
        types = ["sliding_attention" if (i + 1) % every else "full_attention" for i in range(n_layers)]
    if types is None:
        first = _int(cfg, "max_window_layers", 28)
        types = ["sliding_attention" if i >= first else "full_attention" for i in range(n_layers)]
    if not isinstance(types, list) or len(types) != n_layers or \
            any(t not in ("sliding_attention", "full_attention") for t in types):
        raise ValueError(f"config.json 'layer_types' must list 'sliding_attention' or 'full_attention' for each "
                         f"of the {n_layers} layers, got {types!r}")
    windows = tuple(window if t == "sliding_attention" else 0 for t in types)
    return windows if any(windows) else None


def _llama_family(cfg: dict, family: str, bos: Optional[int], eos: Optional[list]) -> ModelConfig:
    """Llama, Mistral, Qwen2, Qwen3, Phi-3, Gemma 2 and Gemma 3: one forward pass with each family's options, defaults
    as transformers' config classes give them (Phi-3's fused q/k/v and gate/up matrices are read as
    row ranges of themselves, formats.split_fused)."""
    gemma = family in ("gemma2", "gemma3")
    act = cfg.get("hidden_activation", cfg.get("hidden_act")) if gemma else cfg.get("hidden_act", "silu")
    want = "gelu_pytorch_tanh" if gemma else "silu"
    if act != want and not (gemma and act is None):
        raise ValueError(f"{family} hidden_act {act!r} is not supported; supported: {want!r}")
    if cfg.get("mlp_bias"):
        raise ValueError(f"{family} with mlp_bias=true is not supported")
    attention_bias = bool(cfg.get("attention_bias", False))
    if family == "mistral" and attention_bias:
        raise ValueError("Mistral with attention_bias=true is not supported")
    hidden = _int(cfg, "hidden_size")
    heads = _int(cfg, "num_attention_heads")
    if heads <= 0:
        raise ValueError(f"config.json 'num_attention_heads' must be > 0, got {heads}")
    head_dim = cfg.get("head_dim")
    if head_dim is None:  # Qwen3's default is 128, Gemma's 256, the others' hidden / heads
        head_dim = 128 if family == "qwen3" else 256 if gemma else hidden // heads
    cfg = dict(cfg, head_dim=head_dim)
    n_layers = _int(cfg, "num_hidden_layers")
    max_pos = _int(cfg, "max_position_embeddings", {"qwen2": 32768, "qwen3": 32768, "mistral": 131072,
                                                     "gemma2": 8192, "gemma3": 131072}.get(family, 2048))
    head_dim = _int(cfg, "head_dim")
    if head_dim <= 0 or head_dim % 2:
        raise ValueError(f"config.json 'head_dim' must be even and > 0, got {head_dim}")
    rope_local = None
    if family == "gemma3":  # separate RoPE for global (full) and local (sliding) layers
        rope, rope_local = _gemma3_ropes(cfg, head_dim, max_pos)
    else:
        rope = rope_params.from_config(cfg, head_dim, max_pos, family)
    if rope.dynamic_factor:  # the context window dynamic NTK stretches max_position_embeddings to
        max_pos = min(int(max_pos * rope.dynamic_factor), 1 << 22)
    return ModelConfig(
        arch="llama",
        family=family,
        n_layers=n_layers,
        hidden_size=hidden,
        n_heads=heads,
        n_kv_heads=_int(cfg, "num_key_value_heads", heads),
        head_dim=head_dim,
        intermediate_size=_int(cfg, "intermediate_size"),
        vocab_size=_int(cfg, "vocab_size"),
        max_position_embeddings=max_pos,
        norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
        rope_theta=rope.theta,
        rope=rope,
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", gemma)),
        qkv_bias=family == "qwen2" or attention_bias,
        o_bias=attention_bias,
        qk_norm=family in ("qwen3", "gemma3"),
        sliding_window=_sliding_windows(cfg, family, n_layers),
        gemma=_gemma_options(cfg, family, hidden) if gemma else None,
        rope_local=rope_local,
        bos_token_id=bos,
        eos_token_id=eos,
    )


def _gpt_neox(cfg: dict, bos: Optional[int], eos: Optional[list]) -> ModelConfig:
    """GPT-NeoX (Pythia): LayerNorms and linear layers with biases, RoPE on a fraction of each head
    (rotary_pct / partial_rotary_factor), the exact GELU, a parallel residual by default."""
    act = cfg.get("hidden_act", "gelu")
    if act != "gelu":
        raise ValueError(f"GPT-NeoX hidden_act {act!r} is not supported; supported: 'gelu'")
    if cfg.get("attention_bias", True) is not True:
        raise ValueError("GPT-NeoX with attention_bias=false is not supported")
    hidden = _int(cfg, "hidden_size")
    heads = _int(cfg, "num_attention_heads")
    if heads <= 0 or hidden % heads:
        raise ValueError(f"config.json 'num_attention_heads' {heads} must divide hidden_size {hidden}")
    head_dim = hidden // heads
    params = cfg.get("rope_parameters") or {}
    pct = params.get("partial_rotary_factor", cfg.get("rotary_pct", 0.25)) if isinstance(params, dict) else None
    if isinstance(pct, bool) or not isinstance(pct, (int, float)) or not 0 < pct <= 1:
        raise ValueError(f"GPT-NeoX rotary_pct must be in (0, 1], got {pct!r}")
    rot = int(head_dim * pct)
    if rot < 2 or rot % 2:
        raise ValueError(f"GPT-NeoX rotates {rot} values per head (head size {head_dim} x rotary_pct {pct}); it "
                         "must be even and at least 2")
    max_pos = _int(cfg, "max_position_embeddings", 2048)
    theta = cfg.get("rotary_emb_base", 10000.0)
    rope = rope_params.from_config(cfg, rot, max_pos, "gpt_neox", default_theta=theta)
    if rope.dynamic_factor:
        max_pos = min(int(max_pos * rope.dynamic_factor), 1 << 22)
    return ModelConfig(
        arch="gpt_neox", family="gpt_neox", n_layers=_int(cfg, "num_hidden_layers"), hidden_size=hidden,
        n_heads=heads, n_kv_heads=heads, head_dim=head_dim, intermediate_size=_int(cfg, "intermediate_size"),
        vocab_size=_int(cfg, "vocab_size"), max_position_embeddings=max_pos,
        norm_eps=float(cfg.get("layer_norm_eps", 1e-5)), rope_theta=rope.theta, rope=rope,
        rotary_dim=rot if rot < head_dim else 0, parallel_residual=bool(cfg.get("use_parallel_residual", True)),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)), bos_token_id=bos, eos_token_id=eos)


def _number(cfg: dict, key: str, default):
    v = cfg.get(key, default)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
        raise ValueError(f"config.json {key!r} must be a number > 0 or null, got {v!r}")
    return float(v)


def _gemma_options(cfg: dict, family: str, hidden: int) -> dict:
    """Gemma 2 / 3's scalars, with their config classes' defaults: embeddings times sqrt(hidden),
    scores scaled by query_pre_attn_scalar^-0.5, Gemma 2's soft caps (50 on scores, 30 on logits)."""
    g2 = family == "gemma2"
    return {"embed_scale": float(np.float32(hidden ** 0.5)),
            "attn_scale": _number(cfg, "query_pre_attn_scalar", 256) ** -0.5,
            "attn_softcap": _number(cfg, "attn_logit_softcapping", 50.0 if g2 else None) or 0.0,
            "final_softcap": _number(cfg, "final_logit_softcapping", 30.0 if g2 else None) or 0.0}


def _gemma3_ropes(cfg: dict, head_dim: int, max_pos: int):
    """Gemma 3's two RoPEs: rope_parameters keyed by layer type (transformers 5), or rope_theta
    (global, default 1e6) with rope_scaling and rope_local_base_freq (local, default 1e4)."""
    params = cfg.get("rope_parameters") or {}
    if not isinstance(params, dict):
        raise ValueError("rope_parameters must be an object")
    if "full_attention" in params or "sliding_attention" in params:
        full = dict(params.get("full_attention") or {})
        local = dict(params.get("sliding_attention") or {})
        full.setdefault("rope_theta", 1_000_000.0)
        local.setdefault("rope_theta", 10_000.0)
    else:
        full = dict(cfg.get("rope_scaling") or {}, rope_theta=cfg.get("rope_theta", 1_000_000.0))
        local = {"rope_theta": cfg.get("rope_local_base_freq", 10_000.0)}
    rope = rope_params.from_config({"rope_parameters": full}, head_dim, max_pos, "gemma3")
    local_rope = rope_params.from_config({"rope_parameters": local}, head_dim, max_pos, "gemma3")
    if local_rope.rope_type != "default":
        raise ValueError("Gemma 3's sliding layers take the default RoPE only")
    inv = 1.0 / local_rope.theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    local_rope = rope_params.Rope("default", local_rope.theta, tuple(float(np.float32(v)) for v in inv))
    if rope.dynamic_factor or rope.long_inv_freq:
        raise ValueError(f"Gemma 3 with rope scaling {rope.rope_type!r} is not supported")
    return rope, local_rope


def load_json(path: str) -> Dict:
    """A JSON object from a file, or ValueError (not UTF-8, not JSON, nested too deep, not an object).

    Args:
        path: the JSON file (config.json, tokenizer_config.json, ...), UTF-8.

    Returns:
        The object, as a dict.

    Raises:
        ValueError: if the file is not UTF-8, not JSON or nested too deep, or holds something other than an
            object; the message names the file.
        OSError: if the file cannot be opened (FileNotFoundError where it does not exist).

    Examples:
        >>> from decodelab.config import load_json
        >>> with open("config.json", "w") as f:
        ...     _ = f.write('{"vocab_size": 512}')
        >>> load_json("config.json")
        {'vocab_size': 512}
        >>> with open("list.json", "w") as f:
        ...     _ = f.write("[1, 2]")
        >>> load_json("list.json")
        Traceback (most recent call last):
        ...
        ValueError: list.json: must hold a JSON object, got list
    """
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
        raise ValueError(f"{path}: invalid JSON ({type(e).__name__}: {e})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{path}: must hold a JSON object, got {type(value).__name__}")
    return value
