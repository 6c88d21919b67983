"""Continuous batching: a BatchEngine runs the model's C++ Scheduler on one thread of its own.
Requests join the running batch once their prompt is prefilled (in chunks) and leave when they
finish; each step decodes every running sequence in one pass with the GIL released. Each request
is a BatchRequest: its text pieces as they come, then its Generation.

Examples:
    >>> from decodelab.serve.engine import BatchEngine
    >>> with BatchEngine(decodelab.load("stories260K")) as engine:
    ...     requests = [engine.submit(p, max_new_tokens=5, seed=0) for p in ("Once upon a time", "The dog")]
    ...     [type(r.result(timeout=30)).__name__ for r in requests]
    ['Generation', 'Generation']
"""
from __future__ import annotations

import queue
import secrets
import threading
from typing import Callable, Iterator, List, Optional

import numpy as np

from .._native import _core
from ..text import streaming as text_stream
from ..results import Generation, StreamPiece, token_logprobs

QueueFull = _core.QueueFull  # a RuntimeError: submit() found max_waiting requests waiting already

__all__ = ["BatchEngine", "BatchRequest", "QueueFull"]

# generate() keywords a batched request takes besides the sampling ones.
_RUN = {"max_new_tokens", "seed", "sampler", "order", "preset", "eos_token_id", "stop", "include_stop_str_in_output",
        "logprobs", "logprobs_mode", "json_schema", "regex", "grammar", "choice"}


class BatchRequest:
    """One request in a BatchEngine, as ``BatchEngine.submit`` returns it (not made directly).

    Iterate it for StreamPieces (blocking; the iteration raises the request's error if it
    failed), call result() for the Generation, cancel() to end it at the next step. With
    ``listener`` given to submit(), events go to it instead, on the engine's thread: ("piece",
    StreamPiece), then ("done", Generation) or ("error", exception); do not iterate such a request
    (nothing reaches its own queue, so the iteration would wait for ever), use result().

    ``id`` is the scheduler's id of the request, ``prompt_token_ids`` its prompt and ``sequence``
    its sample number.

    Args:
        engine: the BatchEngine that runs it.
        ids: the prompt's token ids.
        chain: the sampler Chain it decodes with.
        opts: the RunOptions that ``Model._options`` made of submit()'s keywords.
        sequence: which sample of its seed it is, >= 0.
        listener: a function that takes each event, called on the engine's thread; default None
            (events queue up for iteration).

    Examples:
        >>> from decodelab.serve.engine import BatchEngine
        >>> with BatchEngine(decodelab.load("stories260K")) as engine:
        ...     request = engine.submit("Once upon a time", max_new_tokens=6, seed=0)
        ...     pieces = list(request)  # StreamPieces as they are decoded
        ...     g = request.result()
        >>> request.done, sum(len(p.token_ids) for p in pieces) == len(g.token_ids)
        (True, True)
        >>> "".join(p.text for p in pieces) == g.text
        True
    """

    def __init__(self, engine: "BatchEngine", ids: List[int], chain, opts, sequence: int,
                 listener: Optional[Callable] = None):
        self.engine, self.prompt_token_ids, self._chain, self._opts = engine, ids, chain, opts
        self.sequence = sequence
        self.id = -1
        self._text = text_stream.TextStream(engine.model.tokenizer, opts.stops, opts.include_stop)
        self._logprobs: List[TokenLogprob] = []
        self._sent = 0
        self._events: "queue.Queue" = queue.Queue()
        self._listener = listener or self._events.put
        self._generation: Optional[Generation] = None
        self._done = threading.Event()

    def cancel(self) -> None:
        """End the generation at the next step; result() then says finish_reason "cancelled".

        Does nothing once the request is done.
        """
        if not self._done.is_set():
            self.engine._scheduler.cancel(self.id)

    @property
    def done(self) -> bool:
        """True once the request has finished, been cancelled or failed (result() no longer waits)."""
        return self._done.is_set()

    def __iter__(self) -> Iterator[StreamPiece]:
        """The request's StreamPieces as the engine decodes them, blocking between them.

        Yields:
            StreamPiece: the new text with its token ids (and logprobs when asked for).

        Raises:
            ValueError: the request was submitted with a ``listener``, which receives its events instead.
            Exception: the error the request failed with.
        """
        if self._listener != self._events.put:
            raise ValueError(f"request {self.id} sends its events to the listener given to submit(); "
                             "iterate a request submitted without one, or call result()")
        while True:
            kind, value = self._events.get()
            if kind == "piece":
                yield value
            elif kind == "error":
                raise value
            else:
                return

    def result(self, timeout: Optional[float] = None) -> Generation:
        """The request's Generation, once it is done.

        Args:
            timeout: seconds to wait at most, > 0; default None (wait until it is done).

        Returns:
            The Generation, as ``Model.generate`` would give for one sequence; a cancelled request
            has finish_reason "cancelled".

        Raises:
            TimeoutError: the request did not finish within ``timeout`` seconds.
            Exception: the error the request failed with (the engine's step raised it).
        """
        if not self._done.wait(timeout):
            raise TimeoutError(f"request {self.id} did not finish within {timeout} s")
        if isinstance(self._generation, BaseException):
            raise self._generation
        return self._generation

    # -- on the engine's thread ---------------------------------------------------------------
    def _piece(self, text: str) -> None:
        n = len(self._text.tokens)
        lps = self._logprobs[self._sent:n] if self._opts.logprobs >= 0 else None
        self._listener(("piece", StreamPiece(text=text, token_ids=self._text.tokens[self._sent:n], logprobs=lps)))
        self._sent = n

    def _tokens(self, tokens: List[int], logprobs) -> None:
        if self._text.stopped:
            return
        for k, t in enumerate(tokens):
            if logprobs is not None:
                lp, ti, tv = logprobs[k]
                self._logprobs += token_logprobs([t], [lp], [ti], [tv], self.engine.model._token_text)
            piece = self._text.push(t)
            if piece:
                self._piece(piece)
            if self._text.stopped:  # a stop string: the scheduler ends it at the next step
                self.engine._scheduler.cancel(self.id)
                return

    def _finish(self, r: dict) -> None:
        rest = self._text.finish()
        if rest or (self._sent < len(self._text.tokens)):
            self._piece(rest)
        end = self._text.end()
        reason = r["finish_reason"]
        if end.stop is not None:
            reason = "stop"
        r["token_ids"] = end.tokens
        r["logprobs"], r["top_ids"], r["top_logprobs"] = (r[k][:len(end.tokens)]
                                                          for k in ("logprobs", "top_ids", "top_logprobs"))
        g = self.engine.model._generation(self.prompt_token_ids, r["reused_prompt_tokens"], r, self._chain,
                                          self._opts, text=end.text, finish_reason=reason, stop_reason=end.stop)
        self._generation = g
        self._done.set()
        self._listener(("done", g))

    def _fail(self, e: BaseException) -> None:
        self._generation = e
        self._done.set()
        self._listener(("error", e))


class BatchEngine:
    """Continuous batching on one model: submit() requests from any thread.

    One engine thread (started at once, a daemon) steps the scheduler while any request is alive.
    ``max_running`` sequences decode together (more wait, up to ``max_waiting``, then submit()
    raises QueueFull); prompts run in chunks of ``prefill_chunk`` tokens, at most
    ``prefill_budget`` per step; ``prefix_cache_blocks`` full prompt blocks are kept by content for
    later prompts that start the same way. Use it as a context manager, or call close(), to stop
    the thread.

    Seeded requests give the same tokens whatever else runs: the decode pass gives each row the same
    arithmetic at every batch size, a prompt's chunks depend on that prompt alone, and the random
    stream on (seed, sequence, step). Prefix reuse would change which pass computed a cached block,
    so requests with a seed never start from cached blocks (they do leave theirs for others).

    Args:
        model: the loaded decodelab Model to run (its weights are shared, not copied).
        max_running: how many sequences decode together, >= 1; default 32.
        max_waiting: how many requests may wait beyond those, >= 0; default 256.
        prefill_chunk: the prompt tokens one chunk of a prefill runs, >= 1; default 256.
        prefill_budget: the prompt tokens prefilled per step across all requests, >= 1; default 512.
        prefix_cache_blocks: full prompt blocks kept by content after their request ends, >= 0;
            default 0 (no prefix reuse).
        kv_dtype: the KV cache's dtype, one of ``decodelab._core.KV_DTYPES`` ("float32",
            "bfloat16", "int8"); default "float32".

    Examples:
        >>> from decodelab.serve.engine import BatchEngine
        >>> model = decodelab.load("stories260K")
        >>> with BatchEngine(model, max_running=4) as engine:
        ...     a = engine.submit("Once upon a time", max_new_tokens=8, seed=1)
        ...     b = engine.submit("Once upon a time", max_new_tokens=8, seed=1, temperature=0.5)
        ...     ga, gb = a.result(timeout=30), b.result(timeout=30)
        >>> alone = model.generate("Once upon a time", max_new_tokens=8, seed=1)
        >>> ga.token_ids == alone.token_ids  # a seeded request: the same tokens as generate()
        True
    """

    def __init__(self, model, *, max_running: int = 32, max_waiting: int = 256, prefill_chunk: int = 256,
                 prefill_budget: int = 512, prefix_cache_blocks: int = 0, kv_dtype: str = "float32"):
        self.model = model
        self._scheduler = _core.Scheduler(model._engine, max_running=max_running, max_waiting=max_waiting,
                                          prefill_chunk=prefill_chunk, prefill_budget=prefill_budget,
                                          prefix_cache_blocks=prefix_cache_blocks, kv_dtype=kv_dtype)
        self._requests = {}
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="decodelab-batch", daemon=True)
        self._thread.start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def stats(self) -> dict:
        """The scheduler's counters: requests running, waiting and prefilling, steps, tokens, cached blocks.

        Returns:
            A dict of ints with the keys cached_blocks, decode_rows, generated_tokens, prefilling,
            prompt_tokens, reused_tokens, running, steps and waiting.
        """
        return self._scheduler.stats()

    def submit(self, prompt, *, sequence: int = 0, listener: Optional[Callable] = None, **options) -> BatchRequest:
        """Queue ``prompt`` with generate()'s sampling and stopping keywords.

        One sequence per request: not ``n`` or beams (submit n requests with ``sequence`` 0..n-1
        and one seed for generate's n samples). Without a seed the request gets a random one and
        may start from cached prompt blocks.

        Args:
            prompt: text or a sequence of token ids.
            sequence: which sample of a seed it is, as generate's n samples number theirs, >= 0;
                default 0.
            listener: a function called on the engine's thread with each event, ("piece",
                StreamPiece), then ("done", Generation) or ("error", exception), instead of
                queueing them for iteration; it must not block; default None.
            **options: generate()'s keywords: sampling (temperature, top_k, top_p, min_p, ...,
                sampler, order, preset), max_new_tokens, seed, eos_token_id, stop,
                include_stop_str_in_output, logprobs, logprobs_mode and the constraints
                (json_schema, regex, grammar, choice). n, num_beams, cache, trace,
                guidance_scale, negative_prompt and draft are refused.

        Returns:
            The BatchRequest, already queued.

        Raises:
            ValueError: an option the batch engine does not support, a bad option value, or
                options that make more than one sampler.
            RuntimeError: the engine is closed.
            QueueFull: ``max_waiting`` requests wait already.
        """
        m = self.model
        for k in ("n", "num_beams", "cache", "trace", "guidance_scale", "negative_prompt", "draft"):
            if options.get(k) not in (None, 1, False) or (k == "cache" and options.get(k) is not None):
                raise ValueError(f"{k} is not supported by the batch engine")
            options.pop(k, None)
        seeded = options.get("seed") is not None
        if not seeded:
            options["seed"] = secrets.randbits(63)
        opts = m._options({k: v for k, v in options.items() if k in _RUN},
                          {k: v for k, v in options.items() if k not in _RUN})
        if len(opts.chains) != 1:
            raise ValueError("a batched request takes one sampler")
        ids = m._ids(prompt)
        chain = opts.chains[0]
        req = BatchRequest(self, ids, chain, opts, sequence, listener)
        with self._lock:
            if self._closed:
                raise RuntimeError("the batch engine is closed")
            req.id = self._scheduler.add(np.asarray(ids, dtype=np.int64), chain.clone()._core,
                                         opts.decode_options(sequence=sequence), not seeded)
            self._requests[req.id] = req
            self._wake.notify()
        return req

    def close(self) -> None:
        """Cancel what runs, stop the engine thread; later submit() calls raise RuntimeError.

        Waits for the thread to end; cancelled requests' result() says finish_reason "cancelled".
        """
        with self._lock:
            self._closed = True
            for rid in self._requests:
                self._scheduler.cancel(rid)
            self._wake.notify()
        self._thread.join()

    def _loop(self) -> None:
        s = self._scheduler
        while True:
            with self._lock:
                while not self._requests and not self._closed:
                    self._wake.wait()
                if self._closed and not self._requests:
                    return
            try:
                updates = s.step()
            except Exception as e:  # the engine failed: every request hears it, the engine goes on
                with self._lock:
                    reqs = list(self._requests.values())
                    self._requests.clear()
                for r in reqs:
                    s.cancel(r.id)
                    r._fail(e)
                continue
            for rid, tokens, finished, _reason, logprobs in updates:
                req = self._requests.get(rid)
                if req is None:
                    if finished:
                        s.take_result(rid)
                    continue
                try:
                    if tokens:
                        req._tokens(tokens, logprobs)
                    if finished:
                        with self._lock:
                            del self._requests[rid]
                        req._finish(s.take_result(rid))
                except Exception as e:  # a listener that failed (its client gone): end that request only
                    s.cancel(rid)
                    with self._lock:
                        self._requests.pop(rid, None)
                    if not req.done:
                        req._generation = e
                        req._done.set()
