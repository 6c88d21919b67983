"""Model configuration: what the engine runs, read from config.json or a llama2.c header."""
from __future__ import annotations

import dataclasses
from typing import Any, Optional

from ._native import _core

SUPPORTED_ARCHITECTURES = {"LlamaForCausalLM": "llama", "GPT2LMHeadModel": "gpt2"}


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """The architecture of a loaded model, in the field's own names."""

    arch: str                      # "llama" or "gpt2"
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

    def to_core(self) -> "_core.ModelConfig":
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
    """Map a Hugging Face config.json onto ModelConfig, refusing what the engine does not run."""
    archs = cfg.get("architectures") or []
    model_type = cfg.get("model_type")
    arch = None
    for a in archs:
        arch = SUPPORTED_ARCHITECTURES.get(a, arch)
    if arch is None and model_type in ("llama", "gpt2") and not archs:
        arch = model_type
    if arch is None:
        got = archs[0] if archs else model_type
        raise ValueError(
            f"unknown architecture {got!r}; supported: {', '.join(sorted(SUPPORTED_ARCHITECTURES))}")
    bos_ids = _special_ids(cfg, "bos_token_id")
    bos = bos_ids[0] if bos_ids else None
    eos = _special_ids(cfg, "eos_token_id")
    if arch == "llama":
        act = cfg.get("hidden_act", "silu")
        if act != "silu":
            raise ValueError(f"Llama hidden_act {act!r} is not supported; supported: 'silu'")
        for flag in ("attention_bias", "mlp_bias"):
            if cfg.get(flag):
                raise ValueError(f"Llama with {flag}=true is not supported")
        rope = cfg.get("rope_parameters") or {}
        scaling = cfg.get("rope_scaling") or None
        rope_type = (scaling or {}).get("rope_type", (scaling or {}).get("type")) or rope.get("rope_type", "default")
        if rope_type not in ("default", None):
            raise ValueError(f"rope scaling {rope_type!r} is not supported; supported: 'default'")
        theta = rope.get("rope_theta", cfg.get("rope_theta", 10000.0))
        hidden = _int(cfg, "hidden_size")
        heads = _int(cfg, "num_attention_heads")
        if heads <= 0:
            raise ValueError(f"config.json 'num_attention_heads' must be > 0, got {heads}")
        return ModelConfig(
            arch="llama",
            n_layers=_int(cfg, "num_hidden_layers"),
            hidden_size=hidden,
            n_heads=heads,
            n_kv_heads=_int(cfg, "num_key_value_heads", heads),
            head_dim=_int(cfg, "head_dim", hidden // heads),
            intermediate_size=_int(cfg, "intermediate_size"),
            vocab_size=_int(cfg, "vocab_size"),
            max_position_embeddings=_int(cfg, "max_position_embeddings", 2048),
            norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
            rope_theta=float(theta),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            bos_token_id=bos,
            eos_token_id=eos,
        )
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
