"""The Model facade: a loaded model's forward / prefill / decode / generate / stream calls.

Examples:
    >>> model = decodelab.load("stories260K")
    >>> type(model).__name__, model.config.max_position_embeddings
    ('Model', 512)
"""
from __future__ import annotations

import dataclasses
import os
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
from .results import GeneratedSequence, Generation, Speculation, StreamPiece, TokenLogprob, token_logprobs
from .text.tokenizer import Tokenizer
from .trace import Trace

Prompt = Union[str, Sequence[int]]


class Model:
    """A causal language model held by the C++ engine. Create with :func:`decodelab.load`.

    Attributes:
        config: the model's ModelConfig (architecture, sizes, context window, EOS ids, generation defaults).
        tokenizer: its Tokenizer, or None (then prompts are token ids).
        path: the file or folder it was loaded from.
        load_options: load()'s keywords other than ``threads`` (dtype, tokenizer, ...), with which
            another process loads the same model from ``path``; empty for a Model built directly.

    Args:
        engine: the C++ engine (``decodelab._core.Engine``) that holds the weights.
        config: the model's ModelConfig.
        tokenizer: its Tokenizer, or None for a model without one.
        path: the file or folder the weights came from.

    Examples:
        >>> model = decodelab.load("stories260K")
        >>> model.config.n_layers, model.config.vocab_size, model.tokenizer is not None
        (5, 512, True)
        >>> g = model.generate("Once upon a time", max_new_tokens=10, eos_token_id=[])
        >>> len(g.token_ids), g.finish_reason
        (10, 'length')
    """

    def __init__(self, engine, config: ModelConfig, tokenizer: Optional[Tokenizer], path: str):
        self._engine = engine
        self.config = config
        self.tokenizer = tokenizer
        self.path = path
        self.load_options: dict = {}

    def __repr__(self) -> str:
        c = self.config
        return (f"Model({c.family}, layers={c.n_layers}, hidden={c.hidden_size}, heads={c.n_heads}/"
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
        checkpoint is read in place (converted is 0); f16/bf16 stored weights, every one; with
        packed layers (bfloat16, int8, w8a8, int4), the norm and bias vectors too, read from
        the file rather than through the mapping. ``quantized``: bytes of bf16/int8 weights
        (``load(dtype=...)``); the fp32 pages they came from are dropped from the resident set
        after conversion."""
        return {"mapped": self._engine.mapped_bytes, "converted": self._engine.owned_bytes,
                "quantized": self._engine.quantized_bytes}

    @property
    def dtype(self) -> str:
        """The precision of the linear layers' weights: float32, bfloat16, int8, w8a8 or int4."""
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

        Memory is taken in blocks of ``kv_block_size`` tokens (see ``load``) as the sequence grows.

        Args:
            capacity: most tokens it may hold, 1 to the context window; None (the default): the
                context window. Going past it raises ValueError unless ``grow=True``.
            dtype: "float32" (None, the default), "bfloat16" (half the bytes) or "int8" (a quarter,
                plus one fp32 scale per head and position: each row of head_dim values is rounded to
                steps of 1/127 of its largest magnitude). Both move the logits slightly;
                ``benchmarks/bench_accuracy.py`` measures by how much.
            grow: True doubles the capacity, up to the context window, when the sequence needs more;
                False (the default) keeps it fixed.

        Returns:
            An empty KV cache (``decodelab._core.KVCache``) for ``prefill``, ``decode``,
            ``decode_batch`` and ``generate(cache=...)``.

        Raises:
            ValueError: ``capacity`` is not an integer in [1, context window], ``dtype`` is not
                "float32", "bfloat16" or "int8", or ``grow`` is not a bool.

        Examples:
            >>> model = decodelab.load("stories260K")
            >>> cache = model.new_cache(capacity=16, dtype="bfloat16")
            >>> cache.capacity, len(cache.token_ids), cache.grows
            (16, 0, False)
            >>> model.new_cache(capacity=1000)
            Traceback (most recent call last):
            ...
            ValueError: capacity must be in [1, 512], got 1000
        """
        ctx = self.config.max_position_embeddings
        cap = ctx if capacity is None else options.integer("capacity", capacity, 1, ctx)
        if dtype is not None and not isinstance(dtype, str):  # the names themselves are the engine's (dtypes.h)
            raise ValueError(f"cache dtype must be one of {', '.join(map(repr, _core.KV_DTYPES))}, got {dtype!r}")
        if not isinstance(grow, bool):
            raise ValueError(f"grow must be True or False, got {grow!r}")
        return self._engine.new_cache(cap, dtype or "float32", grow)

    def memory_report(self) -> dict:
        """KV-cache memory of every live cache of this model, per cache dtype.

        Blocks shared by forks are counted once in ``bytes_in_use``; ``bytes_referenced`` counts them
        per sequence (the sum of the caches' nbytes); ``bytes_allocated`` includes free blocks kept
        for reuse. Blocks are carved from chunks in huge pages; a chunk's unused tail (at most one
        2 MiB page of memory) is not counted.

        Returns:
            A dict from cache dtype ("float32", ...) to that pool's dict: dtype, block_size,
            block_bytes, blocks_allocated, blocks_in_use, blocks_shared, bytes_allocated,
            bytes_in_use and bytes_referenced.

        Examples:
            >>> model = decodelab.load("stories260K")
            >>> cache = model.new_cache()
            >>> logits = model.prefill([1, 403, 407], cache)
            >>> pool = model.memory_report()["float32"]
            >>> pool["blocks_in_use"], pool["bytes_in_use"] == pool["block_bytes"]  # 3 tokens: one block
            (1, True)
        """
        return {p["dtype"]: p for p in self._engine.pool_stats()}

    def forward(self, token_ids: Sequence[int], hidden_states: bool = False, attentions: bool = False):
        """Full logits of every position, computed without a persistent cache.

        Args:
            token_ids: token ids (ints in [0, vocab_size)) or text, 1 to the context window's tokens.
            hidden_states: True also returns the residual stream; False (the default) only logits.
            attentions: True also returns each layer's attention probabilities, as transformers'
                ``output_attentions=True`` with eager attention; False (the default) does not.

        Returns:
            The logits, shape (len, vocab), float32. With ``hidden_states=True``,
            ``(logits, hidden_states)``: a list of n_layers + 1 arrays of shape (len, hidden_size),
            the embeddings and each layer's output before the final norm (as transformers'
            ``output_hidden_states``, whose last entry is after the norm instead). With
            ``attentions=True``, ``(logits, attentions)``, or ``(logits, hidden_states,
            attentions)`` with both: a list of n_layers arrays of shape (n_heads, len, len), row i
            of head h the probabilities with which position i reads each position (zero after i
            and outside a sliding window; query heads that share a key head in grouped-query
            attention each have their own row, as transformers shows them). They are computed
            in fp32 beside the engine's own attention, from the same queries and keys.

        Raises:
            ValueError: the tokens are empty, longer than the context window or outside the
                vocabulary, text is given to a model without a tokenizer, ``hidden_states`` or
                ``attentions`` is not a bool, or the attention probabilities (4 x n_layers x
                n_heads x len x len bytes) exceed ``decodelab.options.memory_budget()``.

        Examples:
            >>> model = decodelab.load("stories260K")
            >>> ids = model.tokenizer.encode("Once upon a time")
            >>> logits = model.forward(ids)
            >>> logits.shape, logits.dtype
            ((5, 512), dtype('float32'))
            >>> logits, hidden = model.forward(ids, hidden_states=True)
            >>> len(hidden), hidden[0].shape
            (6, (5, 64))
            >>> logits, att = model.forward(ids, attentions=True)
            >>> len(att), att[0].shape, bool(np.allclose(att[0].sum(-1), 1))
            (5, (8, 5, 5), True)
        """
        ids = self._ids(token_ids)
        for name, v in (("hidden_states", hidden_states), ("attentions", attentions)):
            if not isinstance(v, bool):
                raise ValueError(f"{name} must be True or False, got {v!r}")
        if attentions:
            c = self.config
            options.check_budget(f"attentions=True over {len(ids)} tokens ({c.n_layers} layers x {c.n_heads} heads)",
                                 4.0 * c.n_layers * c.n_heads * len(ids) ** 2)
        cache = self._engine.new_cache(len(ids), "float32", False)
        if not hidden_states and not attentions:
            return self._engine.forward(np.asarray(ids, dtype=np.int64), cache, True)
        out = self._engine.forward_hidden(np.asarray(ids, dtype=np.int64), cache, attentions)
        logits, hidden = out[0], list(out[1])
        if not attentions:
            return logits, hidden
        att = list(out[2])
        return (logits, hidden, att) if hidden_states else (logits, att)

    def score(self, prompt: Union[str, Sequence[int]], continuation: Union[str, Sequence[int]], *,
              sampler=None) -> "scoring.Score":
        """The log-likelihood of ``continuation`` after ``prompt``, teacher-forced in one forward pass.

        Reported as lm-evaluation-harness's loglikelihood reports it. Text is split as lm-eval
        splits it: the continuation's tokens are those of prompt + continuation past the prompt's own.

        Args:
            prompt: the context: text, or token ids (ints in [0, vocab_size)); the same kind as
                ``continuation``. May be empty when the model has a BOS or EOS token to start from.
            continuation: the text or token ids to score; not empty.
            sampler: a decodelab.samplers Sampler or Chain whose stages (a final selector is left
                out) process each position's logits first, scoring under the processed distribution
                (a token it removed scores -inf); None (the default) scores under the model's own.

        Returns:
            A ``decodelab.eval.scoring.Score``: ``total`` (summed natural-log probability),
            ``token_logprobs``, ``token_ids`` (the continuation's), ``is_greedy`` (every token was the
            most likely one) and ``n_prompt_tokens``.

        Raises:
            ValueError: one is text and the other token ids, the continuation is empty, token ids
                are outside the vocabulary, text is given to a model without a tokenizer, or
                ``sampler`` is not a Sampler.

        Examples:
            >>> model = decodelab.load("stories260K")
            >>> s = model.score("Once upon a time", " there was")
            >>> len(s.token_ids), s.n_prompt_tokens, s.total < 0, bool(np.isclose(s.total, sum(s.token_logprobs)))
            (2, 5, True, True)
        """
        ctx, cont = scoring.split_pair(self.tokenizer, prompt, continuation, self.config.vocab_size)
        return scoring.score_ids(self, ctx, cont, self._score_chain(sampler))

    def score_batch(self, pairs, *, sampler=None) -> List["scoring.Score"]:
        """score() of each (prompt, continuation) pair, in order.

        Args:
            pairs: a list of (prompt, continuation) pairs, each as ``score`` takes them.
            sampler: as in ``score``; applied to every pair. None (the default): the model's own
                distribution.

        Returns:
            One Score per pair, in order.

        Raises:
            ValueError: ``pairs`` is not a list of 2-tuples or 2-lists, a pair is invalid as in
                ``score``, or ``sampler`` is not a Sampler.

        Examples:
            >>> model = decodelab.load("stories260K")
            >>> scores = model.score_batch([("Once upon a time", " there was"), ("The dog", " ran")])
            >>> len(scores), scores[0].total == model.score("Once upon a time", " there was").total
            (2, True)
        """
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
        """exp(mean negative log-likelihood) over the text's tokens after the first.

        A text longer than ``window`` tokens is scored in windows advanced by ``stride``, each token
        predicted from the window it ends in and scored once, as Hugging Face's sliding-window
        perplexity; a text that fits is one pass.

        Args:
            text: text, or token ids (ints in [0, vocab_size)); at least two tokens.
            window: tokens per window, 2 to the context window; None (the default): the context window.
            stride: tokens each window advances, 1 to ``window``; None (the default): ``window``.

        Returns:
            The perplexity (>= 1).

        Raises:
            ValueError: text is given to a model without a tokenizer, token ids are outside the
                vocabulary, the text has fewer than two tokens, or ``window`` or ``stride`` is out of
                range.

        Examples:
            >>> model = decodelab.load("stories260K")
            >>> text = "Once upon a time there was a little girl named Lily. She loved to play outside."
            >>> model.perplexity(text) >= 1, model.perplexity(text, window=8, stride=4) >= 1
            (True, True)
        """
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
        """Times every forward pass this thread runs inside a ``with`` block, op by op.

        The ops are norms, projections, RoPE, cache stores, attention, MLP, head, and the decoder's
        sampling, each with the weight and cache bytes it read and its multiply-adds; the block's
        target is a :class:`decodelab.profiling.Profile`, complete when the block ends.

        Args:
            probe_bandwidth: True: when the block ends, also measure the machine's read bandwidth
                (256 MiB on this model's threads) to show each op's read rate as a share of it;
                False (the default): no probe.

        Returns:
            A :class:`decodelab.profiling.Profiler`, the context manager to use in ``with``.

        Raises:
            ValueError: ``probe_bandwidth`` is not a bool.

        Examples:
            >>> model = decodelab.load("stories260K")
            >>> with model.profile() as prof:
            ...     g = model.generate("Once upon a time", max_new_tokens=8)
            >>> prof.ops("decode")[0].op, prof.passes["prompt"]
            ('embed', 1)
        """
        if not isinstance(probe_bandwidth, bool):
            raise ValueError(f"probe_bandwidth must be True or False, got {probe_bandwidth!r}")
        return profiling.Profiler(self.threads, probe_bandwidth)

    def lens(self, hidden) -> np.ndarray:
        """The logit lens: the final norm and the output head applied to rows of the residual stream.

        Args:
            hidden: residual-stream rows, shape (rows, hidden_size) or (hidden_size,), converted to
                float32 (say an entry of ``forward(..., hidden_states=True)``).

        Returns:
            The logits, shape (rows, vocab), float32 (one row for a 1-D input).

        Examples:
            >>> model = decodelab.load("stories260K")
            >>> logits, hidden = model.forward([1, 403, 407], hidden_states=True)
            >>> model.lens(hidden[2]).shape, model.lens(hidden[2][0]).shape
            ((3, 512), (1, 512))
            >>> np.allclose(model.lens(hidden[-1]), logits, atol=1e-5)  # the last layer's lens is the output
            True
        """
        h = np.asarray(hidden, dtype=np.float32)
        if h.ndim == 1:
            h = h[None]
        return self._engine.head(np.ascontiguousarray(h))

    def prefill(self, token_ids: Sequence[int], cache) -> np.ndarray:
        """Run tokens into ``cache``, after what it already holds.

        Args:
            token_ids: token ids (ints in [0, vocab_size)) or text, at least one token.
            cache: a KV cache from ``new_cache``; it gains the tokens.

        Returns:
            The logits of the last position, shape (vocab,), float32.

        Raises:
            ValueError: ``cache`` is None or not a KV cache, the tokens are empty, outside the
                vocabulary or longer than the context window, or they do not fit the cache's
                capacity (unless it was made with ``grow=True``).

        Examples:
            >>> model = decodelab.load("stories260K")
            >>> cache = model.new_cache()
            >>> ids = model.tokenizer.encode("Once upon a time")
            >>> logits = model.prefill(ids, cache)
            >>> logits.shape, cache.token_ids == ids
            ((512,), True)
            >>> nxt = int(np.argmax(logits))
            >>> step = model.decode(nxt, cache)
            >>> len(cache.token_ids), np.allclose(step, model.forward(ids + [nxt])[-1], atol=1e-4)
            (6, True)
        """
        ids = self._ids(token_ids)
        return self._engine.forward(np.asarray(ids, dtype=np.int64), self._cache_arg(cache), False)[0]

    def decode(self, token_id: int, cache) -> np.ndarray:
        """Run one token into ``cache``.

        Args:
            token_id: the token id, an int in [0, vocab_size).
            cache: a KV cache from ``new_cache``; it gains the token.

        Returns:
            The token's logits, shape (vocab,), float32.

        Raises:
            ValueError: ``token_id`` is not an int or is outside the vocabulary, ``cache`` is None or
                not a KV cache, or the cache is full (unless it was made with ``grow=True``).

        Examples:
            >>> model = decodelab.load("stories260K")
            >>> cache = model.new_cache()
            >>> model.decode(1, cache).shape, len(cache.token_ids)
            ((512,), 1)
        """
        if isinstance(token_id, bool) or not isinstance(token_id, (int, np.integer)):
            raise ValueError(f"decode takes one token id (int), got {token_id!r}")
        t = options.token_ids("token_id", [token_id], self.config.vocab_size)
        return self._engine.forward(np.asarray(t, dtype=np.int64), self._cache_arg(cache), False)[0]

    def decode_batch(self, token_ids: Sequence[int], caches: Sequence, fixed_rows: bool = False) -> np.ndarray:
        """One decode step for several sequences at once: token i continues caches[i].

        The weights are read once for the whole batch, which is how beam search advances its beams.

        Args:
            token_ids: one token id (in [0, vocab_size)) per sequence.
            caches: one KV cache per token: distinct caches of this model, any lengths.
            fixed_rows: True: every row gets the same bits whatever the batch size, as the batch
                scheduler decodes (the one-row kernels sum in another order, so the default, False,
                may differ from it in the last bits).

        Returns:
            The logits, shape (len(token_ids), vocab), float32.

        Raises:
            ValueError: a token id is outside the vocabulary, a cache is None, not a KV cache or
                given twice, or the counts of tokens and caches differ.

        Examples:
            >>> model = decodelab.load("stories260K")
            >>> a, b = model.new_cache(), model.new_cache()
            >>> _ = model.prefill([1, 403], a), model.prefill([1, 407, 261], b)
            >>> logits = model.decode_batch([378, 378], [a, b])
            >>> logits.shape, len(a.token_ids), len(b.token_ids)
            ((2, 512), 3, 4)
        """
        ids = options.token_ids("token_ids", token_ids, self.config.vocab_size)
        caches = [self._cache_arg(c) for c in caches]
        return self._engine.decode_batch(ids, caches, bool(fixed_rows))

    @options.suggest_keywords
    def generate(self, prompt: Union[Prompt, List[Prompt]], *, max_new_tokens: int = 128,
                 temperature: Optional[float] = None, top_k: Optional[int] = None, top_p: Optional[float] = None,
                 min_p: Optional[float] = None, typical_p: Optional[float] = None,
                 repetition_penalty: Optional[float] = None, presence_penalty: Optional[float] = None,
                 frequency_penalty: Optional[float] = None, no_repeat_ngram_size: Optional[int] = None,
                 logit_bias: Optional[dict] = None, min_new_tokens: Optional[int] = None,
                 bad_words_ids: Optional[Sequence[Sequence[int]]] = None, sequence_bias=None,
                 seed: Optional[int] = None, sampler=None, order: Optional[str] = None, preset: Optional[str] = None,
                 eos_token_id: Union[None, int, Sequence[int]] = None, stop: Union[None, str, Sequence[str]] = None,
                 include_stop_str_in_output: bool = False, n: int = 1, num_beams: int = 1,
                 length_penalty: float = 1.0, early_stopping: Union[bool, str] = False,
                 num_return_sequences: Optional[int] = None, cache=None, logprobs: Optional[int] = None,
                 logprobs_mode: str = "raw", trace: Union[bool, str] = False,
                 guidance_scale: Optional[float] = None, negative_prompt: Optional[Prompt] = None,
                 draft=None, num_draft_tokens: Optional[int] = None, draft_p_min: Optional[float] = None,
                 json_schema=None, regex: Optional[str] = None, grammar=None,
                 choice: Optional[Sequence[str]] = None):
        """Generate a continuation of ``prompt`` (text or token ids), or of each prompt in a list
        (then a list of Generation comes back, equal to the one-by-one results).

        Sampling: the familiar keywords (``temperature``, ``top_k``, ``top_p``, ``min_p``,
        ``typical_p``, ``repetition_penalty``, ``presence_penalty``, ``frequency_penalty``,
        ``no_repeat_ngram_size``, ``logit_bias``, ``min_new_tokens``, ``bad_words_ids``,
        ``sequence_bias``) build a Chain in the order of
        ``order``; ``preset`` starts from a named configuration; or pass ``sampler=Chain([...])``
        yourself. ``temperature`` 0 (the default) is greedy decoding: penalties still apply, the
        truncation samplers would not, so giving one is an error. A call that names no sampling
        option, ``sampler`` or ``preset`` uses the model's own defaults where its folder has a
        generation_config.json (``config.generation_defaults``: with do_sample, its temperature,
        top_k, top_p, ... with transformers' defaults for those it leaves out; repetition_penalty
        always), as transformers' generate() does; ``temperature=0`` asks for greedy decoding then.
        A chain that does not end in a selector gets ``Dist(seed)`` appended. The random stream
        depends only on (seed, sample, step), so a prompt gives the same tokens alone or inside a
        list. A sampling keyword at its no-op value adds no stage.

        Stopping: ``eos_token_id``, ``max_new_tokens``, ``min_new_tokens``, and ``stop`` strings,
        matched across token boundaries. ``Generation.finish_reason`` is "stop" or "length",
        ``stop_reason`` the EOS id or string.

        Several sequences: ``num_beams > 1`` runs beam search as transformers does (with
        ``temperature > 0`` the beams sample); ``n > 1`` draws n samples that share one prefill.
        ``Generation.sequences`` lists them best first; ``text`` and ``token_ids`` are the best
        one's. Beams and samples share the prompt's KV blocks through forked caches.

        Guidance: ``guidance_scale`` (not 1) runs classifier-free guidance as transformers does: an
        unconditional sequence, ``negative_prompt`` (text or ids) or else the prompt's last token,
        advances beside this one with the same tokens in one batched step, and the scores become
        scale x (log p(cond) - log p(uncond)) + log p(uncond), before every sampler.

        Speculative decoding: ``draft`` proposes ``num_draft_tokens`` tokens; one pass of this model
        checks them all, and rejection sampling keeps the tokens the chain's processed distribution
        allows, plus one of its own. Greedy output is the same token for token; sampled output
        follows the same distribution as without a draft (a seed then gives other tokens than plain
        sampling). ``Generation.speculation`` counts drafted and accepted tokens, and records each
        round.

        Constrained decoding (needs llguidance): ``json_schema``, ``regex``, ``grammar`` or
        ``choice``, one at a time: a first sampler stage removes every token the grammar does not
        allow next, and end-of-sequence until the grammar is complete (a length cut before that
        ends with finish_reason "length"). It works with samples, beams, streams and drafts
        (drafted tokens the grammar refuses are rejected), and traces show what it removed.

        Looking inside: ``logprobs`` and ``trace`` record per-token log-probabilities and what
        every sampler stage did. The loop runs in C++ with the GIL released; Ctrl-C stops it
        cleanly and leaves the model usable.

        Args:
            prompt: text (str) or token ids (ints in [0, vocab_size)), 1 token to the context
                window; or a list of such prompts, each generated in turn with the same options.
            max_new_tokens: the most tokens to generate, >= 0 (0 generates nothing); default 128.
                The prompt's tokens + max_new_tokens - 1 must fit the context window.
            temperature: 0 (greedy decoding) or >= 1e-6 (finite in float32); no-op 1 (the model's
                distribution as it is). None (the default): 0, or the model's generation_config.json
                default.
            top_k: keep the k most likely tokens (and those tied with the k-th), k >= 0; no-op 0
                (or k >= vocabulary size). None (the default): off. Needs temperature > 0.
            top_p: nucleus sampling, keep the most likely tokens until their mass reaches p,
                0 < p <= 1; no-op 1. None (the default): off. Needs temperature > 0.
            min_p: keep tokens with at least p times the top token's probability, 0 <= p <= 1;
                no-op 0. None (the default): off. Needs temperature > 0.
            typical_p: locally typical sampling, 0 < p <= 1; no-op 1. None (the default): off.
                Needs temperature > 0; not in the "vllm" order.
            repetition_penalty: divide positive logits of tokens in the prompt and output by it
                (multiply negative ones), 0.001 to 1000; no-op 1. None (the default): off, or the
                model's generation_config.json value.
            presence_penalty: subtracted from every token that occurs in the output so far,
                -2 to 2; no-op 0. None (the default): off.
            frequency_penalty: subtracted once per occurrence in the output so far, -2 to 2;
                no-op 0. None (the default): off.
            no_repeat_ngram_size: ban tokens that would repeat an n-gram of this size, >= 0;
                no-op 0. None (the default): off. Only in the "hf" order.
            logit_bias: a dict from token id (in the vocabulary) to a bias added to its logit
                (finite, or -inf to ban it); no-op {}. None (the default): off.
            min_new_tokens: ban the EOS ids until this many tokens are generated, >= 0; no-op 0.
                None (the default): off. Not in the "llama.cpp" order.
            bad_words_ids: token-id sequences that must not be generated (transformers' name): a
                sequence's last token is banned where the text ends with the rest of it. None (the
                default) or empty: off. Not in the "llama.cpp" order.
            sequence_bias: {tuple of token ids: bias} (transformers' name): the bias is added to a
                sequence's last token where the text ends with the rest (always, for one token);
                -inf bans. None (the default) or empty: off. Only in the "hf" order.
            seed: the seed of the random stream, 0 to 2**64 - 1. None (the default) draws a fresh
                seed, reported in ``Generation.seed``.
            sampler: a decodelab.samplers Sampler or Chain used instead of the sampling keywords
                (not together with them, ``order`` or ``preset``); with a list of prompts, a list
                of samplers gives each prompt its own. None (the default): the keywords' chain.
            order: the order the keywords' stages run in: "hf" (None, the default), "vllm" or
                "llama.cpp" (see ``decodelab.samplers.ORDERS``); a keyword outside the order is an
                error.
            preset: a named starting configuration, "factual", "balanced" or "creative"
                (``decodelab.samplers.PRESETS``); the keywords override its values. None (the
                default): none.
            eos_token_id: the ids that end the text: an int or a list of ids in the vocabulary;
                ``[]``: never stop on EOS. None (the default): the model's own.
            stop: a non-empty string or a list of them, matched across token boundaries; the text
                ends before the first match. Needs a tokenizer; not with beam search. None (the
                default): no stop strings.
            include_stop_str_in_output: True keeps the matched stop string in the text; False (the
                default) cuts it.
            n: samples to draw, >= 1, sharing one prefill; default 1. Not with ``num_beams > 1``.
            num_beams: beams of beam search, >= 1; default 1 (no beam search).
            length_penalty: beam search: a hypothesis scores sum_logprobs / length **
                length_penalty, -100 to 100; default 1.0 (0: no length normalisation). Unused
                without beams.
            early_stopping: beam search, as transformers: True stops once num_beams hypotheses are
                finished; False (the default) also stops when the best running beam, scored at its
                current length, cannot beat the worst finished one (a heuristic); "never" scores it
                at max_new_tokens instead (with length_penalty > 0), stopping only when no better
                hypothesis can come. Unused without beams.
            num_return_sequences: beam search: how many hypotheses to return in ``sequences``,
                1 to ``num_beams``. None (the default): 1.
            cache: a KV cache from ``new_cache`` to continue from (single prompt only): the common
                prefix of its tokens and the prompt is reused, only the rest prefilled. None (the
                default): a fresh cache.
            logprobs: record per token its logprob and the N most likely alternatives
                (``Generation.logprobs``), N from 0 to vocab_size. None (the default): none. Not
                with beam search (scores are in ``Generation.sequences``).
            logprobs_mode: "raw" (the default): logprobs under the model's distribution;
                "processed": under the processed one the token was drawn from.
            trace: True records what every sampler stage did (``Generation.trace``), and for beam
                search the beam tree (``Generation.beam_tree``); "full" also keeps every stage's
                full logits; False (the default): no trace. Not with a draft.
            guidance_scale: classifier-free guidance scale, -1e4 to 1e4; no-op 1. None (the
                default): off. Needs ``num_beams=1``, ``n=1`` and no draft.
            negative_prompt: the unconditional sequence of guidance (text or ids). Needs
                ``guidance_scale`` != 1. None (the default): the prompt's last token.
            draft: a Model with this one's vocabulary (say the same model with int8 weights), or
                "prompt_lookup" (the tokens that followed an earlier occurrence of the text's last two
                tokens). Not with beam search or ``trace``. None (the default): no speculative
                decoding.
            num_draft_tokens: tokens the draft proposes per round, 1 to 64. None (the default): 5,
                or 10 for prompt lookup. Needs a draft.
            draft_p_min: a draft model's round ends where the most likely token of its processed
                distribution has less than this probability (as llama.cpp's ``--draft-p-min``), so
                ``num_draft_tokens`` becomes the most per round and a doubtful position costs the
                target no row; in [0, 1]. The rule reads the draft's distribution before a token
                is drawn, so sampled output keeps its distribution. None (the default): 0, off.
                Needs a draft model.
            json_schema: constrain the output to JSON matching this schema (a dict or its JSON
                text). None (the default): no constraint.
            regex: constrain the output so the whole of it matches this regular expression (str).
                None (the default): no constraint.
            grammar: constrain the output to a grammar: a Lark grammar str, or
                ``decodelab.Grammar(text, syntax="gbnf")``. None (the default): no constraint.
            choice: constrain the output to one of these strings (a list of str). None (the
                default): no constraint.

        Returns:
            A Generation; for a list of prompts, a list of Generation in the same order.

        Raises:
            ValueError: an option is out of its range or of the wrong type (the message names the
                parameter, the value and the limit); options conflict (``sampler`` with sampling
                keywords, ``order`` or ``preset``; a truncation sampler with temperature 0; a keyword
                outside ``order``; ``num_beams`` with ``n``, ``stop``, ``logprobs`` or a draft;
                ``guidance_scale`` with beams, samples or a draft; ``negative_prompt`` without
                guidance; ``num_draft_tokens`` without a draft; ``draft_p_min`` without a draft
                model; ``trace`` with a draft; more than one of json_schema, regex, grammar and
                choice; ``cache`` with a list of prompts; a list of samplers without a list of
                prompts, or of another length); a prompt is
                empty, outside the vocabulary, or with ``max_new_tokens`` does not fit the context
                window or the cache; text or stop strings are given to a model without a tokenizer;
                a draft's vocabulary or tokenizer differs from this model's; or beams, samples or
                a full trace would need more than the memory budget (half the machine's memory,
                or ``DECODELAB_MEMORY_BUDGET`` bytes).
            ImportError: constrained decoding is asked for and llguidance is not installed.
            KeyboardInterrupt: Ctrl-C during the loop; the model stays usable.

        Examples:
            >>> model = decodelab.load("stories260K")
            >>> g = model.generate("Once upon a time", max_new_tokens=20, eos_token_id=[])
            >>> len(g.token_ids), g.finish_reason, g.sampler
            (20, 'length', 'Chain([Greedy()])')

            Sampling with a fixed seed reproduces the tokens, alone or inside a list:

            >>> kw = dict(max_new_tokens=12, temperature=0.8, top_p=0.9, seed=42)
            >>> g = model.generate("Once upon a time", **kw)
            >>> g.sampler
            'Chain([Temperature(0.8), TopP(0.9), Dist(seed=42)])'
            >>> g.token_ids == model.generate(["Once upon a time", "The dog"], **kw)[0].token_ids
            True

            Stop strings, beams, samples and logprobs:

            >>> g = model.generate("Once upon a time", max_new_tokens=100, stop=".")
            >>> g.finish_reason, g.stop_reason, g.text.endswith(".")
            ('stop', '.', False)
            >>> beams = model.generate("Once upon a time", max_new_tokens=8, num_beams=3, num_return_sequences=2)
            >>> len(beams.sequences)
            2
            >>> samples = model.generate("Once upon a time", max_new_tokens=8, n=3, temperature=1.0, seed=0)
            >>> len(samples.sequences), samples.seed
            (3, 0)
            >>> g = model.generate("Once upon a time", max_new_tokens=4, logprobs=2)
            >>> len(g.logprobs), len(g.logprobs[0].top)
            (4, 2)
            >>> model.generate("Once upon a time", top_p=0.9)
            Traceback (most recent call last):
            ...
            ValueError: top_p has no effect with temperature=0 (greedy decoding); set temperature > 0 to sample
        """
        opts = self._options(dict(
            max_new_tokens=max_new_tokens, seed=seed, sampler=sampler, order=order, preset=preset,
            eos_token_id=eos_token_id, stop=stop, include_stop_str_in_output=include_stop_str_in_output, n=n,
            num_beams=num_beams, length_penalty=length_penalty, early_stopping=early_stopping,
            num_return_sequences=num_return_sequences, logprobs=logprobs, logprobs_mode=logprobs_mode, trace=trace,
            guidance_scale=guidance_scale, negative_prompt=negative_prompt, draft=draft,
            num_draft_tokens=num_draft_tokens, draft_p_min=draft_p_min, json_schema=json_schema, regex=regex,
            grammar=grammar, choice=choice),
            dict(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, typical_p=typical_p,
                 repetition_penalty=repetition_penalty, presence_penalty=presence_penalty,
                 frequency_penalty=frequency_penalty, no_repeat_ngram_size=no_repeat_ngram_size,
                 logit_bias=logit_bias, min_new_tokens=min_new_tokens, bad_words_ids=bad_words_ids,
                 sequence_bias=sequence_bias))
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
        """Yield the generated text in pieces as it is decoded; takes generate()'s options (not beams or n).

        Each piece is valid UTF-8 text: bytes of a character split across tokens are held back
        until it is complete, and so is any text that could be the start of a stop string. The
        pieces join to exactly ``generate(prompt, **kwargs).text``. Stopping the iteration (or
        Ctrl-C) ends the generation cleanly; the model stays usable. The options are checked, and
        the prompt prefilled, before the first piece is asked for.

        Args:
            prompt: text or token ids, as ``generate`` takes a single prompt.
            **kwargs: ``generate``'s keywords, with their ranges and defaults, except that
                ``num_beams`` and ``n`` must be 1 and ``sampler`` is one Sampler or Chain.

        Returns:
            An iterator of str pieces; when it ends, its StopIteration value is the Generation.

        Raises:
            ValueError: an option is invalid as ``generate`` checks it, ``num_beams`` or ``n`` is
                not 1, or a list of samplers is given.

        Examples:
            >>> model = decodelab.load("stories260K")
            >>> pieces = list(model.stream("Once upon a time", max_new_tokens=20))
            >>> all(isinstance(p, str) for p in pieces)
            True
            >>> "".join(pieces) == model.generate("Once upon a time", max_new_tokens=20).text
            True
        """
        return self._stream(*self._stream_setup(prompt, kwargs, "stream"))

    def stream_tokens(self, prompt: Prompt, **kwargs) -> Iterator["StreamPiece"]:
        """stream() with the tokens behind each piece.

        Yields StreamPiece(text, token_ids, logprobs): the tokens completed since the previous piece
        (with ``logprobs=N``, their TokenLogprob records too).

        Args:
            prompt: text or token ids, as ``generate`` takes a single prompt.
            **kwargs: ``generate``'s keywords, as ``stream`` takes them (``num_beams`` and ``n``
                must be 1).

        Returns:
            An iterator of StreamPiece; its return value (StopIteration.value) is the Generation.

        Raises:
            ValueError: an option is invalid as ``stream`` checks it.

        Examples:
            >>> model = decodelab.load("stories260K")
            >>> pieces = list(model.stream_tokens("Once upon a time", max_new_tokens=10, logprobs=1))
            >>> g = model.generate("Once upon a time", max_new_tokens=10)
            >>> [t for p in pieces for t in p.token_ids] == g.token_ids
            True
            >>> sum(len(p.logprobs) for p in pieces) == len(g.token_ids)
            True
        """
        ids, cache, reused, chain, opts = self._stream_setup(prompt, kwargs, "stream_tokens")
        return self._stream_tokens(ids, cache, reused, chain, opts, piece_logprobs=opts.logprobs >= 0)

    def _stream_setup(self, prompt, kwargs: dict, what: str):
        """The checked (ids, cache, reused, chain, opts) of one stream; raises before it starts."""
        options.check_keywords(what, kwargs, Model.generate.keywords)
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

    def chat(self, messages, *, tools=None, chat_template: Optional[str] = None, **options) -> Generation:
        """The assistant's reply to ``messages``.

        The chat template is rendered with the generation prompt (as transformers'
        ``apply_chat_template(..., add_generation_prompt=True)`` renders it), then generate() runs with
        the same ``options``. The reply runs to the end-of-turn token (the model's EOS) or to the end
        of the context window, as OpenAI's chat API does, unless ``max_new_tokens`` is given.

        Args:
            messages: the conversation, ``[{"role": "user", "content": ...}, ...]``, oldest first.
            tools: JSON-schema function specs for a template that writes tools into the prompt
                (Qwen2.5's does), as transformers and OpenAI's API take them; default None. Tool calls
                in the reply are text: decodelab does not parse them.
            chat_template: a Jinja chat template to use instead of the tokenizer's own (for a file
                without one); default None.
            **options: ``generate``'s keywords, with their ranges and defaults, except
                ``max_new_tokens``, which defaults to what the context window leaves.

        Returns:
            The Generation of the reply.

        Raises:
            ValueError: the model has no tokenizer, there is no chat template (the message says how
                to pass one), a message is malformed, ``tools`` is not a list of dicts, or an option is
                invalid as ``generate`` checks it.

        Examples:
            >>> model = decodelab.load("stories260K")  # a story model: give it a template to show the call
            >>> template = "{% for m in messages %}{{ m.content }}{% endfor %}"
            >>> g = model.chat([{"role": "user", "content": "Once upon a time"}], chat_template=template,
            ...                max_new_tokens=10)
            >>> ids = model.tokenizer.encode("Once upon a time")  # BOS first; this template writes none
            >>> g.prompt_token_ids == ids[1:], len(g.token_ids) <= 10
            (True, True)
            >>> model.chat([{"role": "user", "content": "Hi"}])
            Traceback (most recent call last):
            ...
            ValueError: stories260K.bin has no chat template: pass one as model.chat(messages, chat_template=...) or set model.tokenizer.chat_template (decodelab chat and serve take --chat-template FILE); generate() needs none
        """
        ids = self._chat_prompt(messages, tools, chat_template)
        return self.generate(ids, **self._chat_options(ids, options))

    def chat_stream(self, messages, *, tools=None, chat_template: Optional[str] = None, **options) -> Iterator[str]:
        """chat() as a stream of text pieces, as stream() yields them.

        Args:
            messages: the conversation, ``[{"role": "user", "content": ...}, ...]``, oldest first.
            tools: as ``chat`` takes them; default None.
            chat_template: as ``chat`` takes it; default None: the tokenizer's own.
            **options: ``stream``'s keywords (``num_beams`` and ``n`` must be 1); ``max_new_tokens``
                defaults to what the context window leaves.

        Returns:
            An iterator of str pieces that join to ``chat(messages, **options).text``.

        Raises:
            ValueError: as ``chat`` raises it, or ``num_beams`` or ``n`` is not 1.

        Examples:
            >>> model = decodelab.load("stories260K")
            >>> model.tokenizer.chat_template = "{% for m in messages %}{{ m.content }}{% endfor %}"
            >>> msgs = [{"role": "user", "content": "Once upon a time"}]
            >>> "".join(model.chat_stream(msgs, max_new_tokens=10)) == model.chat(msgs, max_new_tokens=10).text
            True
        """
        ids = self._chat_prompt(messages, tools, chat_template)
        return self.stream(ids, **self._chat_options(ids, options))

    def _chat_prompt(self, messages, tools, chat_template) -> List[int]:
        if self.tokenizer is None:
            raise ValueError(f"{self._name()} has no tokenizer: chat needs one with a chat template")
        if chat_template is None and self.tokenizer.chat_template is None:
            raise ValueError(f"{self._name()} has no chat template: pass one as model.chat(messages, chat_template=...) "
                             "or set model.tokenizer.chat_template (decodelab chat and serve take --chat-template "
                             "FILE); generate() needs none")
        return self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, tools=tools,
                                                  chat_template=chat_template)

    def _chat_options(self, ids: List[int], options: dict) -> dict:
        """A chat reply runs to its end-of-turn token or the context window unless capped."""
        if "max_new_tokens" not in options:
            options = dict(options, max_new_tokens=max(0, self.config.max_position_embeddings - len(ids) + 1))
        return options

    def _name(self) -> str:
        return os.path.basename(os.path.normpath(self.path)) if self.path else "this model"

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

    def _token_text(self, token: int) -> str:
        return self.tokenizer.decode([token]) if self.tokenizer is not None else ""

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
            lp = token_logprobs(out, r["logprobs"], r["top_ids"], r["top_logprobs"], self._token_text)
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
                rows = dec.logprobs(sent)
                lps = token_logprobs(seen[sent:n], [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows],
                                     self._token_text)
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
             "draft", "num_draft_tokens", "draft_p_min", "json_schema", "regex", "grammar", "choice"}


__all__ = ["Model", "Generation", "GeneratedSequence", "TokenLogprob"]


def __getattr__(name):
    # Names that moved elsewhere, with their warning (_compat.MOVED_NAMES).
    from decodelab import _compat  # absolute: import may call this before __spec__ is the module's

    return _compat.moved_name(__name__, name)
