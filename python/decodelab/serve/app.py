"""The HTTP server (FastAPI): OpenAI's /v1/completions, /v1/chat/completions and /v1/models, with
Server-Sent Events for streams, plus /health, /tokenize, /detokenize, Prometheus /metrics and a
chat page at /. Requests run on a BatchEngine (continuous batching): its thread owns the model and
hands each request's pieces to the event loop, which never waits on the model itself.

``decodelab serve MODEL`` runs ``create_app`` under uvicorn; in tests and notebooks FastAPI's
TestClient runs it in-process.

Examples:
    >>> from fastapi.testclient import TestClient
    >>> from decodelab.serve import create_app
    >>> with TestClient(create_app(decodelab.load("stories260K"), "stories")) as client:
    ...     client.get("/v1/models").json()["data"][0]["id"]
    'stories'
"""

import asyncio
import contextlib
import hmac
import json
import os
import secrets
import threading
import time
import uuid
from typing import Callable, Optional, Sequence

from .engine import BatchEngine, QueueFull
from . import protocol as P
from . import schemas
from .protocol import APIError

__all__ = ["create_app", "Metrics", "CHAT_PAGE"]


# The chat page (plain HTML and JavaScript) served at /.
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "chat.html"), encoding="utf-8") as _f:
    CHAT_PAGE = _f.read()


class Metrics:
    """Prometheus metrics of one server (its own registry), served at /metrics.

    Requests running and waiting (decodelab_requests_running, decodelab_requests_waiting), tokens
    in and out (decodelab_prompt_tokens_total, decodelab_generation_tokens_total), time to first
    token and per output token (histograms decodelab_time_to_first_token_seconds,
    decodelab_time_per_output_token_seconds), KV-cache blocks in use (decodelab_kv_blocks_in_use).
    The gauges are read from the engine and the model when the metrics are rendered.

    Args:
        model: the served decodelab Model (its ``memory_report()`` gives the blocks in use).
        engine: the BatchEngine that runs its requests (its ``stats()`` give running and waiting).

    Examples:
        >>> from decodelab.serve.app import Metrics
        >>> from decodelab.serve.engine import BatchEngine
        >>> model = decodelab.load("stories260K")
        >>> with BatchEngine(model) as engine:
        ...     metrics = Metrics(model, engine)
        ...     metrics.record(engine.submit("Once upon a time", max_new_tokens=4, seed=0).result(timeout=30))
        ...     text = metrics.render().decode()
        >>> "decodelab_generation_tokens_total 4.0" in text, "decodelab_requests_running 0.0" in text
        (True, True)
    """

    def __init__(self, model, engine: BatchEngine):
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
        from prometheus_client.exposition import CONTENT_TYPE_LATEST

        self.registry = r = CollectorRegistry()
        self._latest, self.content_type = generate_latest, CONTENT_TYPE_LATEST
        running = Gauge("decodelab_requests_running", "requests in the running batch", registry=r)
        running.set_function(lambda: engine.stats()["running"])
        waiting = Gauge("decodelab_requests_waiting", "requests waiting for a place in the batch", registry=r)
        waiting.set_function(lambda: engine.stats()["waiting"])
        self.prompt_tokens = Counter("decodelab_prompt_tokens", "prompt tokens processed", registry=r)
        self.generation_tokens = Counter("decodelab_generation_tokens", "tokens generated", registry=r)
        buckets = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
        self.ttft = Histogram("decodelab_time_to_first_token_seconds", "time to first token", buckets=buckets,
                              registry=r)
        self.tpot = Histogram("decodelab_time_per_output_token_seconds", "time per output token after the first",
                              buckets=buckets, registry=r)
        blocks = Gauge("decodelab_kv_blocks_in_use", "KV-cache blocks in use, all pools", registry=r)
        blocks.set_function(lambda: sum(p.get("blocks_in_use", 0) for p in model.memory_report().values()))

    def record(self, g) -> None:
        """Count a finished request: its new prompt tokens, its tokens generated and its timings.

        Prompt tokens taken from the prefix cache are not counted; time per output token is
        observed only for generations of more than one token.

        Args:
            g: the request's Generation.
        """
        self.prompt_tokens.inc(g.prompt_tokens - g.reused_prompt_tokens)
        self.generation_tokens.inc(sum(len(s.token_ids) for s in g.sequences) if g.sequences else len(g.token_ids))
        self.ttft.observe(g.time_to_first_token)
        if len(g.token_ids) > 1:
            self.tpot.observe(g.time_per_output_token)

    def render(self) -> bytes:
        """The metrics in Prometheus' text format (``content_type`` is its media type).

        Returns:
            The exposition text, UTF-8 encoded.
        """
        return self._latest(self.registry)


class _Served:
    """What the app serves once its model is loaded: the model, its engine and metrics. Until
    then (or after a failed load) every call that needs them is a 503."""

    def __init__(self):
        self.model = self.engine = self.metrics = self.tok = None
        self.ctx = self.vocab = 0
        self.error: Optional[str] = None
        self.draining = False  # set on SIGTERM: new requests get 503 while running ones finish
        self.in_flight = 0  # HTTP requests whose response has not ended

    def ready(self, model, max_running: int, max_waiting: int, prefix_cache_mib: int) -> None:
        blocks = prefix_cache_mib * 2**20 // model._fp32_block_bytes()
        self.engine = BatchEngine(model, max_running=max_running, max_waiting=max_waiting, prefix_cache_blocks=blocks)
        self.metrics = Metrics(model, self.engine)
        self.ctx, self.vocab, self.tok = model.config.max_position_embeddings, model.config.vocab_size, model.tokenizer
        self.model = model

    def need(self) -> None:
        if self.model is None:
            why = f"the model failed to load: {self.error}" if self.error else "the model is still loading"
            raise APIError(503, why, kind="service_unavailable")


class _BodyTooLarge(Exception):
    pass


class _Gate:
    """ASGI middleware in front of every route: 503 while the server drains, 413 for a body over
    ``max_body_bytes`` (by its Content-Length, or counted as it arrives), and the count of requests
    in flight that a drain waits for."""

    def __init__(self, app, served: _Served, max_body_bytes: int):
        self.app, self.served, self.limit = app, served, max_body_bytes

    async def _drain(self, receive) -> None:
        """Read and drop the rest of a refused body (up to 64 times the limit), so that the client,
        still sending, gets to read the answer instead of a reset connection."""
        left = 64 * self.limit
        while left > 0:
            message = await receive()
            left -= len(message.get("body", b""))
            if message["type"] != "http.request" or not message.get("more_body"):
                return

    @staticmethod
    async def _error(send, err: APIError) -> None:
        await send({"type": "http.response.start", "status": err.status,
                    "headers": [(b"content-type", b"application/json"), (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": json.dumps(err.body()).encode()})

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if self.served.draining:
            return await self._error(send, APIError(503, "the server is shutting down", kind="service_unavailable"))
        too_large = APIError(413, f"the request body is larger than the server's limit of {self.limit} bytes",
                             kind="invalid_request_error")
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.limit:
            await self._drain(receive)
            return await self._error(send, too_large)
        seen, started, ended = 0, False, False

        async def counted_receive():
            nonlocal seen, ended
            message = await receive()
            seen += len(message.get("body", b""))
            ended = message["type"] != "http.request" or not message.get("more_body")
            if seen > self.limit:
                raise _BodyTooLarge()
            return message

        async def tracked_send(message):
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        self.served.in_flight += 1
        try:
            await self.app(scope, counted_receive, tracked_send)
        except _BodyTooLarge:
            if not started:
                if not ended:
                    await self._drain(receive)
                await self._error(send, too_large)
        finally:
            self.served.in_flight -= 1


# What each error status means, for /openapi.json.
_STATUS = {400: "a bad request", 401: "a missing or wrong API key", 404: "a model this server does not serve",
           413: "a request body over the server's limit", 429: "the queue is full",
           503: "the model is loading or failed to load, or the server is shutting down",
           504: "the request ran past the server's request timeout"}


class _Expired(Exception):
    """A request ran past the server's request timeout."""


def create_app(model, served_model_name: str, *, api_key: Optional[str] = None, default_max_tokens: int = 16,
               max_running: int = 32, max_waiting: int = 256, prefix_cache_mib: int = 256,
               max_body_bytes: int = 8 * 2**20, request_timeout: Optional[float] = None,
               cors_origins: Sequence[str] = (),
               on_load_error: Optional[Callable[[BaseException], None]] = None):
    """The FastAPI application serving ``model`` under ``served_model_name``.

    Endpoints: POST /v1/completions and /v1/chat/completions (OpenAI's, streamed as Server-Sent
    Events with ``"stream": true``; chat needs a tokenizer with a chat template), GET /v1/models,
    /health, /metrics (Prometheus) and / (a chat page), POST /tokenize and /detokenize. At most
    ``max_running`` requests decode together, ``max_waiting`` more wait (then 429), and up to
    ``prefix_cache_mib`` MiB of prompt blocks are kept for prompts that start the same way.
    ``model`` may be a function that loads it: the server then answers at once, /health and every
    model call with 503 until the model is ready (``on_load_error`` hears a failed load).

    The engine thread starts when the model is ready and stops when the application shuts down
    (its lifespan), so run the app under uvicorn or in a ``with TestClient(app)`` block.

    Args:
        model: the decodelab Model to serve, or a function of no arguments that loads and returns
            it (run on a thread of its own at startup).
        served_model_name: the model's id in /v1/models; requests must name it in "model" (else 404).
        api_key: when given, the completions, chat, /tokenize and /detokenize calls need
            ``Authorization: Bearer API_KEY`` (else 401; /, /health, /v1/models and /metrics stay
            open); default None (no key).
        default_max_tokens: the token budget of a request that gives no max_tokens, >= 1; default 16.
        max_running: requests decoded together in one batch, >= 1; default 32.
        max_waiting: requests queued beyond the batch before the server answers 429, >= 0;
            default 256.
        prefix_cache_mib: MiB of prompt blocks kept for prompts that start the same way, >= 0
            (0: none); default 256.
        max_body_bytes: the largest request body accepted, >= 1; a larger one gets 413. Default
            8 MiB.
        request_timeout: seconds a request may run, > 0, or None (no limit, the default). Past it
            a non-streamed request gets 504, and a stream ends with finish_reason "length" and an
            error event; either way its sequences stop and their KV blocks are freed.
        cors_origins: origins that browsers may call the API from (CORS), e.g.
            ``["http://localhost:3000"]``, or ``["*"]``; default none (CORS off).
        on_load_error: called with the exception when ``model`` is a loader that fails; default
            None. The server stays up and answers 503 with the error.

    Returns:
        The FastAPI application.

    Raises:
        APIError: not from this call: each endpoint raises it for a bad request, and the app
            answers it as OpenAI's error JSON with its status (400, 401, 404, 413, 429, 503 or 504).
        ValueError: an option out of range, named.

    Examples:
        >>> from fastapi.testclient import TestClient
        >>> from decodelab.serve import create_app
        >>> app = create_app(decodelab.load("stories260K"), "stories", max_running=4)
        >>> with TestClient(app) as client:
        ...     r = client.post("/v1/completions", json={"model": "stories", "prompt": "Once upon a time",
        ...                                              "max_tokens": 5, "temperature": 0})
        ...     bad = client.post("/v1/completions", json={"model": "gpt-4", "prompt": "Hi"})
        ...     health = client.get("/health").json()
        >>> r.status_code, sorted(r.json()), r.json()["usage"]["prompt_tokens"]
        (200, ['choices', 'created', 'id', 'model', 'object', 'usage'], 5)
        >>> bad.status_code, bad.json()["error"]["type"], health
        (404, 'not_found_error', {'status': 'ok'})
    """
    from fastapi import FastAPI, Request
    from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, StreamingResponse

    if not isinstance(max_body_bytes, int) or max_body_bytes < 1:
        raise ValueError(f"max_body_bytes must be an integer >= 1, got {max_body_bytes!r}")
    if request_timeout is not None and not (isinstance(request_timeout, (int, float)) and request_timeout > 0):
        raise ValueError(f"request_timeout must be a number of seconds > 0 or None, got {request_timeout!r}")
    if isinstance(cors_origins, str) or not all(isinstance(o, str) and o for o in cors_origins):
        raise ValueError(f"cors_origins must be a list of origins, got {cors_origins!r}")
    S = _Served()
    engine_options = dict(max_running=max_running, max_waiting=max_waiting, prefix_cache_mib=prefix_cache_mib)
    loader = model if callable(model) else None
    if loader is None:
        S.ready(model, **engine_options)

    def load_in_background():
        try:
            S.ready(loader(), **engine_options)
        except Exception as e:  # reported by /health and to on_load_error; the server stays up
            S.error = f"{type(e).__name__}: {e}"
            if on_load_error is not None:
                on_load_error(e)

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        if loader is not None:
            threading.Thread(target=load_in_background, name="decodelab-load", daemon=True).start()
        yield
        if S.engine is not None:
            S.engine.close()  # after uvicorn has let the running requests finish

    app = FastAPI(title="decodelab", docs_url=None, redoc_url=None, lifespan=lifespan)
    app.state.served = S
    app.add_middleware(_Gate, served=S, max_body_bytes=max_body_bytes)
    if cors_origins:  # added last, so outermost: the gate's 413 and 503 carry the CORS headers too
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=list(cors_origins), allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "Content-Type"])
    created = int(time.time())

    @app.exception_handler(APIError)
    async def _api_error(_request, exc: APIError):
        return JSONResponse(exc.body(), status_code=exc.status)

    async def _json(request: Request):
        """The request's JSON body, after the API key check; 400 for a body that is not JSON."""
        S.need()
        given = request.headers.get("authorization", "").encode("utf-8", "replace")
        if api_key is not None and not hmac.compare_digest(given, f"Bearer {api_key}".encode()):  # constant time
            raise APIError(401, "missing or wrong API key (Authorization: Bearer ...)", kind="authentication_error")
        raw = await request.body()
        try:
            return json.loads(raw)
        except (ValueError, UnicodeDecodeError) as e:
            raise APIError(400, f"the request body is not valid JSON ({e})") from None

    async def _body(request: Request, kind) -> dict:
        body = schemas.parse(kind, await _json(request))
        name = body["model"]
        if name != served_model_name:
            raise APIError(404, f"the model {name!r} does not exist; this server has {served_model_name!r}", "model",
                           kind="not_found_error")
        return body

    def _param(message: str, prompt_field: str) -> Optional[str]:
        return prompt_field if "context window" in message else None

    def _submit(ids, run, sampling, prompt_field):
        """run["n"] requests on the engine (samples 0..n-1 of one seed) and the queue their events
        arrive on, as (choice index, (kind, value)); 400 for a bad request, 429 when full."""
        loop = asyncio.get_running_loop()
        events: asyncio.Queue = asyncio.Queue()
        run = dict(run)
        n = run.pop("n")
        if n > 1 and run.get("seed") is None:
            run["seed"] = secrets.randbits(63)
        reqs = []
        try:
            for i in range(n):
                def listener(ev, i=i):
                    loop.call_soon_threadsafe(events.put_nowait, (i, ev))
                reqs.append(S.engine.submit(ids, sequence=i, listener=listener, **run, **sampling))
        except (ValueError, QueueFull) as e:
            for r in reqs:
                r.cancel()
            if isinstance(e, QueueFull):
                raise APIError(429, str(e), kind="rate_limit_error") from None
            raise APIError(400, str(e), _param(str(e), prompt_field)) from None
        return reqs, events

    def _deadline():
        return None if request_timeout is None else asyncio.get_running_loop().time() + request_timeout

    async def _events(reqs, events, deadline):
        """(index, kind, value) of each event until every request is done; _Expired past the
        deadline (loop time, or None). The requests are cancelled if the consumer stops early (a
        client that went away) or the deadline passes."""
        left = len(reqs)
        loop = asyncio.get_running_loop()
        try:
            while left:
                if deadline is None:
                    i, (kind, value) = await events.get()
                else:
                    try:
                        i, (kind, value) = await asyncio.wait_for(events.get(), max(0.0, deadline - loop.time()))
                    except asyncio.TimeoutError:
                        raise _Expired() from None
                if kind == "error":
                    raise value
                if kind == "done":
                    left -= 1
                    S.metrics.record(value)
                yield i, kind, value
        finally:
            for r in reqs:
                r.cancel()

    async def _generate(ids, run, sampling, prompt_field):
        reqs, events = _submit(ids, run, sampling, prompt_field)
        gens = [None] * len(reqs)
        try:
            async for i, kind, value in _events(reqs, events, _deadline()):
                if kind == "done":
                    gens[i] = value
        except _Expired:
            raise _timed_out() from None
        return [g.sequences[0] for g in gens]

    def _timed_out():
        return APIError(504, f"the request ran longer than the server's request timeout of {request_timeout} s",
                        kind="timeout_error")

    async def _chunks(reqs, queue, deadline, piece, finished, usage):
        """A stream's chunks: piece(i, v) for each text piece, finished(i, reason) as each choice
        ends, then usage(tokens generated) or nothing (None). Past the deadline every choice still
        running ends with "length" and the last event is the 504's error JSON."""
        n_out, done = 0, set()
        try:
            async for i, kind, v in _events(reqs, queue, deadline):
                if kind == "piece":
                    yield piece(i, v)
                else:
                    n_out += len(v.token_ids)
                    done.add(i)
                    yield finished(i, P.finish_reason(v.sequences[0]))
        except _Expired:
            for i in range(len(reqs)):
                if i not in done:
                    yield finished(i, "length")
            yield _timed_out().body()
            return
        if usage is not None:
            yield usage(n_out)

    def _ref(model) -> dict:
        return {"$ref": f"#/components/schemas/{model.__name__}"}

    def _responses(*statuses, ok=None, stream=None):
        """The OpenAPI responses of a route: its 200 body (``ok``, a schemas model; with ``stream``
        also Server-Sent Events of that chunk model) and OpenAI's error JSON for each status."""
        error = {"application/json": {"schema": _ref(schemas.ErrorResponse)}}
        out = {s: {"content": error, "description": _STATUS[s]} for s in statuses + (503,)}
        if ok is not None:
            out[200] = {"model": ok}
        if stream is not None:  # one event's schema (OpenAPI 3.2 reads it as itemSchema)
            payload = {"anyOf": [_ref(stream), _ref(schemas.ErrorResponse)]}
            event = {"type": "object", "required": ["data"], "properties": {"event": {"type": "string"}, "data": {
                "anyOf": [{"const": "[DONE]"},
                          {"type": "string", "contentMediaType": "application/json", "contentSchema": payload}]}},
                     "description": f"with stream: true, Server-Sent Events: each holds a {stream.__name__}, or an "
                                    "ErrorResponse when the request timeout passes; the last is [DONE]"}
            out[200]["content"] = {"text/event-stream": {"schema": event}}
        return out

    def _request_body(kind):
        return {"requestBody": {"required": True, "content": {"application/json": {"schema": _ref(kind)}}}}

    def openapi():
        """/openapi.json: FastAPI's paths plus every request and chunk model of schemas.py."""
        if app.openapi_schema is None:
            from fastapi.openapi.utils import get_openapi

            doc = get_openapi(title=app.title, version=app.version, routes=app.routes)
            components = doc.setdefault("components", {}).setdefault("schemas", {})
            components.update(schemas.openapi_components(served_model_name))
            app.openapi_schema = doc
        return app.openapi_schema

    app.openapi = openapi

    @app.get("/", response_class=HTMLResponse, responses=_responses())
    def chat_page():
        return HTMLResponse(CHAT_PAGE)

    @app.get("/health", responses=_responses(ok=schemas.Health))
    def health():
        S.need()
        return {"status": "ok"}

    @app.get("/metrics", response_class=PlainTextResponse, responses=_responses())
    def prometheus():
        from fastapi.responses import Response

        S.need()
        return Response(S.metrics.render(), media_type=S.metrics.content_type)

    @app.get("/v1/models", responses=_responses(ok=schemas.ModelList))
    def models():
        S.need()
        return {"object": "list", "data": [{"id": served_model_name, "object": "model", "created": created,
                                            "owned_by": "decodelab", "max_model_len": S.ctx}]}

    @app.post("/tokenize", openapi_extra=_request_body(schemas.TokenizeRequest),
              responses=_responses(400, 401, 413, ok=schemas.Tokenized))
    async def tokenize(request: Request):
        body = schemas.parse(schemas.TokenizeRequest, await _json(request))
        ids = S.tok.encode(body["prompt"], add_special_tokens=body.get("add_special_tokens", True))
        return {"tokens": ids, "count": len(ids), "max_model_len": S.ctx}

    @app.post("/detokenize", openapi_extra=_request_body(schemas.DetokenizeRequest),
              responses=_responses(400, 401, 413, ok=schemas.Detokenized))
    async def detokenize(request: Request):
        ids = schemas.parse(schemas.DetokenizeRequest, await _json(request))["tokens"]
        if not all(t < S.vocab for t in ids):
            raise APIError(400, f"tokens must be token ids in [0, {S.vocab})", "tokens")
        return {"prompt": S.tok.decode(ids)}

    def _common(body, max_keys):
        run = P.run_options(body, max_tokens_key=max_keys, default_max=default_max_tokens, max_context=S.ctx)
        sampling = P.sampling_options(body, vocab_size=S.vocab, max_context=S.ctx)
        banned = P.bad_words_ids(body, S.tok)
        if banned:
            sampling["bad_words_ids"] = banned
        include_usage = body.get("stream_options", {}).get("include_usage", False)
        return run, sampling, body.get("stream", False), include_usage

    def _sse(events):
        async def gen():
            async for e in events:
                yield f"data: {json.dumps(e)}\n\n"
            yield "data: [DONE]\n\n"
        return StreamingResponse(gen(), media_type="text/event-stream")

    model_errors = (400, 401, 404, 413, 429, 504)

    @app.post("/v1/completions", openapi_extra=_request_body(schemas.CompletionRequest),
              responses=_responses(*model_errors, ok=schemas.Completion, stream=schemas.CompletionChunk))
    async def completions(request: Request):
        body = await _body(request, schemas.CompletionRequest)
        run, sampling, stream, include_usage = _common(body, ("max_tokens",))
        lp = body.get("logprobs")
        prompt = body["prompt"]
        if isinstance(prompt, list) and isinstance(prompt[0], str):
            prompt = prompt[0]
        ids = S.tok.encode(prompt) if isinstance(prompt, str) else prompt
        rid, now = f"cmpl-{uuid.uuid4().hex}", int(time.time())
        run = dict(run, logprobs=lp)
        if stream:
            reqs, queue = _submit(ids, run, sampling, "prompt")
            deadline = _deadline()

            def chunk(i, text, logprobs, reason):
                return {"id": rid, "object": "text_completion", "created": now, "model": served_model_name,
                        "choices": [{"index": i, "text": text, "logprobs": logprobs, "finish_reason": reason}]}

            def usage(n_out):
                return {"id": rid, "object": "text_completion", "created": now, "model": served_model_name,
                        "choices": [], "usage": P.usage(len(ids), n_out)}
            return _sse(_chunks(
                reqs, queue, deadline,
                lambda i, v: chunk(i, v.text, P.completion_logprobs(v, S.tok) if lp is not None else None, None),
                lambda i, reason: chunk(i, "", None, reason), usage if include_usage else None))
        seqs = await _generate(ids, run, sampling, "prompt")
        choices = [{"index": i, "text": s.text, "finish_reason": P.finish_reason(s),
                    "logprobs": P.completion_logprobs(s, S.tok) if lp is not None else None}
                   for i, s in enumerate(seqs)]
        return {"id": rid, "object": "text_completion", "created": now, "model": served_model_name,
                "choices": choices, "usage": P.usage(len(ids), sum(len(s.token_ids) for s in seqs))}

    @app.post("/v1/chat/completions", openapi_extra=_request_body(schemas.ChatRequest),
              responses=_responses(*model_errors, ok=schemas.ChatCompletion, stream=schemas.ChatCompletionChunk))
    async def chat(request: Request):
        body = await _body(request, schemas.ChatRequest)
        run, sampling, stream, include_usage = _common(body, ("max_tokens", "max_completion_tokens"))
        sampling = dict(sampling, **P.response_format(body))
        want_lp = body.get("logprobs", False)
        top = body.get("top_logprobs", 0)
        if "top_logprobs" in body and not want_lp:
            raise APIError(400, "top_logprobs needs logprobs: true", "top_logprobs")
        if S.tok is None or getattr(S.tok, "chat_template", None) is None:
            raise APIError(400, "this model has no chat template; use /v1/completions", "messages")
        try:
            ids = S.tok.apply_chat_template(P.messages_of(body), add_generation_prompt=True, tokenize=True)
        except ValueError as e:
            raise APIError(400, str(e), "messages") from None
        rid, now = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        run = dict(run, logprobs=top if want_lp else None)
        if stream:
            reqs, queue = _submit(ids, run, sampling, "messages")
            deadline = _deadline()
            base = {"id": rid, "object": "chat.completion.chunk", "created": now, "model": served_model_name}

            def choice(i, delta, logprobs, reason):
                return dict(base, choices=[{"index": i, "delta": delta, "logprobs": logprobs, "finish_reason": reason}])

            def piece(i, v):
                return choice(i, {"content": v.text}, P.chat_logprobs(v, S.tok) if want_lp else None, None)

            def usage(n_out):
                return dict(base, choices=[], usage=P.usage(len(ids), n_out))

            async def events():
                for i in range(len(reqs)):
                    yield choice(i, {"role": "assistant", "content": ""}, None, None)
                async for c in _chunks(reqs, queue, deadline, piece, lambda i, reason: choice(i, {}, None, reason),
                                       usage if include_usage else None):
                    yield c
            return _sse(events())
        seqs = await _generate(ids, run, sampling, "messages")
        choices = [{"index": i, "message": {"role": "assistant", "content": s.text, "refusal": None},
                    "logprobs": P.chat_logprobs(s, S.tok) if want_lp else None, "finish_reason": P.finish_reason(s)}
                   for i, s in enumerate(seqs)]
        return {"id": rid, "object": "chat.completion", "created": now, "model": served_model_name,
                "choices": choices, "usage": P.usage(len(ids), sum(len(s.token_ids) for s in seqs))}

    return app
