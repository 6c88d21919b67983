"""The server's request and response bodies as pydantic models: the one place where each field's
type, range and enum is declared. They make /openapi.json describe the whole API, and
``parse()`` checks a request body against them, answering a bad one with OpenAI's 400 error JSON
(not FastAPI's 422). Limits that depend on the served model (its context, its vocabulary) are
checked in ``decodelab.serve.protocol``.

Examples:
    >>> from decodelab.serve import schemas
    >>> schemas.parse(schemas.CompletionRequest, {"model": "m", "prompt": "Hi", "temperature": 1})
    {'model': 'm', 'temperature': 1.0, 'prompt': 'Hi'}
    >>> schemas.parse(schemas.CompletionRequest, {"model": "m", "prompt": "Hi", "temperature": 3})
    Traceback (most recent call last):
    ...
    decodelab.serve.protocol.APIError: temperature: Input should be less than or equal to 2, got 3
"""
from __future__ import annotations

from typing import Any, Dict, List, Literal, Optional, Type, Union

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, WithJsonSchema
from pydantic.json_schema import models_json_schema
from typing_extensions import Annotated

from .protocol import APIError

# The response models (Completion, CompletionChunk, ChatCompletion, ...) are read through
# /openapi.json; the request models and the error are the ones code here and in tests uses.
__all__ = ["parse", "openapi_components", "CompletionRequest", "ChatRequest", "TokenizeRequest",
           "DetokenizeRequest", "ErrorResponse", "UNSUPPORTED", "MAX_BAD_WORDS", "MAX_BAD_WORD_CHARS"]

MAX_BAD_WORDS = 256  # bad_words: at most this many words
MAX_BAD_WORD_CHARS = 256  # of at most this many characters each

# OpenAI fields this server does not do: accepted only at their default, which asks for nothing;
# any other value is a 400 naming the field.
UNSUPPORTED = ("echo", "best_of", "suffix", "tools", "tool_choice", "functions", "function_call",
               "parallel_tool_calls", "audio", "modalities", "prediction", "web_search_options")
_NOT_DONE = "not supported by this server: only its default is accepted"


class _Body(BaseModel):
    # strict: 2.0 is not an integer and true is not a number; JSON has no NaN or infinity.
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


def _false(v: bool) -> bool:
    if v is not False:
        raise ValueError("only false, its default, is accepted")
    return v


Text = Annotated[str, Field(min_length=1)]
# An unsupported boolean field: false only (Literal[False] would let 0 through, as 0 == False).
OnlyFalse = Annotated[bool, AfterValidator(_false), WithJsonSchema({"type": "boolean", "const": False})]
Probability = Annotated[float, Field(gt=0, le=1)]


class StreamOptions(_Body):
    include_usage: Optional[bool] = Field(None, description="send a last chunk with the request's usage")
    continuous_usage_stats: Optional[bool] = Field(None, description="accepted as vLLM accepts it; no effect")


class _Sampling(_Body):
    """The fields both completion endpoints share: OpenAI's, then vLLM's extra sampling fields."""
    model: str = Field(description="the served model's name, as /v1/models lists it (another name: 404)")
    max_tokens: Optional[int] = Field(None, ge=1, description="the token budget, at most the model's context")
    temperature: Optional[float] = Field(None, ge=0, le=2, description="0 is greedy; default 1")
    top_p: Optional[Probability] = None
    n: Optional[int] = Field(None, ge=1, le=16, description="choices, samples 0..n-1 of one seed")
    stop: Union[None, Text, Annotated[List[Text], Field(max_length=4)]] = None
    seed: Optional[int] = Field(None, ge=-(2**63), le=2**64 - 1, description="taken modulo 2**64")
    presence_penalty: Optional[float] = Field(None, ge=-2, le=2)
    frequency_penalty: Optional[float] = Field(None, ge=-2, le=2)
    logit_bias: Optional[Dict[Annotated[str, Field(pattern=r"^-?[0-9]{1,12}$")],
                              Annotated[float, Field(ge=-100, le=100)]]] = Field(
        None, description="token id (in the vocabulary) -> bias")
    stream: Optional[bool] = None
    stream_options: Optional[StreamOptions] = None
    user: Optional[str] = None
    metadata: Optional[Dict[str, str]] = None
    store: Optional[bool] = None
    top_k: Optional[int] = Field(None, ge=-1, description="-1 or 0: all tokens; at most the vocabulary size")
    min_p: Optional[float] = Field(None, ge=0, le=1)
    typical_p: Optional[Probability] = None
    repetition_penalty: Optional[float] = Field(None, ge=1e-3, le=1e3)
    order: Optional[Literal["hf", "vllm", "llama.cpp"]] = Field(None, description="the sampler order")
    logprobs_mode: Optional[Literal["raw", "processed", "raw_logprobs", "processed_logprobs"]] = None
    min_tokens: Optional[int] = Field(None, ge=0, description="at most the model's context")
    ignore_eos: Optional[bool] = None
    no_repeat_ngram_size: Optional[int] = Field(None, ge=0, description="at most the model's context")
    bad_words: Optional[Annotated[List[Annotated[str, Field(min_length=1, max_length=MAX_BAD_WORD_CHARS,
                                                            pattern=r"\S")]],
                                  Field(max_length=MAX_BAD_WORDS)]] = Field(
        None, description="words never generated, as vLLM bans them")
    # Unsupported OpenAI fields, at their defaults only.
    echo: Optional[OnlyFalse] = Field(None, description=_NOT_DONE)
    best_of: Optional[int] = Field(None, ge=1, le=1, description=_NOT_DONE)
    suffix: None = Field(None, description=_NOT_DONE)
    tools: Optional[Annotated[List[Any], Field(max_length=0)]] = Field(None, description=_NOT_DONE)
    tool_choice: None = Field(None, description=_NOT_DONE)
    functions: Optional[Annotated[List[Any], Field(max_length=0)]] = Field(None, description=_NOT_DONE)
    function_call: None = Field(None, description=_NOT_DONE)
    parallel_tool_calls: Optional[OnlyFalse] = Field(None, description=_NOT_DONE)
    audio: None = Field(None, description=_NOT_DONE)
    modalities: Optional[Annotated[List[Any], Field(max_length=0)]] = Field(None, description=_NOT_DONE)
    prediction: None = Field(None, description=_NOT_DONE)
    web_search_options: None = Field(None, description=_NOT_DONE)


class CompletionRequest(_Sampling):
    """The body of POST /v1/completions: OpenAI's fields, vLLM's extra sampling fields, the prompt.

    Examples:
        >>> from decodelab.serve.schemas import CompletionRequest
        >>> CompletionRequest(model="m", prompt=[1, 2, 3], top_k=40).model_dump(exclude_none=True)
        {'model': 'm', 'top_k': 40, 'prompt': [1, 2, 3]}
    """
    model_config = ConfigDict(json_schema_extra={"examples": [
        {"model": "MODEL", "prompt": "Once upon a time", "max_tokens": 16, "temperature": 0.8, "seed": 1},
        {"model": "MODEL", "prompt": "Once upon a time", "max_tokens": 8, "stream": True, "logprobs": 2}]})
    prompt: Union[str, Annotated[List[str], Field(min_length=1, max_length=1)],
                  Annotated[List[Annotated[int, Field(ge=0)]], Field(min_length=1)]] = Field(
        description="a string, a list of one string, or token ids")
    logprobs: Optional[int] = Field(None, ge=0, le=20, description="top tokens listed per token")


class TextPart(_Body):
    type: Literal["text"]
    text: str


class Message(BaseModel):
    """A chat message: role and content; other fields (name, ...) are accepted and dropped."""
    model_config = ConfigDict(extra="allow", strict=True)
    role: str
    content: Union[str, List[TextPart]]


class ResponseFormatText(_Body):
    type: Literal["text"]


class ResponseFormatJSONObject(_Body):
    type: Literal["json_object"]


class JSONSchemaSpec(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    name: Optional[str] = None
    schema_: Dict[str, Any] = Field(alias="schema", description="the JSON schema the reply must match")
    strict: Optional[bool] = None


class ResponseFormatJSONSchema(_Body):
    type: Literal["json_schema"]
    json_schema: JSONSchemaSpec


class ChatRequest(_Sampling):
    """The body of POST /v1/chat/completions: OpenAI's fields, vLLM's extra sampling fields, the
    messages, logprobs and response_format.

    Examples:
        >>> from decodelab.serve.schemas import ChatRequest
        >>> r = ChatRequest.model_validate({"model": "m", "messages": [{"role": "user", "content": "Hi"}],
        ...                                 "response_format": {"type": "json_object"}})
        >>> r.messages[0].content, r.response_format.type
        ('Hi', 'json_object')
    """
    model_config = ConfigDict(json_schema_extra={"examples": [
        {"model": "MODEL", "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 16},
        {"model": "MODEL", "messages": [{"role": "user", "content": "A city as JSON."}],
         "response_format": {"type": "json_object"}, "stream": True}]})
    messages: Annotated[List[Message], Field(min_length=1)]
    max_completion_tokens: Optional[int] = Field(None, ge=1, description="as max_tokens; wins when both are given")
    logprobs: Optional[bool] = None
    top_logprobs: Optional[int] = Field(None, ge=0, le=20, description="needs logprobs: true")
    response_format: Optional[Annotated[Union[ResponseFormatText, ResponseFormatJSONObject, ResponseFormatJSONSchema],
                                        Field(discriminator="type")]] = None
    service_tier: Optional[str] = Field(None, description="accepted; no effect")
    reasoning_effort: Optional[str] = Field(None, description="accepted; no effect")


class TokenizeRequest(_Body):
    """The body of POST /tokenize: the text, and whether to add the tokenizer's special tokens.

    Examples:
        >>> from decodelab.serve.schemas import TokenizeRequest
        >>> TokenizeRequest(prompt="Hi").add_special_tokens is None
        True
    """
    prompt: str
    add_special_tokens: Optional[bool] = None


class DetokenizeRequest(_Body):
    """The body of POST /detokenize: the token ids to write as text.

    Examples:
        >>> from decodelab.serve.schemas import DetokenizeRequest
        >>> DetokenizeRequest(tokens=[1, 2]).tokens
        [1, 2]
    """
    tokens: List[Annotated[int, Field(ge=0)]] = Field(description="token ids in the vocabulary")


# Responses.

class ErrorDetail(BaseModel):
    message: str
    type: str
    param: Optional[str]
    code: Optional[str]


class ErrorResponse(BaseModel):
    """OpenAI's error JSON, the body of every 4xx and 5xx answer (``APIError.body()``).

    Examples:
        >>> from decodelab.serve.protocol import APIError
        >>> from decodelab.serve.schemas import ErrorResponse
        >>> ErrorResponse.model_validate(APIError(400, "bad", "n").body()).error.param
        'n'
    """
    error: ErrorDetail


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class CompletionLogprobs(BaseModel):
    tokens: List[str]
    token_logprobs: List[float]
    top_logprobs: List[Dict[str, float]]
    text_offset: List[int]


class CompletionChoice(BaseModel):
    index: int
    text: str
    logprobs: Optional[CompletionLogprobs]
    finish_reason: Literal["stop", "length"]


class Completion(BaseModel):
    """The answer to a /v1/completions request that does not stream."""
    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: List[CompletionChoice]
    usage: Usage


class CompletionChunkChoice(CompletionChoice):
    finish_reason: Optional[Literal["stop", "length"]]


class CompletionChunk(BaseModel):
    """One Server-Sent Event of a streamed /v1/completions answer."""
    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: List[CompletionChunkChoice]
    usage: Optional[Usage] = None


class TopLogprob(BaseModel):
    token: str
    logprob: float
    bytes: List[int]


class TokenLogprob(TopLogprob):
    top_logprobs: List[TopLogprob]


class ChatLogprobs(BaseModel):
    content: List[TokenLogprob]
    refusal: None


class ChatMessage(BaseModel):
    role: Literal["assistant"]
    content: str
    refusal: None


class ChatChoice(BaseModel):
    index: int
    message: ChatMessage
    logprobs: Optional[ChatLogprobs]
    finish_reason: Literal["stop", "length"]


class ChatCompletion(BaseModel):
    """The answer to a /v1/chat/completions request that does not stream."""
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: List[ChatChoice]
    usage: Usage


class ChatDelta(BaseModel):
    role: Optional[Literal["assistant"]] = None
    content: Optional[str] = None


class ChatChunkChoice(BaseModel):
    index: int
    delta: ChatDelta
    logprobs: Optional[ChatLogprobs]
    finish_reason: Optional[Literal["stop", "length"]]


class ChatCompletionChunk(BaseModel):
    """One Server-Sent Event of a streamed /v1/chat/completions answer."""
    id: str
    object: Literal["chat.completion.chunk"]
    created: int
    model: str
    choices: List[ChatChunkChoice]
    usage: Optional[Usage] = None


class ModelCard(BaseModel):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str
    max_model_len: int


class ModelList(BaseModel):
    """GET /v1/models."""
    object: Literal["list"]
    data: List[ModelCard]


class Health(BaseModel):
    status: Literal["ok"]


class Tokenized(BaseModel):
    tokens: List[int]
    count: int
    max_model_len: int


class Detokenized(BaseModel):
    prompt: str


_TAGS = {"str", "int", "float", "bool", "list", "dict", "none"}


def parse(model: Type[BaseModel], body: Any) -> dict:
    """A request body checked against its model: the fields it gives, as a dict.

    Args:
        model: the request's model, e.g. CompletionRequest.
        body: the parsed JSON body, of any type.

    Returns:
        The body's fields that are not null, numbers as floats where the field is a float.

    Raises:
        APIError: 400 naming the field at fault: "unknown parameter 'x'" for a field the API does
            not have (the first in name order), "echo is not supported by this server" for an
            unsupported OpenAI field away from its default, else the field, what it should be and
            the value given.

    Examples:
        >>> from decodelab.serve.schemas import CompletionRequest, parse
        >>> parse(CompletionRequest, {"model": "m", "prompt": "Hi", "n": 2.0})
        Traceback (most recent call last):
        ...
        decodelab.serve.protocol.APIError: n: Input should be a valid integer, got 2.0
        >>> parse(CompletionRequest, {"model": "m", "prompt": "Hi", "echo": True})
        Traceback (most recent call last):
        ...
        decodelab.serve.protocol.APIError: echo is not supported by this server
    """
    if not isinstance(body, dict):
        raise APIError(400, "the request body must be a JSON object")
    try:
        return model.model_validate(body).model_dump(exclude_none=True, by_alias=True)
    except ValidationError as e:
        errors = e.errors(include_url=False)
    unknown = sorted(str(x["loc"][0]) for x in errors if x["type"] == "extra_forbidden" and len(x["loc"]) == 1)
    if unknown:
        raise APIError(400, f"unknown parameter {unknown[0]!r}", unknown[0]) from None
    first = errors[0]
    field = str(first["loc"][0]) if first["loc"] else None
    if field in UNSUPPORTED:
        raise APIError(400, f"{field} is not supported by this server", field) from None
    # The path to the value, without the names pydantic gives the members of a union ("list[int]").
    parts = [str(p) for p in first["loc"] if isinstance(p, int) or p.isidentifier() and p not in _TAGS]
    where = ".".join(p for i, p in enumerate(parts) if i == 0 or p != parts[i - 1])  # a union's tag repeats
    if first["type"] == "missing":
        raise APIError(400, f"{where} is required", field) from None
    raise APIError(400, f"{where}: {first['msg']}, got {first['input']!r:.80}", field) from None


def openapi_components(served_model_name: str = "MODEL") -> Dict[str, Any]:
    """The JSON schemas of every request and response model, for /openapi.json's
    ``components.schemas`` (references written as ``#/components/schemas/Name``).

    Args:
        served_model_name: the one name the requests' ``model`` field may hold (its enum), also
            written into the examples; default "MODEL".

    Returns:
        A dict of schema name -> JSON schema.

    Examples:
        >>> from decodelab.serve.schemas import openapi_components
        >>> c = openapi_components()
        >>> c["CompletionRequest"]["properties"]["temperature"]["anyOf"][0]
        {'maximum': 2, 'minimum': 0, 'type': 'number'}
    """
    models = [CompletionRequest, ChatRequest, TokenizeRequest, DetokenizeRequest]
    answers = [ErrorResponse, Completion, CompletionChunk, ChatCompletion, ChatCompletionChunk, ModelList, Health,
               Tokenized, Detokenized]
    _, top = models_json_schema([(m, "validation") for m in models] + [(m, "serialization") for m in answers],
                                ref_template="#/components/schemas/{model}")
    defs = top["$defs"]
    for name in ("CompletionRequest", "ChatRequest"):
        defs[name]["properties"]["model"]["enum"] = [served_model_name]
        for example in defs[name]["examples"]:
            example["model"] = served_model_name
    return defs
