"""The OpenAI API's request and response shapes for /v1/completions and /v1/chat/completions:
each request body checked and turned into generate() options, each Generation turned into the
response JSON (choices, logprobs, usage). Errors are APIError, rendered as OpenAI's error JSON."""
from __future__ import annotations

import math
import numbers
from typing import Any, Dict, List, Optional, Tuple


class APIError(Exception):
    """An error the client gets as {"error": {"message", "type", "param", "code"}}."""

    def __init__(self, status: int, message: str, param: Optional[str] = None, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.param, self.kind = status, message, param, kind

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": None}}


# OpenAI fields decodelab does not do: named in a 400 rather than ignored.
_UNSUPPORTED = {"echo", "best_of", "suffix", "tools", "tool_choice", "functions", "function_call",
                "parallel_tool_calls", "audio", "modalities", "prediction", "web_search_options"}
# Sampling fields beyond OpenAI's, accepted as vLLM accepts them (extra body fields).
_EXTRA = {"top_k", "min_p", "typical_p", "repetition_penalty", "order", "logprobs_mode", "min_tokens",
          "ignore_eos", "no_repeat_ngram_size"}
_COMMON = {"model", "max_tokens", "temperature", "top_p", "n", "stop", "seed", "presence_penalty",
           "frequency_penalty", "logit_bias", "stream", "stream_options", "user", "metadata", "store"} | _EXTRA
COMPLETION_FIELDS = _COMMON | {"prompt", "logprobs"} | _UNSUPPORTED
CHAT_FIELDS = _COMMON | {"messages", "max_completion_tokens", "logprobs", "top_logprobs", "response_format",
                         "service_tier", "reasoning_effort"} | _UNSUPPORTED


def number(body: dict, key: str, default, lo: float, hi: float):
    v = body.get(key)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v) or not lo <= v <= hi:
        raise APIError(400, f"{key} must be a number in [{lo}, {hi}], got {v!r}", key)
    return v


def integer(body: dict, key: str, default, lo: int, hi: int):
    v = body.get(key)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise APIError(400, f"{key} must be an integer in [{lo}, {hi}], got {v!r}", key)
    return v


def check_fields(body: Any, allowed: set) -> dict:
    if not isinstance(body, dict):
        raise APIError(400, "the request body must be a JSON object")
    unknown = sorted(k for k in body if k not in allowed)
    if unknown:
        raise APIError(400, f"unknown parameter {unknown[0]!r}", unknown[0])
    # An unsupported field at its OpenAI default (best_of 1; echo false; no tools) asks for nothing.
    used = sorted(k for k in body if k in _UNSUPPORTED and body[k] not in (None, False, [], {"best_of": 1}.get(k)))
    if used:
        raise APIError(400, f"{used[0]} is not supported by this server", used[0])
    return body


def sampling_options(body: dict, *, vocab_size: int, max_context: int) -> dict:
    """The generate() keywords that the body's sampling fields mean (OpenAI's defaults: T = 1)."""
    opts: Dict[str, Any] = {}
    opts["temperature"] = number(body, "temperature", 1.0, 0.0, 2.0)
    if body.get("top_p") is not None:
        opts["top_p"] = number(body, "top_p", 1.0, 1e-9, 1.0)
    for key in ("presence_penalty", "frequency_penalty"):
        if body.get(key) is not None:
            opts[key] = number(body, key, 0.0, -2.0, 2.0)
    if body.get("top_k") is not None:
        opts["top_k"] = integer(body, "top_k", 0, -1, vocab_size) if body["top_k"] != -1 else 0
    if body.get("min_p") is not None:
        opts["min_p"] = number(body, "min_p", 0.0, 0.0, 1.0)
    if body.get("typical_p") is not None:
        opts["typical_p"] = number(body, "typical_p", 1.0, 1e-9, 1.0)
    if body.get("repetition_penalty") is not None:
        opts["repetition_penalty"] = number(body, "repetition_penalty", 1.0, 1e-3, 1e3)
    if body.get("no_repeat_ngram_size") is not None:
        opts["no_repeat_ngram_size"] = integer(body, "no_repeat_ngram_size", 0, 0, max_context)
    if body.get("min_tokens") is not None:
        opts["min_new_tokens"] = integer(body, "min_tokens", 0, 0, max_context)
    if body.get("order") is not None:
        if body["order"] not in ("hf", "vllm", "llama.cpp"):
            raise APIError(400, f"order must be 'hf', 'vllm' or 'llama.cpp', got {body['order']!r}", "order")
        opts["order"] = body["order"]
    lb = body.get("logit_bias")
    if lb is not None:
        if not isinstance(lb, dict):
            raise APIError(400, "logit_bias must be an object of token id -> bias", "logit_bias")
        bias = {}
        for k, v in lb.items():
            try:
                t = int(k)
            except (TypeError, ValueError):
                raise APIError(400, f"logit_bias key {k!r} is not a token id", "logit_bias") from None
            if not 0 <= t < vocab_size:
                raise APIError(400, f"logit_bias token id {t} is outside the vocabulary [0, {vocab_size})", "logit_bias")
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or not -100 <= v <= 100:
                raise APIError(400, f"logit_bias value for {k} must be in [-100, 100], got {v!r}", "logit_bias")
            bias[t] = float(v)
        if bias:
            opts["logit_bias"] = bias
    if opts["temperature"] == 0:
        # Greedy: OpenAI accepts top_p and the rest alongside; they cannot change the top token.
        for key in ("top_p", "top_k", "min_p", "typical_p"):
            opts.pop(key, None)
    return opts


def response_format(body: dict) -> dict:
    """generate()'s constraint for OpenAI's response_format: {"type": "text"} (none), "json_object"
    (any JSON object) or "json_schema" ({"json_schema": {"name": ..., "schema": {...}}})."""
    rf = body.get("response_format")
    if rf is None:
        return {}
    kind = rf.get("type") if isinstance(rf, dict) else None
    if kind == "text":
        return {}
    if kind == "json_object":
        return {"json_schema": {"type": "object"}}
    if kind == "json_schema":
        spec = rf.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if not isinstance(schema, dict):
            raise APIError(400, "response_format json_schema needs {\"json_schema\": {\"name\": ..., \"schema\": "
                           "{...}}}", "response_format")
        return {"json_schema": schema}
    raise APIError(400, f"response_format type must be 'text', 'json_object' or 'json_schema', got {rf!r:.80}",
                   "response_format")


def run_options(body: dict, *, max_tokens_key: Tuple[str, ...], default_max: int, max_context: int) -> dict:
    """max_new_tokens, n, stop, seed, logprobs_mode and ignore_eos of a request."""
    out: Dict[str, Any] = {}
    mt = None
    for key in max_tokens_key:
        if body.get(key) is not None:
            mt = integer(body, key, None, 1, max_context)
    out["max_new_tokens"] = default_max if mt is None else mt
    out["n"] = integer(body, "n", 1, 1, 16)
    stop = body.get("stop")
    if stop is not None:
        stops = [stop] if isinstance(stop, str) else stop
        if not isinstance(stops, list) or len(stops) > 4 or not all(isinstance(s, str) and s for s in stops):
            raise APIError(400, "stop must be a non-empty string or a list of at most 4 of them", "stop")
        if stops:
            out["stop"] = stops
    if body.get("seed") is not None:
        out["seed"] = integer(body, "seed", None, -(2**63), 2**64 - 1) % (2**64)
    mode = body.get("logprobs_mode", "raw")
    if mode not in ("raw", "processed", "raw_logprobs", "processed_logprobs"):
        raise APIError(400, f"logprobs_mode must be 'raw' or 'processed', got {mode!r}", "logprobs_mode")
    out["logprobs_mode"] = mode.replace("_logprobs", "")
    if body.get("ignore_eos") is not None:
        if not isinstance(body["ignore_eos"], bool):
            raise APIError(400, "ignore_eos must be true or false", "ignore_eos")
        if body["ignore_eos"]:
            out["eos_token_id"] = []
    return out


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
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
    """A completions choice's logprobs: tokens, token_logprobs, top_logprobs, text_offset."""
    lps = _shown(seq, tokenizer)
    pieces = [tokenizer.decode([lp.token]) for lp in lps]
    offsets, pos = [], prompt_offset
    for p in pieces:
        offsets.append(pos)
        pos += len(p)
    return {"tokens": pieces, "token_logprobs": [lp.logprob for lp in lps],
            "top_logprobs": [{tokenizer.decode([t]): v for t, v in lp.top} for lp in lps], "text_offset": offsets}


def chat_logprobs(seq, tokenizer) -> dict:
    """A chat choice's logprobs: content, one entry per token with its top_logprobs."""
    def entry(t, v):
        s = tokenizer.decode([t])
        return {"token": s, "logprob": v, "bytes": list(s.encode("utf-8"))}
    return {"content": [dict(entry(lp.token, lp.logprob), top_logprobs=[entry(t, v) for t, v in lp.top])
                        for lp in _shown(seq, tokenizer)], "refusal": None}


def finish_reason(seq) -> str:
    return "length" if seq.finish_reason == "length" else "stop"


def messages_of(body: dict) -> List[dict]:
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise APIError(400, "messages must be a non-empty list", "messages")
    out = []
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise APIError(400, f"messages[{i}] must be an object with a role", "messages")
        content = m.get("content")
        if isinstance(content, list):  # content parts: text only
            texts = []
            for part in content:
                if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                    raise APIError(400, f"messages[{i}].content holds a part that is not text", "messages")
                texts.append(part["text"])
            content = "".join(texts)
        if not isinstance(content, str):
            raise APIError(400, f"messages[{i}].content must be a string", "messages")
        out.append({"role": m["role"], "content": content})
    return out
