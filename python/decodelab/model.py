"""The user-facing model: load(), Model.forward / prefill / decode / generate, Generation."""
from __future__ import annotations

import dataclasses
import os
from typing import List, Optional, Sequence, Union

import numpy as np

from . import formats
from ._native import _core
from .config import ModelConfig, from_hf_dict
from .tokenizer import Tokenizer, find_tokenizer, load_tokenizer

Prompt = Union[str, Sequence[int]]


@dataclasses.dataclass
class Generation:
    """The result of one ``generate`` call."""

    text: str                      # generated text, without the prompt
    token_ids: List[int]           # generated ids, the stopping EOS included
    finish_reason: str             # "stop" (an EOS id) or "length" (max_new_tokens)
    prompt_token_ids: List[int]
    prefill_seconds: float
    decode_seconds: float
    reused_prompt_tokens: int = 0  # prompt tokens found in the cache passed in, not prefilled again

    @property
    def prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def generated_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def decode_tokens_per_second(self) -> float:
        steps = max(len(self.token_ids) - 1, 0)
        return steps / self.decode_seconds if self.decode_seconds > 0 else float("nan")

    @property
    def prefill_tokens_per_second(self) -> float:
        return self.prompt_tokens / self.prefill_seconds if self.prefill_seconds > 0 else float("nan")


def _default_threads() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


class Model:
    """A causal language model held by the C++ engine. Create with :func:`decodelab.load`."""

    def __init__(self, engine, config: ModelConfig, tokenizer: Optional[Tokenizer], path: str):
        self._engine = engine
        self.config = config
        self.tokenizer = tokenizer
        self.path = path

    def __repr__(self) -> str:
        c = self.config
        return (f"Model({c.arch}, layers={c.n_layers}, hidden={c.hidden_size}, heads={c.n_heads}/"
                f"{c.n_kv_heads} kv, vocab={c.vocab_size}, context={c.max_position_embeddings}, "
                f"threads={self.threads}, path={self.path!r})")

    @property
    def threads(self) -> int:
        return self._engine.n_threads

    @threads.setter
    def threads(self, n: int) -> None:
        self._engine.n_threads = int(n)

    @property
    def weight_bytes(self) -> dict:
        """``mapped``: bytes of the memory-mapped files; ``converted``: bytes of fp32 copies made
        at load (f16/bf16 stored weights). fp32 checkpoints are used in place: converted is 0."""
        return {"mapped": self._engine.mapped_bytes, "converted": self._engine.owned_bytes}

    # -- token handling -------------------------------------------------------------------
    def _ids(self, prompt: Prompt) -> List[int]:
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise ValueError("this model has no tokenizer; pass token ids or load(..., tokenizer=PATH)")
            ids = self.tokenizer.encode(prompt)
        else:
            ids = [int(t) for t in prompt]
        if not ids:
            raise ValueError("the prompt is empty: at least one token is needed")
        V = self.config.vocab_size
        for i, t in enumerate(ids):
            if not 0 <= t < V:
                raise ValueError(f"token id {t} at index {i} is outside the vocabulary [0, {V})")
        ctx = self.config.max_position_embeddings
        if len(ids) > ctx:
            raise ValueError(f"the prompt has {len(ids)} tokens, more than the context window of {ctx}")
        return ids

    def _eos_ids(self, eos_token_id) -> List[int]:
        if eos_token_id is None:
            if self.config.eos_token_id:
                return list(self.config.eos_token_id)
            if self.tokenizer is not None and self.tokenizer.eos_token_id is not None:
                return [self.tokenizer.eos_token_id]
            return []
        if isinstance(eos_token_id, (int, np.integer)):
            return [int(eos_token_id)]
        return [int(t) for t in eos_token_id]

    # -- engine calls -----------------------------------------------------------------------
    def new_cache(self, capacity: Optional[int] = None, dtype: Optional[str] = None, grow: bool = False):
        """An empty KV cache for one sequence.

        ``capacity``: most tokens it may hold (default: the context window); going past it raises
        ValueError unless ``grow=True``, which doubles it up to the context window. Memory is
        taken in blocks of ``block_size`` tokens as the sequence grows. ``dtype``: "float32"
        (default) or "bfloat16" (half the bytes; logits move slightly, see the tests).
        """
        cap = self.config.max_position_embeddings if capacity is None else int(capacity)
        return self._engine.new_cache(cap, dtype or "float32", bool(grow))

    def memory_report(self) -> dict:
        """KV-cache memory of every live cache of this model, per cache dtype. Blocks shared by
        forks are counted once in ``bytes_in_use``; ``bytes_referenced`` counts them per sequence
        (the sum of the caches' nbytes); ``bytes_allocated`` includes free blocks kept for reuse."""
        return {p["dtype"]: p for p in self._engine.pool_stats()}

    def forward(self, token_ids: Sequence[int]) -> np.ndarray:
        """Full logits, shape (len, vocab), float32, computed without a persistent cache."""
        ids = self._ids(token_ids)
        cache = self._engine.new_cache(len(ids), "float32", False)
        return self._engine.forward(np.asarray(ids, dtype=np.int64), cache, True)

    def prefill(self, token_ids: Sequence[int], cache) -> np.ndarray:
        """Run tokens into ``cache``; returns the logits of the last position, shape (vocab,)."""
        ids = self._ids(token_ids)
        return self._engine.forward(np.asarray(ids, dtype=np.int64), cache, False)[0]

    def decode(self, token_id: int, cache) -> np.ndarray:
        """Run one token into ``cache``; returns its logits, shape (vocab,)."""
        if isinstance(token_id, bool) or not isinstance(token_id, (int, np.integer)):
            raise ValueError(f"decode takes one token id (int), got {token_id!r}")
        return self._engine.forward(np.asarray([int(token_id)], dtype=np.int64), cache, False)[0]

    def generate(self, prompt: Prompt, *, max_new_tokens: int = 128, temperature: float = 0.0,
                 eos_token_id: Union[None, int, Sequence[int]] = None, cache=None) -> Generation:
        """Generate a continuation of ``prompt`` (text or token ids).

        Decoding is greedy (``temperature=0``); sampling arrives with the sampler objects.
        ``eos_token_id``: None uses the model's EOS, an int or a list sets it, ``[]`` never stops
        on EOS. The whole loop runs in C++ with the GIL released; Ctrl-C stops it cleanly.

        ``cache``: continue from a KV cache. The longest common prefix of the cache's tokens and
        the prompt is kept and only the rest of the prompt is prefilled
        (``Generation.reused_prompt_tokens``); the cache is truncated to that prefix first. The
        cache ends holding the prompt and the generated tokens but the last (never fed back).
        """
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, (int, np.integer)):
            raise ValueError(f"max_new_tokens must be an integer >= 0, got {max_new_tokens!r}")
        if max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
        if not np.isfinite(temperature) or temperature < 0:
            raise ValueError(f"temperature must be a finite number >= 0, got {temperature}")
        if temperature != 0:
            raise NotImplementedError("only greedy decoding (temperature=0) is available in this version")
        ids = self._ids(prompt)
        ctx = self.config.max_position_embeddings
        if len(ids) + max_new_tokens - 1 > ctx:
            raise ValueError(f"prompt of {len(ids)} tokens + max_new_tokens={max_new_tokens} exceeds the "
                             f"context window of {ctx} tokens (at most {ctx - len(ids) + 1} new tokens fit)")
        eos = self._eos_ids(eos_token_id)
        need = len(ids) + max_new_tokens - 1
        if cache is None:
            cache = self._engine.new_cache(max(1, min(ctx, need)), "float32", False)
            reused = 0
        else:
            if need > cache.capacity and not cache.grows:
                raise ValueError(f"prompt of {len(ids)} tokens + max_new_tokens={max_new_tokens} needs {need} "
                                 f"cache positions, more than the cache capacity of {cache.capacity}")
            held = cache.token_ids
            reused = 0
            for a, b in zip(held, ids):
                if a != b:
                    break
                reused += 1
            reused = min(reused, len(ids) - 1)  # the last prompt token is run again for its logits
            cache.truncate(reused)
        r = self._engine.generate_greedy(np.asarray(ids[reused:], dtype=np.int64), int(max_new_tokens), eos, cache)
        out = r["token_ids"]
        text = self.tokenizer.decode(out) if self.tokenizer is not None else ""
        return Generation(text=text, token_ids=out, finish_reason=r["finish_reason"], prompt_token_ids=ids,
                          prefill_seconds=r["prefill_seconds"], decode_seconds=r["decode_seconds"],
                          reused_prompt_tokens=reused)


def load(path: Union[str, os.PathLike], *, dtype: str = "float32", threads: Optional[int] = None,
         tokenizer: Union[None, str, os.PathLike, Tokenizer] = None) -> Model:
    """Load a Hugging Face folder (config.json + safetensors) or a llama2.c ``.bin`` checkpoint.

    Weights are memory-mapped; fp32, bf16 and f16 stored weights load and compute in fp32.
    ``tokenizer`` overrides the tokenizer found beside the weights (a path or a Tokenizer).
    """
    path = os.fspath(path)
    if dtype not in ("float32", "fp32"):
        raise ValueError(f"dtype must be 'float32' (compute precision), got {dtype!r}")
    n_threads = _default_threads() if threads is None else int(threads)
    if not 1 <= n_threads <= 1024:
        raise ValueError(f"threads must be in [1, 1024], got {threads}")
    if not os.path.exists(path):
        raise FileNotFoundError(f"model path {path} does not exist")
    if os.path.isdir(path):
        cfg_path = os.path.join(path, "config.json")
        if not os.path.exists(cfg_path):
            raise FileNotFoundError(f"{path} has no config.json")
        raw = formats.load_json(cfg_path)
        gen_path = os.path.join(path, "generation_config.json")
        if os.path.exists(gen_path):
            gen = formats.load_json(gen_path)
            if gen.get("eos_token_id") is not None:
                raw = dict(raw, eos_token_id=gen["eos_token_id"])
        config = from_hf_dict(raw)
        files, tensors = formats.read_hf_weights(path, config)
        tok_dir = path
    else:
        config, tensors = formats.read_llama2c(path)
        files = [path]
        tok_dir = os.path.dirname(os.path.abspath(path))
    engine = _core.Engine(config.to_core(), files, tensors, n_threads)
    if tokenizer is None:
        tok = find_tokenizer(tok_dir, config.vocab_size)
    elif isinstance(tokenizer, Tokenizer):
        tok = tokenizer
    else:
        tok = load_tokenizer(os.fspath(tokenizer), config.vocab_size)
    return Model(engine, config, tok, path)
