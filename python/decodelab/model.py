"""The user-facing model: load(), Model.forward / prefill / decode / generate, Generation."""
from __future__ import annotations

import dataclasses
import math
import os
import struct
import time
from typing import Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import formats, options, samplers
from ._native import _core
from .config import ModelConfig, from_hf_dict
from .tokenizer import Tokenizer, find_tokenizer, load_tokenizer
from .beam import BeamTree
from .trace import Trace

Prompt = Union[str, Sequence[int]]


@dataclasses.dataclass
class TokenLogprob:
    """A generated token's log-probability and the most likely alternatives at that step."""

    token: int
    logprob: float
    top: List[Tuple[int, float]]  # (token id, logprob), best first


@dataclasses.dataclass
class GeneratedSequence:
    """One of several returned sequences (beams, or n samples)."""

    token_ids: List[int]
    text: str
    score: float          # beams: sum_logprobs / length ** length_penalty; samples: sum of raw logprobs
    finish_reason: str


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
    first_token_seconds: float = 0.0  # prefill + choosing the first token
    sequences: List["GeneratedSequence"] = dataclasses.field(default_factory=list)  # best first
    beam_tree: Optional[BeamTree] = None
    stop_reason: Union[None, int, str] = None  # the EOS id or stop string that ended the text
    peak_cache_bytes: Optional[int] = None     # beam search: K/V blocks in use at the peak

    @property
    def time_to_first_token(self) -> float:
        return self.first_token_seconds

    @property
    def time_per_output_token(self) -> float:
        steps = len(self.token_ids) - 1
        return self.decode_seconds / steps if steps > 0 else float("nan")

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
        n = self.prompt_tokens - self.reused_prompt_tokens
        return n / self.prefill_seconds if self.prefill_seconds > 0 else float("nan")

    @property
    def timings(self) -> dict:
        return {"prompt_tokens": self.prompt_tokens, "generated_tokens": self.generated_tokens,
                "time_to_first_token": self.time_to_first_token, "time_per_output_token": self.time_per_output_token,
                "prefill_tokens_per_second": self.prefill_tokens_per_second,
                "decode_tokens_per_second": self.decode_tokens_per_second}


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
    def kv_block_size(self) -> int:
        """Tokens per KV-cache block (``load(..., kv_block_size=)``)."""
        return self._engine.block_size

    @property
    def threads(self) -> int:
        """The most threads a forward pass runs on. Set it to fix the count (this also turns off
        ``auto_threads``)."""
        return self._engine.n_threads

    @threads.setter
    def threads(self, n: int) -> None:
        self._engine.n_threads = options.integer("threads", n, 1, 1024)
        self._engine.auto_threads = False

    @property
    def auto_threads(self) -> bool:
        """True (``load(threads=None)``, the default): each pass runs on ``threads`` less the cores
        other programs keep busy, at least one, looked at every 20 ms."""
        return self._engine.auto_threads

    @property
    def weight_bytes(self) -> dict:
        """``mapped``: bytes of the memory-mapped files; ``converted``: bytes of fp32 copies made
        at load: with fp32 weights, the linear layers and the head (GPT-2's Conv1D matrices,
        stored (in, out), transposed to (out, in)), each padded to 64 bytes; with
        ``load(..., zero_copy=True)`` only GPT-2's transposed matrices, and an fp32 Llama
        checkpoint is read in place (converted is 0); f16/bf16 stored weights, every one.
        ``quantized``: bytes of bf16/int8 weights (``load(dtype=...)``); the fp32 pages they came
        from are dropped from the resident set after conversion."""
        return {"mapped": self._engine.mapped_bytes, "converted": self._engine.owned_bytes,
                "quantized": self._engine.quantized_bytes}

    @property
    def dtype(self) -> str:
        """The precision of the linear layers' weights: float32, bfloat16, int8 or w8a8."""
        return self._engine.weight_dtype

    @property
    def bf16_matmul(self) -> bool:
        """Whether prompt matmuls round their inputs to bf16 (bfloat16 or int8 weights on a CPU
        with native bf16 products; see load())."""
        return self._engine.bf16_matmul

    # -- token handling -------------------------------------------------------------------
    def _ids(self, prompt: Prompt) -> List[int]:
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise ValueError("this model has no tokenizer; pass token ids or load(..., tokenizer=PATH)")
            ids = self.tokenizer.encode(prompt)
        elif prompt is None or isinstance(prompt, (bytes, bytearray, memoryview)):
            raise ValueError(f"the prompt must be text (str) or a list of token ids, got {type(prompt).__name__}"
                             + (" (decode bytes to str first)" if prompt is not None else ""))
        else:
            ids = options.token_ids("prompt", prompt, self.config.vocab_size)
        if not ids:
            raise ValueError("the prompt is empty: at least one token is needed")
        ctx = self.config.max_position_embeddings
        if len(ids) > ctx:
            raise ValueError(f"the prompt has {len(ids)} tokens, more than the context window of {ctx}")
        return ids

    def _default_eos(self) -> List[int]:
        """The model's EOS ids (config, else tokenizer), those inside the vocabulary."""
        ids: List[int] = []
        if self.config.eos_token_id:
            ids = list(self.config.eos_token_id)
        elif self.tokenizer is not None and self.tokenizer.eos_token_id is not None:
            ids = [self.tokenizer.eos_token_id]
        return [t for t in ids if 0 <= t < self.config.vocab_size]

    def _cache_arg(self, cache):
        if cache is None:
            raise ValueError("a KV cache from Model.new_cache() is needed, got None")
        return self._cache(cache)

    def _cache(self, cache):
        if cache is not None and not isinstance(cache, _core.KVCache):
            raise ValueError(f"cache must be a KV cache from Model.new_cache(), got {type(cache).__name__} {cache!r:.60}")
        return cache

    # -- engine calls -----------------------------------------------------------------------
    def new_cache(self, capacity: Optional[int] = None, dtype: Optional[str] = None, grow: bool = False):
        """An empty KV cache for one sequence.

        ``capacity``: most tokens it may hold (default: the context window); going past it raises
        ValueError unless ``grow=True``, which doubles it up to the context window. Memory is
        taken in blocks of ``kv_block_size`` tokens (see ``load``) as the sequence grows.
        ``dtype``: "float32" (default), "bfloat16" (half the bytes) or "int8" (a quarter, plus one
        fp32 scale per head and position: each row of head_dim values is rounded to steps of 1/127
        of its largest magnitude). Both move the logits slightly; ``benchmarks/bench_accuracy.py``
        measures by how much.
        """
        ctx = self.config.max_position_embeddings
        cap = ctx if capacity is None else options.integer("capacity", capacity, 1, ctx)
        if dtype is not None and dtype not in ("float32", "bfloat16", "int8"):
            raise ValueError(f"cache dtype must be 'float32', 'bfloat16' or 'int8', got {dtype!r}")
        if not isinstance(grow, bool):
            raise ValueError(f"grow must be True or False, got {grow!r}")
        return self._engine.new_cache(cap, dtype or "float32", grow)

    def memory_report(self) -> dict:
        """KV-cache memory of every live cache of this model, per cache dtype. Blocks shared by
        forks are counted once in ``bytes_in_use``; ``bytes_referenced`` counts them per sequence
        (the sum of the caches' nbytes); ``bytes_allocated`` includes free blocks kept for reuse.
        Blocks are carved from chunks in huge pages; a chunk's unused tail (at most one 2 MiB page
        of memory) is not counted."""
        return {p["dtype"]: p for p in self._engine.pool_stats()}

    def forward(self, token_ids: Sequence[int]) -> np.ndarray:
        """Full logits, shape (len, vocab), float32, computed without a persistent cache."""
        ids = self._ids(token_ids)
        cache = self._engine.new_cache(len(ids), "float32", False)
        return self._engine.forward(np.asarray(ids, dtype=np.int64), cache, True)

    def prefill(self, token_ids: Sequence[int], cache) -> np.ndarray:
        """Run tokens into ``cache``; returns the logits of the last position, shape (vocab,)."""
        ids = self._ids(token_ids)
        return self._engine.forward(np.asarray(ids, dtype=np.int64), self._cache_arg(cache), False)[0]

    def decode(self, token_id: int, cache) -> np.ndarray:
        """Run one token into ``cache``; returns its logits, shape (vocab,)."""
        if isinstance(token_id, bool) or not isinstance(token_id, (int, np.integer)):
            raise ValueError(f"decode takes one token id (int), got {token_id!r}")
        t = options.token_ids("token_id", [token_id], self.config.vocab_size)
        return self._engine.forward(np.asarray(t, dtype=np.int64), self._cache_arg(cache), False)[0]

    def decode_batch(self, token_ids: Sequence[int], caches: Sequence) -> np.ndarray:
        """One decode step for several sequences at once: token i continues caches[i] (distinct
        caches of this model, any lengths). Returns logits (len, vocab); the weights are read once
        for the whole batch, which is how beam search advances its beams."""
        ids = options.token_ids("token_ids", token_ids, self.config.vocab_size)
        caches = [self._cache_arg(c) for c in caches]
        return self._engine.decode_batch(ids, caches)

    def generate(self, prompt: Union[Prompt, List[Prompt]], *, max_new_tokens: int = 128,
                 temperature: Optional[float] = None, top_k: Optional[int] = None, top_p: Optional[float] = None,
                 min_p: Optional[float] = None, typical_p: Optional[float] = None,
                 repetition_penalty: Optional[float] = None, presence_penalty: Optional[float] = None,
                 frequency_penalty: Optional[float] = None, no_repeat_ngram_size: Optional[int] = None,
                 logit_bias: Optional[dict] = None, min_new_tokens: Optional[int] = None,
                 seed: Optional[int] = None, sampler=None, order: Optional[str] = None, preset: Optional[str] = None,
                 eos_token_id: Union[None, int, Sequence[int]] = None, stop: Union[None, str, Sequence[str]] = None,
                 include_stop_str_in_output: bool = False, n: int = 1, num_beams: int = 1,
                 length_penalty: float = 1.0, early_stopping: Union[bool, str] = False,
                 num_return_sequences: Optional[int] = None, cache=None, logprobs: Optional[int] = None,
                 logprobs_mode: str = "raw", trace: Union[bool, str] = False):
        """Generate a continuation of ``prompt`` (text or token ids), or of each prompt in a list
        (then a list of Generation comes back, equal to the one-by-one results).

        Sampling: the familiar keywords (``temperature``, ``top_k``, ``top_p``, ``min_p``,
        ``typical_p``, ``repetition_penalty``, ``presence_penalty``, ``frequency_penalty``,
        ``no_repeat_ngram_size``, ``logit_bias``, ``min_new_tokens``) build a Chain in the order of
        ``order`` ("hf", the default, "vllm" or "llama.cpp"; see ``decodelab.samplers.ORDERS``);
        ``preset`` starts from a named configuration (``decodelab.samplers.PRESETS``); or pass
        ``sampler=Chain([...])`` yourself (with a list of prompts, a list of samplers gives each
        prompt its own). ``temperature`` 0 (the default) is greedy decoding: penalties still
        apply, the truncation samplers would not, so giving one is an error. A chain that does not
        end in a selector gets ``Dist(seed)`` appended. ``seed=None`` draws a fresh seed, reported
        in ``Generation.seed``; the random stream depends only on (seed, sample, step), so a
        prompt gives the same tokens alone or inside a list.

        Stopping: ``eos_token_id`` (None: the model's; an int or a list; ``[]``: never on EOS),
        ``max_new_tokens``, ``min_new_tokens``, and ``stop`` strings, matched across token
        boundaries and cut from the text unless ``include_stop_str_in_output``.
        ``Generation.finish_reason`` is "stop" or "length", ``stop_reason`` the EOS id or string.

        Several sequences: ``num_beams > 1`` runs beam search as transformers does
        (``length_penalty``, ``early_stopping`` True / False / "never", ``num_return_sequences``;
        with ``temperature > 0`` the beams sample); ``n > 1`` draws n samples that share one
        prefill. ``Generation.sequences`` lists them best first; ``text`` and ``token_ids`` are the
        best one's. Beams and samples share the prompt's KV blocks through forked caches.

        Looking inside: ``logprobs=N`` gives per token its logprob and the N most likely
        alternatives, under the raw distribution (``logprobs_mode="raw"``) or the processed one
        the token was drawn from ("processed"); ``trace=True`` records what every sampler stage
        did (``trace="full"`` keeps full logits), and for beam search the beam tree
        (``Generation.beam_tree``). ``cache``: continue from a KV cache (single prompt only): the
        common prefix is reused, only the rest prefilled. The loop runs in C++ with the GIL
        released; Ctrl-C stops it cleanly and leaves the model usable.
        """
        opts = self._options(dict(
            max_new_tokens=max_new_tokens, seed=seed, sampler=sampler, order=order, preset=preset,
            eos_token_id=eos_token_id, stop=stop, include_stop_str_in_output=include_stop_str_in_output, n=n,
            num_beams=num_beams, length_penalty=length_penalty, early_stopping=early_stopping,
            num_return_sequences=num_return_sequences, logprobs=logprobs, logprobs_mode=logprobs_mode, trace=trace),
            dict(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, typical_p=typical_p,
                 repetition_penalty=repetition_penalty, presence_penalty=presence_penalty,
                 frequency_penalty=frequency_penalty, no_repeat_ngram_size=no_repeat_ngram_size,
                 logit_bias=logit_bias, min_new_tokens=min_new_tokens))
        cache = self._cache(cache)
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list, tuple, np.ndarray)):
            if cache is not None:
                raise ValueError("cache= takes a single prompt, not a list")
            chains = opts.pop("chains")
            if len(chains) == 1:
                chains = chains * len(prompt)
            elif len(chains) != len(prompt):
                raise ValueError(f"got {len(chains)} samplers for {len(prompt)} prompts")
            return [self._generate_one(p, None, chain=c, **opts) for p, c in zip(prompt, chains)]
        chains = opts.pop("chains")
        if len(chains) != 1:
            raise ValueError("a list of samplers needs a list of prompts")
        return self._generate_one(prompt, cache, chain=chains[0], **opts)

    def stream(self, prompt: Prompt, **kwargs) -> Iterator[str]:
        """Yield the generated text in pieces as it is decoded; takes generate()'s options
        (not beams or n). Each piece is valid UTF-8 text: bytes of a character split across tokens
        are held back until it is complete, and so is any text that could be the start of a stop
        string. The pieces join to exactly ``generate(prompt, **kwargs).text``. Stopping the
        iteration (or Ctrl-C) ends the generation cleanly; the model stays usable."""
        cache = self._cache(kwargs.pop("cache", None))
        opts = self._options({k: v for k, v in kwargs.items() if k in _RUN_KEYS},
                             {k: v for k, v in kwargs.items() if k not in _RUN_KEYS})
        if opts["num_beams"] > 1 or opts["n"] > 1:
            raise ValueError("stream() produces one sequence: num_beams and n must be 1")
        chains = opts.pop("chains")
        if len(chains) != 1:
            raise ValueError("stream() takes one sampler")
        ids = self._ids(prompt)
        cache, reused = self._prepare_cache(ids, cache, opts["max_new_tokens"])
        return self._stream(ids, cache, reused, chain=chains[0], **opts)

    # -- option handling ------------------------------------------------------------------
    def _fp32_block_bytes(self) -> int:
        c = self.config
        return 2 * c.n_layers * c.n_kv_heads * c.head_dim * self.kv_block_size * 4

    def _options(self, run: dict, sampling: dict) -> dict:
        opts = options.resolve(run, sampling, vocab_size=self.config.vocab_size,
                               block_bytes=self._fp32_block_bytes(), default_eos=self._default_eos(),
                               make_chain=self._sampler_chain)
        if opts["stops"] and self.tokenizer is None:
            raise ValueError("stop strings need a tokenizer")
        return opts

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

    def _prepare_cache(self, ids: List[int], cache, max_new_tokens: int):
        """The cache to decode into and how many prompt tokens it already holds."""
        ctx = self.config.max_position_embeddings
        if len(ids) + max_new_tokens - 1 > ctx:
            raise ValueError(f"prompt of {len(ids)} tokens + max_new_tokens={max_new_tokens} exceeds the "
                             f"context window of {ctx} tokens (at most {ctx - len(ids) + 1} new tokens fit)")
        need = len(ids) + max_new_tokens - 1
        if cache is None:
            return self._engine.new_cache(max(1, min(ctx, need)), "float32", False), 0
        if need > cache.capacity and not cache.grows:
            raise ValueError(f"prompt of {len(ids)} tokens + max_new_tokens={max_new_tokens} needs {need} "
                             f"cache positions, more than the cache capacity of {cache.capacity}")
        reused = 0
        for a, b in zip(cache.token_ids, ids):
            if a != b:
                break
            reused += 1
        reused = min(reused, len(ids) - 1)  # the last prompt token is run again for its logits
        cache.truncate(reused)
        return cache, reused

    def _decode_text(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(ids) if self.tokenizer is not None else ""

    # -- the decode paths --------------------------------------------------------------------
    def _generate_one(self, prompt, cache, *, chain, max_new_tokens, eos, seed, logprobs, processed, trace, stops,
                      include_stop, n, num_beams, length_penalty, early_stopping, num_return_sequences) -> Generation:
        ids = self._ids(prompt)
        if num_beams > 1:
            return self._beam(ids, cache, chain, max_new_tokens, eos, seed, trace, num_beams, length_penalty,
                              early_stopping, num_return_sequences, stops)
        if n > 1:
            return self._samples(ids, cache, chain, max_new_tokens, eos, seed, logprobs, processed, trace, stops,
                                 include_stop, n)
        cache, reused = self._prepare_cache(ids, cache, max_new_tokens)
        kw = dict(chain=chain, max_new_tokens=max_new_tokens, eos=eos, seed=seed, logprobs=logprobs,
                  processed=processed, trace=trace, stops=stops, include_stop=include_stop)
        if stops:
            # Stop strings need the text after every token: run the stream and keep its result.
            it = self._stream(ids, cache, reused, **kw)
            while True:
                try:
                    next(it)
                except StopIteration as done:
                    return done.value
        r = self._engine.generate(np.asarray(ids[reused:], dtype=np.int64), chain.clone()._core, max_new_tokens, eos,
                                  cache, 0, logprobs, processed, trace, 20)
        return self._generation(ids, reused, r, chain, seed, logprobs, trace, text=self._decode_text(r["token_ids"]))

    def _generation(self, ids, reused, r, chain, seed, logprobs, trace, *, text, finish_reason=None,
                    stop_reason=None) -> Generation:
        out = r["token_ids"]
        lp = None
        if logprobs >= 0:
            lp = [TokenLogprob(token=t, logprob=l, top=list(zip(i, v)))
                  for t, l, i, v in zip(out, r["logprobs"], r["top_ids"], r["top_logprobs"])]
        fr = finish_reason or r["finish_reason"]
        if stop_reason is None and fr == "stop" and out:
            stop_reason = out[-1]
        score = float(sum(r["logprobs"])) if r["logprobs"] else float("nan")
        return Generation(text=text, token_ids=out, finish_reason=fr, prompt_token_ids=ids,
                          prefill_seconds=r["prefill_seconds"], decode_seconds=r["decode_seconds"],
                          first_token_seconds=r["first_token_seconds"], reused_prompt_tokens=reused, seed=seed,
                          sampler=repr(chain), logprobs=lp, trace=Trace.from_core(r["trace"]) if trace else None,
                          stop_reason=stop_reason,
                          sequences=[GeneratedSequence(token_ids=out, text=text, score=score, finish_reason=fr)])

    def _stream(self, ids, cache, reused, *, chain, max_new_tokens, eos, seed, logprobs, processed, trace, stops,
                include_stop, sequence: int = 0, **_):
        """Generator of text pieces; its return value (StopIteration.value) is the Generation."""
        dec = _core.Decoder(self._engine, np.asarray(ids[reused:], dtype=np.int64), chain.clone()._core, cache,
                            max_new_tokens, eos, sequence, logprobs, processed, trace, 20)
        tokens: List[int] = []
        emitted = 0
        text = ""
        stop_hit = None
        longest = max((len(s) for s in stops), default=0)
        # Incremental detokenisation: `done` is the text of tokens[:read], known complete; only
        # the window tokens[prefix:] is decoded per step and the new text is what it adds to
        # tokens[prefix:read]. (Decoding the whole list every step cost O(length) per token.)
        done, prefix, read, prefix_text = "", 0, 0, ""
        while True:
            t = dec.step()
            if t < 0:
                break
            tokens.append(t)
            if self.tokenizer is None:
                continue
            window = self.tokenizer.decode(tokens[prefix:])
            tail = window[len(prefix_text):] if window.startswith(prefix_text) else None
            if tail is None:  # the new token changed earlier text: start over from the first token
                done, prefix, read, prefix_text = "", 0, 0, ""
                tail = self.tokenizer.decode(tokens)
            if tail and not tail.endswith("\ufffd"):
                done += tail
                tail = ""
                prefix, read = read, len(tokens)
                prefix_text = self.tokenizer.decode(tokens[prefix:read])
            text = done + tail
            if stops:
                start = max(0, emitted - longest)
                hits = [(text.find(s, start), s) for s in stops]
                hits = [(i, s) for i, s in hits if i >= 0]
                if hits:
                    i, s = min(hits)
                    stop_hit = s
                    text = text[:i + len(s)] if include_stop else text[:i]
                    break
            safe = len(text)
            while safe > emitted and text[safe - 1] == "\ufffd":  # a character still incomplete
                safe -= 1
            for s in stops:  # a suffix that may grow into a stop string
                for k in range(min(len(s) - 1, safe - emitted), 0, -1):
                    if text[safe - k:safe] == s[:k]:
                        safe -= k
                        break
            if safe > emitted:
                yield text[emitted:safe]
                emitted = safe
        if len(text) > emitted:
            yield text[emitted:]
        r = dec.result()
        r["token_ids"] = tokens
        fr = "stop" if stop_hit is not None else r["finish_reason"]
        return self._generation(ids, reused, r, chain, seed, logprobs, trace, text=text, finish_reason=fr,
                                stop_reason=stop_hit)

    def _samples(self, ids, cache, chain, max_new_tokens, eos, seed, logprobs, processed, trace, stops,
                 include_stop, n) -> Generation:
        base, reused = self._prepare_cache(ids, cache, max_new_tokens)
        # One prefill of all but the last prompt token; each sample forks it and runs that token.
        t0 = time.perf_counter()
        if len(ids) - 1 > reused:
            self._engine.forward(np.asarray(ids[reused:-1], dtype=np.int64), base, False)
        prefill = time.perf_counter() - t0
        shared = len(ids) - 1
        results = []
        for i in range(n):
            c = base.fork()
            kw = dict(chain=chain, max_new_tokens=max_new_tokens, eos=eos, seed=seed, logprobs=max(logprobs, 0),
                      processed=processed, trace=trace, stops=stops, include_stop=include_stop, sequence=i)
            it = self._stream(ids, c, shared, **kw)
            while True:
                try:
                    next(it)
                except StopIteration as done:
                    results.append(done.value)
                    break
        results.sort(key=lambda g: -g.sequences[0].score)
        best = results[0]
        best.sequences = [g.sequences[0] for g in results]
        best.prefill_seconds += prefill
        best.reused_prompt_tokens = reused
        if logprobs < 0:
            best.logprobs = None
        return best

    def _beam(self, ids, cache, chain, max_new_tokens, eos, seed, trace, num_beams, length_penalty, early_stopping,
              num_return_sequences, stops) -> Generation:
        if stops:
            raise ValueError("stop strings are not supported with beam search; use eos_token_id")
        cache, reused = self._prepare_cache(ids, cache, max_new_tokens)
        selector = chain.stages[-1]
        processors = samplers.Chain([s.clone() for s in chain.stages[:-1]])
        do_sample = not isinstance(selector, samplers.Greedy)
        if isinstance(selector, samplers.Mirostat):
            raise ValueError("Mirostat cannot drive beam search")
        r = self._engine.beam_search(np.asarray(ids[reused:], dtype=np.int64), processors._core, cache, num_beams,
                                     max_new_tokens, length_penalty, early_stopping, num_return_sequences, eos,
                                     do_sample, seed, bool(trace))
        seqs = [GeneratedSequence(token_ids=h["token_ids"], text=self._decode_text(h["token_ids"]), score=h["score"],
                                  finish_reason=h["finish_reason"]) for h in r["hypotheses"]]
        best = seqs[0]
        return Generation(text=best.text, token_ids=best.token_ids, finish_reason=best.finish_reason,
                          prompt_token_ids=ids, prefill_seconds=r["prefill_seconds"],
                          decode_seconds=r["decode_seconds"], first_token_seconds=r["prefill_seconds"],
                          reused_prompt_tokens=reused, seed=seed if do_sample else None,
                          sampler=f"beam_search(num_beams={num_beams}, length_penalty={length_penalty}, "
                                  f"early_stopping={ {1: True, 0: False, -1: 'never'}[early_stopping]!r}, "
                                  f"processors={processors!r}, sample={do_sample})",
                          sequences=seqs, beam_tree=BeamTree(r["events"], self.tokenizer) if trace else None,
                          stop_reason=best.token_ids[-1] if best.finish_reason == "stop" else None,
                          peak_cache_bytes=r["peak_cache_bytes"])


_RUN_KEYS = {"max_new_tokens", "seed", "sampler", "order", "preset", "eos_token_id", "stop",
             "include_stop_str_in_output", "n", "num_beams", "length_penalty", "early_stopping",
             "num_return_sequences", "logprobs", "logprobs_mode", "trace"}


# Exceptions a malformed file can raise inside the readers; load() reports them as ValueError.
_MALFORMED = (TypeError, AttributeError, KeyError, IndexError, OverflowError, RecursionError, UnicodeError,
              struct.error, MemoryError)


def _read_model_files(path: str):
    """(config, weight files, tensor table, folder to look for a tokenizer in) of a model path."""
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
        return config, files, tensors, path
    config, tensors = formats.read_llama2c(path)
    return config, [path], tensors, os.path.dirname(os.path.abspath(path))


def load(path: Union[str, os.PathLike], *, dtype: str = "float32", threads: Optional[int] = None,
         tokenizer: Union[None, str, os.PathLike, Tokenizer] = None, zero_copy: bool = False,
         kv_block_size: int = _core.default_kv_block_size, bf16_matmul: bool = True) -> Model:
    """Load a Hugging Face folder (config.json + safetensors) or a llama2.c ``.bin`` checkpoint.

    Weights are memory-mapped; fp32, bf16 and f16 stored weights load. ``dtype`` is the precision
    the linear layers and the output head are kept and read in: "float32" (exact), "bfloat16"
    (half the bytes per decode step), "int8" (weight-only, one scale per output channel; a
    quarter of the bytes), or "w8a8" (the int8 weights, and each linear layer's input rounded to
    7-bit integers, a scale per 256 values, error at most 1/126 of the block's largest value:
    faster prompts at a measured cost in accuracy; see benchmarks/bench_speed.py and
    benchmarks/bench_accuracy.py). Activations, norms, attention and accumulation stay fp32, except
    that int8 layers round their input to 16-bit fixed point (a scale per 256 values; error at most
    1/65534 of the block's largest value) to sum the products exactly in int32, and bfloat16
    and int8 prompts on a CPU with native bf16 products round theirs to bf16 (``bf16_matmul``).
    w8a8, and int8 with ``bf16_matmul=False``, run one linear kernel at every number of tokens: a
    row's product is the same bit for bit whether it was decoded alone, in a batch, or in a
    prompt.
    ``threads``: None (the default) uses every core this process may run on, less those other
    programs keep busy at the time (looked at every 20 ms: a step spread over a core that another
    program also wants waits for it at every parallel region; ``benchmarks/bench_busy.py``); a
    number fixes the count.
    ``tokenizer`` overrides the tokenizer found beside the weights (a path or a Tokenizer).
    ``zero_copy``: with fp32, the linear layers and the head are by default copied once from the
    file mapping into memory in huge pages, where a decode step reads them 10-20 % faster here
    (bf16 and int8 are converted copies anyway); True reads them from the mapping itself instead
    (no copy at load, pages shared with other processes that map the same file). Either way the
    result is the same bit for bit.
    ``kv_block_size``: tokens per KV-cache block (1 to 4096). A decode step reads each block's keys
    and values of a layer and head as one contiguous piece; with 64 (the default) decode attention
    at context 960 took 9-29 % less time here than with vLLM's 16. Smaller blocks waste less memory
    per sequence (at most kv_block_size - 1 positions) and copy less when a fork first writes to a
    shared block. The logits are the same bit for bit for every multiple of 4, and within float
    rounding for other sizes.
    ``bf16_matmul`` (bfloat16 and int8, on a CPU with native bf16 products: AVX512_BF16,
    ``decodelab._core.bf16_matmul_native()``): a linear layer over 80 or more rows at once (long
    prompts, very large batches) rounds its input to bf16 and runs oneDNN's bf16 matmul, products
    of bf16 pairs summed in fp32, as transformers and llama.cpp do at this precision (AMX tiles
    where the CPU has them): 2-4 times the speed of the fp32 matmul on the weights widened, at a
    measured cost (benchmarks/bench_accuracy.py). int8 layers run it on their int8 values, which
    bf16 holds exactly, with the scales applied to the sums: 1.7x the speed of their own kernel on
    512-token prompts. Fewer rows, decode steps among them, keep their usual inputs. False keeps
    those for every row count too: fp32 arithmetic on the bf16-rounded weights, or the int8
    kernel's 16-bit inputs. On a CPU without native bf16 the option changes nothing (oneDNN would
    emulate the products, at a fifth of the fp32 matmul's speed), and ``Model.bf16_matmul`` is
    False.
    """
    path = os.fspath(path)
    dtype = {"fp32": "float32", "bf16": "bfloat16"}.get(dtype, dtype)
    if dtype not in ("float32", "bfloat16", "int8", "w8a8"):
        raise ValueError(f"dtype must be 'float32', 'bfloat16', 'int8' or 'w8a8', got {dtype!r}")
    n_threads = _default_threads() if threads is None else options.integer("threads", threads, 1, 1024)
    if isinstance(kv_block_size, bool) or not isinstance(kv_block_size, (int, np.integer)):
        raise TypeError(f"kv_block_size must be an int, got {kv_block_size!r}")
    if not 1 <= kv_block_size <= _core.max_kv_block_size:
        raise ValueError(f"kv_block_size must be in [1, {_core.max_kv_block_size}], got {kv_block_size}")
    if not os.path.exists(path):
        raise FileNotFoundError(f"model path {path} does not exist")
    if not isinstance(zero_copy, bool):
        raise TypeError(f"zero_copy must be True or False, got {zero_copy!r}")
    if not isinstance(bf16_matmul, bool):
        raise TypeError(f"bf16_matmul must be True or False, got {bf16_matmul!r}")
    try:
        config, files, tensors, tok_dir = _read_model_files(path)
        core_config = config.to_core()
    except _MALFORMED as e:
        # The readers check what they expect; anything else a mutated file can provoke (a JSON value
        # of the wrong type, nesting past the recursion limit, bytes that are not UTF-8) is the
        # file's fault too.
        raise ValueError(f"{path}: malformed model files ({type(e).__name__}: {e})") from None
    engine = _core.Engine(core_config, files, tensors, n_threads, dtype, zero_copy, int(kv_block_size),
                          bf16_matmul)
    engine.auto_threads = threads is None
    try:
        if tokenizer is None:
            tok = find_tokenizer(tok_dir, config.vocab_size)
        elif isinstance(tokenizer, Tokenizer):
            tok = tokenizer
        else:
            tok = load_tokenizer(os.fspath(tokenizer), config.vocab_size)
    except _MALFORMED as e:
        raise ValueError(f"malformed tokenizer beside {path} ({type(e).__name__}: {e})") from None
    return Model(engine, config, tok, path)
