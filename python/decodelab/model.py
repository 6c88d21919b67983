"""The Model facade: a loaded model's forward / prefill / decode / generate / stream calls."""
from __future__ import annotations

import dataclasses
import time
from typing import Iterator, List, Optional, Sequence, Union

import numpy as np

from . import options, profiling, samplers
from .eval import scoring
from .samplers import grammar as constraints
from .text import streaming
from ._native import _core
from .beam import BeamTree
from .config import ModelConfig
from .results import GeneratedSequence, Generation, Speculation, StreamPiece, TokenLogprob
from .text.tokenizer import Tokenizer
from .trace import Trace

Prompt = Union[str, Sequence[int]]


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
        if dtype is not None and not isinstance(dtype, str):  # the names themselves are the engine's (dtypes.h)
            raise ValueError(f"cache dtype must be one of {', '.join(map(repr, _core.KV_DTYPES))}, got {dtype!r}")
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

    def forward(self, token_ids: Sequence[int], hidden_states: bool = False):
        """Full logits, shape (len, vocab), float32, computed without a persistent cache. With
        ``hidden_states=True``, ``(logits, hidden_states)``: a list of n_layers + 1 arrays of shape
        (len, hidden_size), the embeddings and each layer's output before the final norm (as
        transformers' ``output_hidden_states``, whose last entry is after the norm instead)."""
        ids = self._ids(token_ids)
        if not isinstance(hidden_states, bool):
            raise ValueError(f"hidden_states must be True or False, got {hidden_states!r}")
        cache = self._engine.new_cache(len(ids), "float32", False)
        if not hidden_states:
            return self._engine.forward(np.asarray(ids, dtype=np.int64), cache, True)
        logits, hidden = self._engine.forward_hidden(np.asarray(ids, dtype=np.int64), cache)
        return logits, list(hidden)

    def score(self, prompt: Union[str, Sequence[int]], continuation: Union[str, Sequence[int]], *,
              sampler=None) -> "scoring.Score":
        """The log-likelihood of ``continuation`` after ``prompt`` (both text, or both token ids),
        teacher-forced in one forward pass: ``Score.total`` (summed natural-log probability),
        ``token_logprobs``, ``is_greedy``, as lm-evaluation-harness's loglikelihood reports them.
        Text is split as lm-eval splits it: the continuation's tokens are those of prompt +
        continuation past the prompt's own. ``sampler``: a samplers.Chain whose stages (a final
        selector is left out) process each position's logits first, scoring under the processed
        distribution (a token it removed scores -inf)."""
        ctx, cont = scoring.split_pair(self.tokenizer, prompt, continuation, self.config.vocab_size)
        return scoring.score_ids(self, ctx, cont, self._score_chain(sampler))

    def score_batch(self, pairs, *, sampler=None) -> List["scoring.Score"]:
        """score() of each (prompt, continuation) pair, in order."""
        if isinstance(pairs, (str, bytes)) or not isinstance(pairs, Sequence):
            raise ValueError(f"pairs must be a list of (prompt, continuation), got {type(pairs).__name__}")
        chain = self._score_chain(sampler)
        out = []
        for i, pair in enumerate(pairs):
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise ValueError(f"pairs[{i}] must be a (prompt, continuation) pair, got {pair!r:.80}")
            ctx, cont = scoring.split_pair(self.tokenizer, pair[0], pair[1], self.config.vocab_size)
            out.append(scoring.score_ids(self, ctx, cont, chain))
        return out

    def perplexity(self, text: Union[str, Sequence[int]], *, window: Optional[int] = None,
                   stride: Optional[int] = None) -> float:
        """exp(mean negative log-likelihood) over the text's tokens after the first. A text longer
        than ``window`` tokens (default: the context window) is scored in windows advanced by
        ``stride`` (default: ``window``), each token predicted from the window it ends in and
        scored once, as Hugging Face's sliding-window perplexity; a text that fits is one pass."""
        if isinstance(text, str):
            if self.tokenizer is None:
                raise ValueError("this model has no tokenizer; pass token ids")
            ids = self.tokenizer.encode(text)
        else:
            ids = options.token_ids("text", text, self.config.vocab_size)
        return scoring.perplexity(self, ids, window, stride)

    def _score_chain(self, sampler):
        if sampler is None:
            return None
        if not isinstance(sampler, samplers.Sampler):
            raise ValueError(f"sampler must be a decodelab.samplers.Sampler, got {sampler!r:.80}")
        stages = sampler.stages if isinstance(sampler, samplers.Chain) else [sampler]
        if stages and stages[-1].selects:
            stages = stages[:-1]  # the selector picks one token: the distribution is before it
        return samplers.Chain([s.clone() for s in stages])

    def profile(self, *, probe_bandwidth: bool = False) -> "profiling.Profiler":
        """Times every forward pass this thread runs inside a ``with`` block, op by op (norms,
        projections, RoPE, cache stores, attention, MLP, head, and the decoder's sampling), with
        the weight and cache bytes each op read and its multiply-adds; the block's target is a
        :class:`decodelab.profiling.Profile`, complete when the block ends. ``probe_bandwidth``:
        then measure the machine's read bandwidth (256 MiB on this model's threads) to show each
        op's read rate as a share of it.

        >>> with model.profile() as prof:                          # doctest: +SKIP
        ...     model.generate("Once upon a time", max_new_tokens=64)
        >>> prof.ops("decode")[0].op                              # doctest: +SKIP
        'embed'
        """
        if not isinstance(probe_bandwidth, bool):
            raise ValueError(f"probe_bandwidth must be True or False, got {probe_bandwidth!r}")
        return profiling.Profiler(self.threads, probe_bandwidth)

    def lens(self, hidden) -> np.ndarray:
        """The logit lens: the final norm and the output head applied to rows of the residual
        stream (shape (rows, hidden_size) or (hidden_size,)); logits (rows, vocab)."""
        h = np.asarray(hidden, dtype=np.float32)
        if h.ndim == 1:
            h = h[None]
        return self._engine.head(np.ascontiguousarray(h))

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

    def decode_batch(self, token_ids: Sequence[int], caches: Sequence, fixed_rows: bool = False) -> np.ndarray:
        """One decode step for several sequences at once: token i continues caches[i] (distinct
        caches of this model, any lengths). Returns logits (len, vocab); the weights are read once
        for the whole batch, which is how beam search advances its beams. ``fixed_rows``: every
        row gets the same bits whatever the batch size, as the batch scheduler decodes (the one-row
        kernels sum in another order, so the default may differ from it in the last bits)."""
        ids = options.token_ids("token_ids", token_ids, self.config.vocab_size)
        caches = [self._cache_arg(c) for c in caches]
        return self._engine.decode_batch(ids, caches, bool(fixed_rows))

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
                 logprobs_mode: str = "raw", trace: Union[bool, str] = False,
                 guidance_scale: Optional[float] = None, negative_prompt: Optional[Prompt] = None,
                 draft=None, num_draft_tokens: Optional[int] = None, json_schema=None, regex: Optional[str] = None,
                 grammar=None, choice: Optional[Sequence[str]] = None):
        """Generate a continuation of ``prompt`` (text or token ids), or of each prompt in a list
        (then a list of Generation comes back, equal to the one-by-one results).

        Sampling: the familiar keywords (``temperature``, ``top_k``, ``top_p``, ``min_p``,
        ``typical_p``, ``repetition_penalty``, ``presence_penalty``, ``frequency_penalty``,
        ``no_repeat_ngram_size``, ``logit_bias``, ``min_new_tokens``) build a Chain in the order of
        ``order`` ("hf", the default, "vllm" or "llama.cpp"; see ``decodelab.samplers.ORDERS``);
        ``preset`` starts from a named configuration (``decodelab.samplers.PRESETS``); or pass
        ``sampler=Chain([...])`` yourself (with a list of prompts, a list of samplers gives each
        prompt its own). ``temperature`` 0 (the default) is greedy decoding: penalties still
        apply, the truncation samplers would not, so giving one is an error. A call that names no
        sampling option, ``sampler`` or ``preset`` uses the model's own defaults where its folder has a
        generation_config.json (``config.generation_defaults``: with do_sample, its temperature,
        top_k, top_p, ... with transformers' defaults for those it leaves out; repetition_penalty
        always), as transformers' generate() does; ``temperature=0`` asks for greedy decoding
        then. A chain that does not
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

        Guidance: ``guidance_scale`` (not 1) runs classifier-free guidance as transformers does: an
        unconditional sequence, ``negative_prompt`` (text or ids) or else the prompt's last token,
        advances beside this one with the same tokens in one batched step, and the scores become
        scale x (log p(cond) - log p(uncond)) + log p(uncond), before every sampler.

        Speculative decoding: ``draft`` (a Model with this one's vocabulary, say the same model
        with int8 weights, or "prompt_lookup": the tokens that followed an earlier occurrence of
        the text's last two tokens) proposes ``num_draft_tokens`` tokens (default 5, prompt
        lookup 10); one pass of this model checks them all, and rejection sampling keeps the
        tokens the chain's processed distribution allows, plus one of its own. Greedy output is
        the same token for token; sampled output follows the same distribution as without a
        draft (a seed then gives other tokens than plain sampling). ``Generation.speculation``
        counts drafted and accepted tokens, and records each round.

        Constrained decoding (needs llguidance): ``json_schema`` (a dict or its JSON text),
        ``regex`` (the whole output matches), ``grammar`` (a Lark grammar str, or
        ``decodelab.Grammar(text, syntax="gbnf")``) or ``choice`` (a list of strings), one at a
        time: a first sampler stage removes every token the grammar does not allow next, and
        end-of-sequence until the grammar is complete (a length cut before that ends with
        finish_reason "length"). It works with samples, beams, streams and drafts (drafted
        tokens the grammar refuses are rejected), and traces show what it removed.

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
            num_return_sequences=num_return_sequences, logprobs=logprobs, logprobs_mode=logprobs_mode, trace=trace,
            guidance_scale=guidance_scale, negative_prompt=negative_prompt, draft=draft,
            num_draft_tokens=num_draft_tokens, json_schema=json_schema, regex=regex, grammar=grammar, choice=choice),
            dict(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, typical_p=typical_p,
                 repetition_penalty=repetition_penalty, presence_penalty=presence_penalty,
                 frequency_penalty=frequency_penalty, no_repeat_ngram_size=no_repeat_ngram_size,
                 logit_bias=logit_bias, min_new_tokens=min_new_tokens))
        cache = self._cache(cache)
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list, tuple, np.ndarray)):
            if cache is not None:
                raise ValueError("cache= takes a single prompt, not a list")
            chains = opts.chains
            if len(chains) == 1:
                chains = chains * len(prompt)
            elif len(chains) != len(prompt):
                raise ValueError(f"got {len(chains)} samplers for {len(prompt)} prompts")
            return [self._generate_one(p, None, c, opts) for p, c in zip(prompt, chains)]
        if len(opts.chains) != 1:
            raise ValueError("a list of samplers needs a list of prompts")
        return self._generate_one(prompt, cache, opts.chains[0], opts)

    def stream(self, prompt: Prompt, **kwargs) -> Iterator[str]:
        """Yield the generated text in pieces as it is decoded; takes generate()'s options
        (not beams or n). Each piece is valid UTF-8 text: bytes of a character split across tokens
        are held back until it is complete, and so is any text that could be the start of a stop
        string. The pieces join to exactly ``generate(prompt, **kwargs).text``. Stopping the
        iteration (or Ctrl-C) ends the generation cleanly; the model stays usable."""
        return self._stream(*self._stream_setup(prompt, kwargs, "stream"))

    def stream_tokens(self, prompt: Prompt, **kwargs) -> Iterator["StreamPiece"]:
        """stream() with the tokens behind each piece: yields StreamPiece(text, token_ids,
        logprobs), the tokens completed since the previous piece (with ``logprobs=N``, their
        TokenLogprob records too). Its return value (StopIteration.value) is the Generation."""
        ids, cache, reused, chain, opts = self._stream_setup(prompt, kwargs, "stream_tokens")
        return self._stream_tokens(ids, cache, reused, chain, opts, piece_logprobs=opts.logprobs >= 0)

    def _stream_setup(self, prompt, kwargs: dict, what: str):
        """The checked (ids, cache, reused, chain, opts) of one stream; raises before it starts."""
        cache = self._cache(kwargs.pop("cache", None))
        opts = self._options({k: v for k, v in kwargs.items() if k in _RUN_KEYS},
                             {k: v for k, v in kwargs.items() if k not in _RUN_KEYS})
        if opts.num_beams > 1 or opts.n > 1:
            raise ValueError(f"{what}() produces one sequence: num_beams and n must be 1")
        if len(opts.chains) != 1:
            raise ValueError(f"{what}() takes one sampler")
        ids = self._ids(prompt)
        cache, reused = self._prepare_cache(ids, cache, opts.max_new_tokens)
        return ids, cache, reused, opts.chains[0], opts

    def chat(self, messages, **options) -> Generation:
        """The assistant's reply to ``messages`` ([{"role": "user", "content": ...}, ...]): the
        tokenizer's chat template rendered with the generation prompt, then generate() with the
        same ``options``, stopping at the end-of-turn token (the model's EOS)."""
        return self.generate(self._chat_prompt(messages), **options)

    def chat_stream(self, messages, **options) -> Iterator[str]:
        """chat() as a stream of text pieces, as stream() yields them."""
        return self.stream(self._chat_prompt(messages), **options)

    def _chat_prompt(self, messages) -> List[int]:
        if self.tokenizer is None:
            raise ValueError("chat needs a tokenizer with a chat template")
        return self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)

    # -- option handling ------------------------------------------------------------------
    def _fp32_block_bytes(self) -> int:
        c = self.config
        return 2 * c.n_layers * c.n_kv_heads * c.head_dim * self.kv_block_size * 4

    def _options(self, run: dict, sampling: dict) -> options.RunOptions:
        # The model's own sampling defaults (generation_config.json), as transformers applies them,
        # where the call names no sampling option, sampler or preset.
        defaults = self.config.generation_defaults
        if defaults and run.get("sampler") is None and run.get("preset") is None and \
                all(v is None for v in sampling.values()):
            sampling = dict(sampling, **{k: v for k, v in defaults.items() if k in sampling})
        run = dict(run)
        grammar = constraints.from_options(**{k: run.pop(k, None) for k in constraints.OPTION_KEYS})
        opts = options.resolve(run, sampling, vocab_size=self.config.vocab_size,
                               block_bytes=self._fp32_block_bytes(), default_eos=self._default_eos(),
                               make_chain=self._sampler_chain, encode=self._ids)
        if grammar is not None:  # the grammar's stage first, before every other sampler (as vLLM)
            mask = constraints.GrammarMask(grammar, self.tokenizer, self.config.vocab_size, opts.eos)
            opts = dataclasses.replace(opts, chains=[samplers.Chain([mask] + c.stages) for c in opts.chains])
        if opts.stops and self.tokenizer is None:
            raise ValueError("stop strings need a tokenizer")
        if opts.draft is not None and not isinstance(opts.draft, str):
            self._check_draft(opts.draft)
        return opts

    def _check_draft(self, draft: "Model") -> None:
        """A draft model must read and write the same tokens as this one."""
        if draft.config.vocab_size != self.config.vocab_size:
            raise ValueError(f"the draft's vocabulary has {draft.config.vocab_size} tokens, this model's "
                             f"{self.config.vocab_size}: a draft must share the model's vocabulary")
        a, b = self.tokenizer, draft.tokenizer
        if a is not None and b is not None:
            ids = list(range(0, self.config.vocab_size, max(1, self.config.vocab_size // 256)))
            if [a.decode([i]) for i in ids] != [b.decode([i]) for i in ids]:
                raise ValueError("the draft's tokenizer gives other text for the same token ids than this model's")

    def _draft_args(self, opts: options.RunOptions, n_tokens: int):
        """The draft engine and a fresh cache of its own, or (None, None) for prompt lookup."""
        if opts.draft is None or isinstance(opts.draft, str):
            return None, None
        d = opts.draft._engine
        ctx = opts.draft.config.max_position_embeddings
        return d, d.new_cache(max(1, min(ctx, n_tokens + opts.max_new_tokens)), "float32", True)

    def _sampler_chain(self, sampler, order, preset, seed, eos, options, min_tokens_to_keep=1) -> samplers.Chain:
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
        return samplers.build_chain(order=order or samplers.DEFAULT_ORDER, seed=seed, eos_token_ids=eos,
                                    preset=preset, greedy_default=True, min_tokens_to_keep=min_tokens_to_keep,
                                    **given)

    def _prepare_cache(self, ids: List[int], cache, max_new_tokens: int):
        """The cache to decode into and how many prompt tokens it already holds."""
        self._engine.check_context_window(len(ids), max_new_tokens)
        ctx = self.config.max_position_embeddings
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
    def _generate_one(self, prompt, cache, chain: samplers.Chain, opts: options.RunOptions) -> Generation:
        ids = self._ids(prompt)
        if opts.num_beams > 1:
            return self._beam(ids, cache, chain, opts)
        if opts.n > 1:
            return self._samples(ids, cache, chain, opts)
        cache, reused = self._prepare_cache(ids, cache, opts.max_new_tokens)
        if opts.stops:
            # Stop strings need the text after every token: run the stream and keep its result.
            it = self._stream(ids, cache, reused, chain, opts)
            while True:
                try:
                    next(it)
                except StopIteration as done:
                    return done.value
        if opts.draft is not None:
            r = self._engine.generate_speculative(np.asarray(ids[reused:], dtype=np.int64), chain.clone()._core,
                                                  cache, opts.decode_options(), *self._draft_args(opts, len(ids)))
            return self._generation(ids, reused, r, chain, opts, text=self._decode_text(r["token_ids"]),
                                    speculation=Speculation.from_core(r["speculation"]))
        r = self._engine.generate(np.asarray(ids[reused:], dtype=np.int64), chain.clone()._core, cache,
                                  opts.decode_options())
        return self._generation(ids, reused, r, chain, opts, text=self._decode_text(r["token_ids"]))

    def _generation(self, ids, reused, r, chain, opts: options.RunOptions, *, text, finish_reason=None,
                    stop_reason=None, speculation: Optional[Speculation] = None) -> Generation:
        out = r["token_ids"]
        lp = None
        if opts.logprobs >= 0:
            lp = [TokenLogprob(token=t, logprob=l, top=list(zip(i, v)))
                  for t, l, i, v in zip(out, r["logprobs"], r["top_ids"], r["top_logprobs"])]
        fr = finish_reason or r["finish_reason"]
        if stop_reason is None and fr == "stop" and out:
            stop_reason = out[-1]
        score = float(sum(r["logprobs"])) if r["logprobs"] else float("nan")
        return Generation(text=text, token_ids=out, finish_reason=fr, prompt_token_ids=ids,
                          prefill_seconds=r["prefill_seconds"], decode_seconds=r["decode_seconds"],
                          first_token_seconds=r["first_token_seconds"], reused_prompt_tokens=reused, seed=opts.seed,
                          sampler=repr(chain), logprobs=lp, trace=Trace.from_core(r["trace"]) if opts.trace else None,
                          stop_reason=stop_reason, speculation=speculation,
                          sequences=[GeneratedSequence(token_ids=out, text=text, score=score, finish_reason=fr,
                                                       logprobs=lp, speculation=speculation)])

    def _stream(self, ids, cache, reused, chain: samplers.Chain, opts: options.RunOptions, *, sequence: int = 0,
                logprobs: Optional[int] = None):
        """Generator of text pieces; its return value (StopIteration.value) is the Generation."""
        pieces = self._stream_tokens(ids, cache, reused, chain, opts, sequence=sequence, logprobs=logprobs)
        try:
            while True:
                try:
                    piece = next(pieces)
                except StopIteration as done:
                    return done.value
                yield piece.text
        finally:
            pieces.close()  # closing this stream ends the generation at once

    def _stream_tokens(self, ids, cache, reused, chain: samplers.Chain, opts: options.RunOptions, *,
                       sequence: int = 0, logprobs: Optional[int] = None, piece_logprobs: bool = False):
        """Generator of StreamPieces (with their TokenLogprobs when ``piece_logprobs``); its return
        value is the Generation. sequence: which of n samples (keys the random stream); logprobs
        overrides opts.logprobs."""
        prompt = np.asarray(ids[reused:], dtype=np.int64)
        dopts = opts.decode_options(sequence=sequence, logprobs=logprobs)
        seen: List[int] = []
        if opts.draft is None:
            dec = _core.Decoder(self._engine, prompt, chain.clone()._core, cache, dopts)

            def step():
                t = dec.step()
                if t >= 0:
                    seen.append(t)
                return t
        else:  # a round gives one or more tokens: handed out one at a time
            dec = _core.SpeculativeDecoder(self._engine, prompt, chain.clone()._core, cache, dopts,
                                           *self._draft_args(opts, len(ids)))
            ready: List[int] = []

            def step():
                while not ready:
                    got = dec.step()
                    if not got:
                        return -1
                    ready.extend(reversed(got))
                t = ready.pop()
                seen.append(t)
                return t

        pieces = streaming.text_pieces(step, self.tokenizer, opts.stops, opts.include_stop, with_counts=True)
        sent = 0
        while True:
            try:
                text, n = next(pieces)
            except StopIteration as done:
                end = done.value
                break
            lps = None
            if piece_logprobs:
                lps = [TokenLogprob(token=t, logprob=lp, top=list(zip(ti, tv)))
                       for t, (lp, ti, tv) in zip(seen[sent:n], dec.logprobs(sent))]
            yield StreamPiece(text=text, token_ids=seen[sent:n], logprobs=lps)
            sent = n
        r = dec.result()
        r["token_ids"] = end.tokens
        for k in ("logprobs", "top_ids", "top_logprobs"):  # a round may have run past a stop string
            r[k] = r[k][:len(end.tokens)]
        fr = "stop" if end.stop is not None else r["finish_reason"]
        if logprobs is not None:
            opts = dataclasses.replace(opts, logprobs=logprobs)
        spec = Speculation.from_core(dec.speculation()) if opts.draft is not None else None
        return self._generation(ids, reused, r, chain, opts, text=end.text, finish_reason=fr, stop_reason=end.stop,
                                speculation=spec)

    def _samples(self, ids, cache, chain: samplers.Chain, opts: options.RunOptions) -> Generation:
        base, reused = self._prepare_cache(ids, cache, opts.max_new_tokens)
        # One prefill of all but the last prompt token; each sample forks it and runs that token.
        t0 = time.perf_counter()
        if len(ids) - 1 > reused:
            self._engine.forward(np.asarray(ids[reused:-1], dtype=np.int64), base, False)
        prefill = time.perf_counter() - t0
        shared = len(ids) - 1
        results = []
        for i in range(opts.n):
            # Each sample's logprobs rank it, asked for or not.
            it = self._stream(ids, base.fork(), shared, chain, opts, sequence=i, logprobs=max(opts.logprobs, 0))
            while True:
                try:
                    next(it)
                except StopIteration as done:
                    results.append(done.value)
                    break
        results.sort(key=lambda g: -g.sequences[0].score)
        best = results[0]
        best.sequences = [g.sequences[0] for g in results]
        if opts.logprobs < 0:  # recorded only to rank the samples
            for seq in best.sequences:
                seq.logprobs = None
        best.prefill_seconds += prefill
        best.reused_prompt_tokens = reused
        if opts.logprobs < 0:
            best.logprobs = None
        return best

    def _beam(self, ids, cache, chain: samplers.Chain, opts: options.RunOptions) -> Generation:
        if opts.stops:
            raise ValueError("stop strings are not supported with beam search; use eos_token_id")
        cache, reused = self._prepare_cache(ids, cache, opts.max_new_tokens)
        selector = chain.stages[-1]
        processors = samplers.Chain([s.clone() for s in chain.stages[:-1]])
        do_sample = not isinstance(selector, samplers.Greedy)
        if isinstance(selector, samplers.Mirostat):
            raise ValueError("Mirostat cannot drive beam search")
        r = self._engine.beam_search(np.asarray(ids[reused:], dtype=np.int64), processors._core, cache,
                                     opts.beam_options(do_sample=do_sample))
        seqs = [GeneratedSequence(token_ids=h["token_ids"], text=self._decode_text(h["token_ids"]), score=h["score"],
                                  finish_reason=h["finish_reason"]) for h in r["hypotheses"]]
        best = seqs[0]
        return Generation(text=best.text, token_ids=best.token_ids, finish_reason=best.finish_reason,
                          prompt_token_ids=ids, prefill_seconds=r["prefill_seconds"],
                          decode_seconds=r["decode_seconds"], first_token_seconds=r["prefill_seconds"],
                          reused_prompt_tokens=reused, seed=opts.seed if do_sample else None,
                          sampler=f"beam_search(num_beams={opts.num_beams}, length_penalty={opts.length_penalty}, "
                                  f"early_stopping={ {1: True, 0: False, -1: 'never'}[opts.early_stopping]!r}, "
                                  f"processors={processors!r}, sample={do_sample})",
                          sequences=seqs, beam_tree=BeamTree(r["events"], self.tokenizer) if opts.trace else None,
                          stop_reason=best.token_ids[-1] if best.finish_reason == "stop" else None,
                          peak_cache_bytes=r["peak_cache_bytes"])


_RUN_KEYS = {"max_new_tokens", "seed", "sampler", "order", "preset", "eos_token_id", "stop",
             "include_stop_str_in_output", "n", "num_beams", "length_penalty", "early_stopping",
             "num_return_sequences", "logprobs", "logprobs_mode", "trace", "guidance_scale", "negative_prompt",
             "draft", "num_draft_tokens", "json_schema", "regex", "grammar", "choice"}


__all__ = ["Model", "Generation", "GeneratedSequence", "TokenLogprob"]


def __getattr__(name):
    # Names that moved elsewhere, with their warning (_compat.MOVED_NAMES).
    from . import _compat

    return _compat.moved_name(__name__, name)
