"""The user-facing model: load(), Model.forward / prefill / decode / generate, Generation."""
from __future__ import annotations

import dataclasses
import os
from typing import List, Optional, Sequence, Tuple, Union

import numpy as np

from . import formats, samplers
from ._native import _core
from .config import ModelConfig, from_hf_dict
from .tokenizer import Tokenizer, find_tokenizer, load_tokenizer
from .trace import Trace

Prompt = Union[str, Sequence[int]]


@dataclasses.dataclass
class TokenLogprob:
    """A generated token's log-probability and the most likely alternatives at that step."""

    token: int
    logprob: float
    top: List[Tuple[int, float]]  # (token id, logprob), best first


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
    seed: Optional[int] = None     # the seed of the random stream (reproduces a sampled run)
    sampler: str = ""              # the chain that chose the tokens
    logprobs: Optional[List["TokenLogprob"]] = None
    trace: Optional[Trace] = None

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

    def generate(self, prompt: Union[Prompt, List[Prompt]], *, max_new_tokens: int = 128,
                 temperature: Optional[float] = None, top_k: Optional[int] = None, top_p: Optional[float] = None,
                 min_p: Optional[float] = None, typical_p: Optional[float] = None,
                 repetition_penalty: Optional[float] = None, presence_penalty: Optional[float] = None,
                 frequency_penalty: Optional[float] = None, no_repeat_ngram_size: Optional[int] = None,
                 logit_bias: Optional[dict] = None, min_new_tokens: Optional[int] = None,
                 seed: Optional[int] = None, sampler: Optional[samplers.Sampler] = None,
                 order: Optional[str] = None, preset: Optional[str] = None,
                 eos_token_id: Union[None, int, Sequence[int]] = None, cache=None,
                 logprobs: Optional[int] = None, logprobs_mode: str = "raw",
                 trace: Union[bool, str] = False):
        """Generate a continuation of ``prompt`` (text or token ids), or of each prompt in a list
        (then a list of Generation comes back).

        Sampling: the familiar keywords (``temperature``, ``top_k``, ``top_p``, ``min_p``,
        ``typical_p``, ``repetition_penalty``, ``presence_penalty``, ``frequency_penalty``,
        ``no_repeat_ngram_size``, ``logit_bias``, ``min_new_tokens``) build a Chain in the order of
        ``order`` ("hf", the default, "vllm" or "llama.cpp"; see ``decodelab.samplers.ORDERS``);
        ``preset`` starts from a named configuration (``decodelab.samplers.PRESETS``); or pass
        ``sampler=Chain([...])`` yourself. ``temperature`` 0 (the default) is greedy decoding:
        penalties still apply, the truncation samplers would not, so giving one is an error. A
        chain that does not end in a selector gets ``Dist(seed)`` appended. ``seed=None`` draws a
        fresh seed, reported in ``Generation.seed``; the random stream depends only on (seed,
        step), so a prompt gives the same tokens alone or inside a list.

        ``logprobs=N``: per generated token its logprob and the N most likely alternatives, under
        the raw model distribution (``logprobs_mode="raw"``, the default) or the processed one the
        token was drawn from ("processed"). ``trace=True``: per step, what every sampler stage did
        (kept tokens, entropy, mass removed, top 20 tokens); ``trace="full"`` also keeps each
        stage's full logits.

        ``eos_token_id``: None uses the model's EOS, an int or a list sets it, ``[]`` never stops
        on EOS. ``cache``: continue from a KV cache (single prompt only): the longest common
        prefix of its tokens and the prompt is kept and only the rest is prefilled
        (``Generation.reused_prompt_tokens``). The loop runs in C++ with the GIL released; Ctrl-C
        stops it cleanly.
        """
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, (int, np.integer)):
            raise ValueError(f"max_new_tokens must be an integer >= 0, got {max_new_tokens!r}")
        if max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
        if logprobs_mode not in ("raw", "processed"):
            raise ValueError(f"logprobs_mode must be 'raw' or 'processed', got {logprobs_mode!r}")
        if logprobs is not None and (isinstance(logprobs, bool) or not isinstance(logprobs, (int, np.integer))
                                     or not 0 <= logprobs <= self.config.vocab_size):
            raise ValueError(f"logprobs must be an integer in [0, {self.config.vocab_size}], got {logprobs!r}")
        if trace not in (False, True, "full"):
            raise ValueError(f"trace must be False, True or 'full', got {trace!r}")
        if seed is None:
            seed = int.from_bytes(os.urandom(8), "little") >> 1
        eos = self._eos_ids(eos_token_id)
        chain = self._sampler_chain(sampler, order, preset, seed, eos, dict(
            temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, typical_p=typical_p,
            repetition_penalty=repetition_penalty, presence_penalty=presence_penalty,
            frequency_penalty=frequency_penalty, no_repeat_ngram_size=no_repeat_ngram_size,
            logit_bias=logit_bias, min_new_tokens=min_new_tokens))
        run = dict(max_new_tokens=int(max_new_tokens), eos=eos, chain=chain, seed=seed,
                   logprobs=-1 if logprobs is None else int(logprobs), processed=logprobs_mode == "processed",
                   trace={False: 0, True: 1, "full": 2}[trace])
        if isinstance(prompt, list) and prompt and not isinstance(prompt[0], (int, np.integer)):
            if cache is not None:
                raise ValueError("cache= takes a single prompt, not a list")
            return [self._generate_one(p, None, **run) for p in prompt]
        return self._generate_one(prompt, cache, **run)

    def _sampler_chain(self, sampler, order, preset, seed, eos, options) -> samplers.Chain:
        given = {k: v for k, v in options.items() if v is not None}
        if sampler is not None:
            if given or preset is not None or order is not None:
                raise ValueError("pass either sampler= or sampling keywords/preset/order, not both: "
                                 f"got sampler= with {sorted(given) + (['preset'] if preset else [])}")
            if not isinstance(sampler, samplers.Sampler):
                raise ValueError(f"sampler must be a decodelab.samplers.Sampler, got {sampler!r}")
            chain = sampler.clone() if isinstance(sampler, samplers.Chain) else samplers.Chain([sampler.clone()])
            if not chain.selects:
                chain = samplers.Chain(chain.stages + [samplers.Dist(seed)])
            chain.reset()
            return chain
        opts = {}
        if preset is not None:
            if preset not in samplers.PRESETS:
                raise ValueError(f"preset must be one of {', '.join(map(repr, samplers.PRESETS))}, got {preset!r}")
            opts.update(samplers.PRESETS[preset])
        opts.update(given)
        opts.setdefault("temperature", 0.0)
        if opts["temperature"] == 0:
            warpers = [k for k in ("top_k", "top_p", "min_p", "typical_p") if k in given]
            if warpers:
                raise ValueError(f"{', '.join(warpers)} has no effect with temperature=0 (greedy decoding); "
                                 "set temperature > 0 to sample")
        return samplers.build_chain(order=order or samplers.DEFAULT_ORDER, seed=seed, eos_token_ids=eos, **opts)

    def _generate_one(self, prompt, cache, *, max_new_tokens, eos, chain, seed, logprobs, processed,
                      trace) -> Generation:
        ids = self._ids(prompt)
        ctx = self.config.max_position_embeddings
        if len(ids) + max_new_tokens - 1 > ctx:
            raise ValueError(f"prompt of {len(ids)} tokens + max_new_tokens={max_new_tokens} exceeds the "
                             f"context window of {ctx} tokens (at most {ctx - len(ids) + 1} new tokens fit)")
        need = len(ids) + max_new_tokens - 1
        reused = 0
        if cache is None:
            cache = self._engine.new_cache(max(1, min(ctx, need)), "float32", False)
        else:
            if need > cache.capacity and not cache.grows:
                raise ValueError(f"prompt of {len(ids)} tokens + max_new_tokens={max_new_tokens} needs {need} "
                                 f"cache positions, more than the cache capacity of {cache.capacity}")
            for a, b in zip(cache.token_ids, ids):
                if a != b:
                    break
                reused += 1
            reused = min(reused, len(ids) - 1)  # the last prompt token is run again for its logits
            cache.truncate(reused)
        run_chain = chain.clone()
        r = self._engine.generate(np.asarray(ids[reused:], dtype=np.int64), run_chain._core, max_new_tokens, eos,
                                  cache, 0, logprobs, processed, trace, 20)
        out = r["token_ids"]
        text = self.tokenizer.decode(out) if self.tokenizer is not None else ""
        lp = None
        if logprobs >= 0:
            lp = [TokenLogprob(token=t, logprob=l, top=list(zip(i, v)))
                  for t, l, i, v in zip(out, r["logprobs"], r["top_ids"], r["top_logprobs"])]
        return Generation(text=text, token_ids=out, finish_reason=r["finish_reason"], prompt_token_ids=ids,
                          prefill_seconds=r["prefill_seconds"], decode_seconds=r["decode_seconds"],
                          reused_prompt_tokens=reused, seed=seed, sampler=repr(chain), logprobs=lp,
                          trace=Trace.from_core(r["trace"]) if trace else None)


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
