"""From OpenAI API requests to generate() options and from Generations to response JSON, for
/v1/completions and /v1/chat/completions: the limits that depend on the served model (its context,
its vocabulary) are checked here; each field's type and static range was checked before, against
``decodelab.serve.schemas``. Errors are APIError, rendered as OpenAI's error JSON.

These are plain functions of the request body (a dict that ``schemas.parse`` returned), used by
``decodelab.serve.app``; none needs a model except the ones that take its tokenizer.

Examples:
    >>> from decodelab.serve import protocol, schemas
    >>> body = schemas.parse(schemas.CompletionRequest, {"model": "m", "prompt": "Hi", "temperature": 0.7})
    >>> protocol.sampling_options(body, vocab_size=512, max_context=512)
    {'temperature': 0.7}
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

__all__ = ["APIError", "integer", "bad_words_ids", "sampling_options",
           "response_format", "run_options", "usage", "completion_logprobs", "chat_logprobs", "finish_reason",
           "messages_of"]


class APIError(Exception):
    """An error the client gets as {"error": {"message", "type", "param", "code"}}, with an HTTP status.

    The server's exception handler answers every APIError with ``body()`` as JSON and ``status``
    as the HTTP status code. The arguments are kept as the attributes ``status``, ``message``,
    ``param`` and ``kind``.

    Args:
        status: the HTTP status code: 400 (a bad request), 401, 404, 413, 429, 503 or 504.
        message: what is wrong, for the client.
        param: the request field at fault; default None.
        kind: OpenAI's error type, e.g. "invalid_request_error" (the default),
            "authentication_error", "not_found_error", "rate_limit_error", "service_unavailable",
            "timeout_error".

    Examples:
        >>> from decodelab.serve.protocol import APIError
        >>> e = APIError(400, "top_p must be a number in [1e-09, 1.0], got 2", "top_p")
        >>> e.status, str(e)
        (400, 'top_p must be a number in [1e-09, 1.0], got 2')
        >>> e.body()
        {'error': {'message': 'top_p must be a number in [1e-09, 1.0], got 2', 'type': 'invalid_request_error',
                   'param': 'top_p', 'code': None}}
    """

    def __init__(self, status: int, message: str, param: Optional[str] = None, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.param, self.kind = status, message, param, kind

    def body(self) -> dict:
        """The error as OpenAI's JSON body.

        Returns:
            {"error": {"message": ..., "type": kind, "param": ..., "code": None}}.
        """
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": None}}


def integer(body: dict, key: str, default, lo: int, hi: int):
    """An integer field of the body, checked against its range.

    Args:
        body: the request body.
        key: the field's name.
        default: what an absent (or null) field means.
        lo: the smallest value allowed.
        hi: the largest value allowed.

    Returns:
        The field's value, or ``default``.

    Raises:
        APIError: 400 naming ``key``, when the value is not an int in [lo, hi] (a float such as
            2.0, or a boolean, is refused).

    Examples:
        >>> from decodelab.serve.protocol import integer
        >>> integer({"n": 2}, "n", 1, 1, 16), integer({"n": None}, "n", 1, 1, 16)
        (2, 1)
        >>> integer({"n": 2.0}, "n", 1, 1, 16)
        Traceback (most recent call last):
        ...
        decodelab.serve.protocol.APIError: n must be an integer in [1, 16], got 2.0
    """
    v = body.get(key)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise APIError(400, f"{key} must be an integer in [{lo}, {hi}], got {v!r}", key)
    return v


def bad_words_ids(body: dict, tokenizer) -> List[List[int]]:
    """The token-id sequences that vLLM's ``bad_words`` field bans: each word as it is (leading
    spaces stripped) and, where its tokens differ in the first one but not in number, with a leading
    space, as a word inside a sentence is written.

    Args:
        body: the request body; ``bad_words`` a list of strings (schemas.py bounds their number
            and length).
        tokenizer: the model's tokenizer (``encode(text, add_special_tokens=False)``).

    Returns:
        The sequences for ``generate(bad_words_ids=...)``; empty when the field is absent.

    Raises:
        APIError: 400 naming bad_words when the model has no tokenizer.

    Examples:
        >>> from decodelab.serve.protocol import bad_words_ids
        >>> tok = decodelab.load("stories260K").tokenizer  # SentencePiece: "dog" already has its space
        >>> bad_words_ids({"bad_words": ["dog", " big dog"]}, tok)
        [[400, 428], [370, 400, 428]]
    """
    words = body.get("bad_words")
    if words is None:
        return []
    if tokenizer is None:
        raise APIError(400, "bad_words needs the model's tokenizer", "bad_words")
    out: List[List[int]] = []
    for w in words:
        plain = tokenizer.encode(w.lstrip(), add_special_tokens=False)
        spaced = tokenizer.encode(" " + w.lstrip(), add_special_tokens=False)
        out.append(plain)
        if spaced and len(spaced) == len(plain) and spaced[0] != plain[0]:
            out.append(spaced)
    return out


def sampling_options(body: dict, *, vocab_size: int, max_context: int) -> dict:
    """The generate() keywords that the body's sampling fields mean (OpenAI's defaults: T = 1).

    OpenAI's fields (temperature, top_p, presence_penalty, frequency_penalty, logit_bias) and
    vLLM's extra ones (top_k: -1 or 0 for all, min_p, typical_p, repetition_penalty, no_repeat_ngram_size,
    min_tokens as min_new_tokens, order). At temperature 0 (greedy), top_p, top_k, min_p and
    typical_p are dropped: OpenAI accepts them there and they cannot change the top token.

    Args:
        body: the request body.
        vocab_size: the model's vocabulary size, the bound of top_k and of logit_bias token ids.
        max_context: the model's context length, the bound of no_repeat_ngram_size and min_tokens.

    Returns:
        A dict of generate() keywords; always "temperature", the others only where the body
        gives them.

    Raises:
        APIError: 400 naming the field past a limit of the model: top_k above the vocabulary
            size, a logit_bias key that is not a token id in the vocabulary, no_repeat_ngram_size
            or min_tokens above the context.

    Examples:
        >>> from decodelab.serve.protocol import sampling_options
        >>> sampling_options({"temperature": 0.7, "top_k": -1, "logit_bias": {"5": -100}}, vocab_size=512,
        ...                  max_context=512)
        {'temperature': 0.7, 'top_k': 0, 'logit_bias': {5: -100.0}}
        >>> sampling_options({"temperature": 0, "top_p": 0.5}, vocab_size=512, max_context=512)
        {'temperature': 0}
        >>> sampling_options({}, vocab_size=512, max_context=512)
        {'temperature': 1.0}
    """
    opts: Dict[str, Any] = {"temperature": body.get("temperature", 1.0)}
    for key in ("top_p", "presence_penalty", "frequency_penalty", "min_p", "typical_p", "repetition_penalty", "order"):
        if key in body:
            opts[key] = body[key]
    if body.get("top_k") is not None:
        opts["top_k"] = integer(body, "top_k", 0, -1, vocab_size) if body["top_k"] != -1 else 0
    if body.get("no_repeat_ngram_size") is not None:
        opts["no_repeat_ngram_size"] = integer(body, "no_repeat_ngram_size", 0, 0, max_context)
    if body.get("min_tokens") is not None:
        opts["min_new_tokens"] = integer(body, "min_tokens", 0, 0, max_context)
    bias = {}
    for k, v in (body.get("logit_bias") or {}).items():
        if not 0 <= int(k) < vocab_size:
            raise APIError(400, f"logit_bias token id {k} is outside the vocabulary [0, {vocab_size})", "logit_bias")
        bias[int(k)] = float(v)
    if bias:
        opts["logit_bias"] = bias
    if opts["temperature"] == 0:
        # Greedy: OpenAI accepts top_p and the rest alongside; they cannot change the top token.
        for key in ("top_p", "top_k", "min_p", "typical_p"):
            opts.pop(key, None)
    return opts


def response_format(body: dict) -> dict:
    """generate()'s constraint for OpenAI's response_format.

    {"type": "text"} (none), "json_object" (any JSON object) or "json_schema"
    ({"json_schema": {"name": ..., "schema": {...}}}).

    Args:
        body: the chat request body.

    Returns:
        {} for no response_format or type "text", else {"json_schema": schema} to pass to
        generate().

    Examples:
        >>> from decodelab.serve.protocol import response_format
        >>> response_format({}), response_format({"response_format": {"type": "json_object"}})
        ({}, {'json_schema': {'type': 'object'}})
        >>> response_format({"response_format": {"type": "json_schema",
        ...                                      "json_schema": {"name": "n", "schema": {"type": "integer"}}}})
        {'json_schema': {'type': 'integer'}}
    """
    kind = (body.get("response_format") or {}).get("type", "text")
    if kind == "json_object":
        return {"json_schema": {"type": "object"}}
    if kind == "json_schema":
        return {"json_schema": body["response_format"]["json_schema"]["schema"]}
    return {}


def run_options(body: dict, *, max_tokens_key: Tuple[str, ...], default_max: int, max_context: int) -> dict:
    """max_new_tokens, n, stop, seed, logprobs_mode and ignore_eos of a request, as generate() keywords.

    stop is a string or a list of at most 4 non-empty strings; a seed may be any int in
    [-2**63, 2**64) and is taken modulo 2**64; logprobs_mode is "raw" (the default) or
    "processed" (vLLM's "raw_logprobs" and "processed_logprobs" too); ignore_eos true becomes
    ``eos_token_id=[]``.

    Args:
        body: the request body.
        max_tokens_key: the fields that may give the token budget, in order (the last one present
            wins): ("max_tokens",) for completions, ("max_tokens", "max_completion_tokens") for chat.
        default_max: max_new_tokens when the body gives none.
        max_context: the model's context length, the largest budget allowed.

    Returns:
        A dict with max_new_tokens, n (1 to 16, default 1) and logprobs_mode, and stop, seed and
        eos_token_id where the body asks for them.

    Raises:
        APIError: 400 naming the token budget's field when it is above max_context.

    Examples:
        >>> from decodelab.serve.protocol import run_options
        >>> run_options({"max_tokens": 8, "stop": ".", "seed": -1}, max_tokens_key=("max_tokens",), default_max=16,
        ...             max_context=512)
        {'max_new_tokens': 8, 'n': 1, 'stop': ['.'], 'seed': 18446744073709551615, 'logprobs_mode': 'raw'}
        >>> run_options({"ignore_eos": True}, max_tokens_key=("max_tokens",), default_max=16, max_context=512)
        {'max_new_tokens': 16, 'n': 1, 'logprobs_mode': 'raw', 'eos_token_id': []}
    """
    out: Dict[str, Any] = {}
    mt = None
    for key in max_tokens_key:
        if body.get(key) is not None:
            mt = integer(body, key, None, 1, max_context)
    out["max_new_tokens"] = default_max if mt is None else mt
    out["n"] = body.get("n", 1)
    stop = body.get("stop")
    if stop:
        out["stop"] = [stop] if isinstance(stop, str) else stop
    if body.get("seed") is not None:
        out["seed"] = body["seed"] % (2**64)
    out["logprobs_mode"] = body.get("logprobs_mode", "raw").replace("_logprobs", "")
    if body.get("ignore_eos"):
        out["eos_token_id"] = []
    return out


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    """A response's usage object.

    Args:
        prompt_tokens: the prompt's length in tokens.
        completion_tokens: the tokens generated, over all choices.

    Returns:
        {"prompt_tokens", "completion_tokens", "total_tokens"}.

    Examples:
        >>> decodelab.serve.protocol.usage(5, 16)
        {'prompt_tokens': 5, 'completion_tokens': 16, 'total_tokens': 21}
    """
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def _shown(seq, tokenizer) -> list:
    """The logprobs of the tokens the text shows: an end-of-turn token that stopped the reply
    (no text of its own) is counted in usage but, as in OpenAI's responses, not listed. ``seq``:
    a GeneratedSequence, or a StreamPiece (whose tokens all carry text)."""
    lps = list(seq.logprobs or [])
    if lps and getattr(seq, "finish_reason", None) == "stop" and tokenizer.decode([lps[-1].token]) == "":
        lps.pop()
    return lps


def completion_logprobs(seq, tokenizer, prompt_offset: int = 0) -> dict:
    """A completions choice's logprobs: tokens, token_logprobs, top_logprobs, text_offset.

    An end-of-turn token that stopped the reply (no text of its own) is left out, as OpenAI does.

    Args:
        seq: a GeneratedSequence (``Generation.sequences[i]``) or a StreamPiece, made with logprobs.
        tokenizer: the model's tokenizer, to write each token as text.
        prompt_offset: the character offset of the first token, for text_offset; default 0.

    Returns:
        A dict of four lists, one entry per token: tokens (text), token_logprobs (floats),
        top_logprobs ({text: logprob} of the most likely tokens) and text_offset (ints).

    Examples:
        >>> from decodelab.serve.protocol import completion_logprobs
        >>> model = decodelab.load("stories260K")
        >>> g = model.generate("Once upon a time", max_new_tokens=3, logprobs=2, eos_token_id=[])
        >>> lp = completion_logprobs(g.sequences[0], model.tokenizer, prompt_offset=16)
        >>> sorted(lp), len(lp["tokens"]), lp["text_offset"][0], [len(t) for t in lp["top_logprobs"]]
        (['text_offset', 'token_logprobs', 'tokens', 'top_logprobs'], 3, 16, [2, 2, 2])
    """
    lps = _shown(seq, tokenizer)
    pieces = [lp.text for lp in lps]
    offsets, pos = [], prompt_offset
    for p in pieces:
        offsets.append(pos)
        pos += len(p)
    return {"tokens": pieces, "token_logprobs": [lp.logprob for lp in lps],
            "top_logprobs": [{top.text: top.logprob for top in lp.top} for lp in lps], "text_offset": offsets}


def chat_logprobs(seq, tokenizer) -> dict:
    """A chat choice's logprobs: content, one entry per token with its top_logprobs.

    An end-of-turn token that stopped the reply (no text of its own) is left out, as OpenAI does.

    Args:
        seq: a GeneratedSequence (``Generation.sequences[i]``) or a StreamPiece, made with logprobs.
        tokenizer: the model's tokenizer, to write each token as text.

    Returns:
        {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob",
        "bytes"}, ...]}, ...], "refusal": None}; bytes are the token text's UTF-8 bytes.

    Examples:
        >>> from decodelab.serve.protocol import chat_logprobs
        >>> model = decodelab.load("stories260K")
        >>> g = model.generate("Once upon a time", max_new_tokens=3, logprobs=2, eos_token_id=[])
        >>> lp = chat_logprobs(g.sequences[0], model.tokenizer)
        >>> len(lp["content"]), sorted(lp["content"][0]), len(lp["content"][0]["top_logprobs"])
        (3, ['bytes', 'logprob', 'token', 'top_logprobs'], 2)
    """
    def entry(text, v):
        return {"token": text, "logprob": v, "bytes": list(text.encode("utf-8"))}
    return {"content": [dict(entry(lp.text, lp.logprob), top_logprobs=[entry(t.text, t.logprob) for t in lp.top])
                        for lp in _shown(seq, tokenizer)], "refusal": None}


def finish_reason(seq) -> str:
    """OpenAI's finish_reason for a sequence: "length" for the token budget, "stop" for the rest.

    decodelab's other reasons ("stop": an EOS token or a stop string; "cancelled") become "stop".

    Args:
        seq: a GeneratedSequence or anything with a ``finish_reason`` attribute.

    Returns:
        "length" or "stop".

    Examples:
        >>> from types import SimpleNamespace
        >>> from decodelab.serve.protocol import finish_reason
        >>> [finish_reason(SimpleNamespace(finish_reason=r)) for r in ("length", "stop", "cancelled")]
        ['length', 'stop', 'stop']
    """
    return "length" if seq.finish_reason == "length" else "stop"


def messages_of(body: dict) -> List[dict]:
    """A chat request's messages as the chat template takes them: role and content, content as text.

    Content given as a list of parts must be text parts only ({"type": "text", "text": ...});
    they are joined. Other fields of a message (name, ...) are dropped.

    Args:
        body: the chat request body.

    Returns:
        A list of {"role": str, "content": str}, in order.

    Examples:
        >>> from decodelab.serve.protocol import messages_of
        >>> messages_of({"messages": [{"role": "system", "content": "Be brief."},
        ...                           {"role": "user", "content": [{"type": "text", "text": "Hi"},
        ...                                                        {"type": "text", "text": "!"}]}]})
        [{'role': 'system', 'content': 'Be brief.'}, {'role': 'user', 'content': 'Hi!'}]
    """
    out = []
    for m in body["messages"]:
        content = m["content"]
        if isinstance(content, list):  # content parts: text only
            content = "".join(part["text"] for part in content)
        out.append({"role": m["role"], "content": content})
    return out
