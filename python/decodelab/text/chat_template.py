"""Chat templates: a model's Jinja template rendered over a list of messages the way transformers'
apply_chat_template renders it (jinja2's immutable sandbox, trim_blocks and lstrip_blocks, the
raise_exception and strftime_now helpers, tojson), so templates from GGUF metadata or
tokenizer_config.json give the same text here as there.

A tokenizer's ``apply_chat_template`` renders its model's template with this module; ``render``
takes any template.

Examples:
    >>> from decodelab.text.chat_template import render
    >>> render("{% for m in messages %}[{{ m.role }}] {{ m.content }}{% endfor %}", [{"role": "user", "content": "Hi"}])
    '[user] Hi'
"""
from __future__ import annotations

import datetime
import json
from typing import Any, Dict, List, Optional, Sequence

__all__ = ["render", "check_tools", "MAX_RENDERED_CHARS"]

# Rendered text longer than this is refused: a template is untrusted input and a loop in it could
# otherwise produce text without bound.
MAX_RENDERED_CHARS = 1 << 24


def check_messages(messages) -> List[Dict[str, Any]]:
    """The messages, checked: a list of {"role": str, "content": str, ...} dicts.

    An assistant message that calls tools (it has ``tool_calls``) may have ``content`` None, as
    OpenAI's API writes it.

    Args:
        messages: the messages (a list or other sequence of dicts; other keys pass through).

    Returns:
        The messages as a list.

    Raises:
        ValueError: if messages is not a sequence of dicts (a str is refused), naming the first bad one and its
            index when a message lacks a str "role" or "content".

    Examples:
        >>> check_messages([{"role": "user", "content": "Hi"}])
        [{'role': 'user', 'content': 'Hi'}]
    """
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise ValueError(f"messages must be a list of {{'role': ..., 'content': ...}} dicts, got {messages!r:.80}")
    out = []
    for i, m in enumerate(messages):
        content_ok = isinstance(m, dict) and (isinstance(m.get("content"), str) or
                                              (m.get("content") is None and bool(m.get("tool_calls"))))
        if not content_ok or not isinstance(m.get("role"), str):
            raise ValueError(f"messages[{i}] must be a dict with str 'role' and 'content', got {m!r:.80}")
        out.append(m)
    return out


def check_tools(tools) -> Optional[List[Dict[str, Any]]]:
    """The tools a template is given, checked: None, or a list of JSON-schema function specs.

    Each spec is a dict that JSON can write, as OpenAI's API and transformers' apply_chat_template
    take them: ``{"type": "function", "function": {"name": ..., "description": ..., "parameters":
    {...}}}``. The template decides how they appear in the prompt.

    Args:
        tools: None (no tools), or a list of dicts.

    Returns:
        None, or the tools as a list.

    Raises:
        ValueError: tools is not a list of dicts, or a spec holds a value JSON cannot write.

    Examples:
        >>> from decodelab.text.chat_template import check_tools
        >>> check_tools([{"type": "function", "function": {"name": "now", "parameters": {"type": "object"}}}])
        [{'type': 'function', 'function': {'name': 'now', 'parameters': {'type': 'object'}}}]
        >>> check_tools("now")
        Traceback (most recent call last):
        ...
        ValueError: tools must be a list of JSON-schema function specs (dicts), got 'now'
    """
    if tools is None:
        return None
    if isinstance(tools, (str, bytes, dict)) or not isinstance(tools, Sequence):
        raise ValueError(f"tools must be a list of JSON-schema function specs (dicts), got {tools!r:.80}")
    for i, t in enumerate(tools):
        if not isinstance(t, dict):
            raise ValueError(f"tools[{i}] must be a dict (a JSON-schema function spec), got {t!r:.80}")
        try:
            json.dumps(t)
        except (TypeError, ValueError) as e:
            raise ValueError(f"tools[{i}] cannot be written as JSON: {e}") from None
    return list(tools)


def render(template: str, messages, *, add_generation_prompt: bool = False, **variables) -> str:
    """The template's text for messages, rendered as transformers' apply_chat_template renders it.

    The template runs in jinja2's immutable sandbox with trim_blocks and lstrip_blocks, the
    loopcontrols extension, the ``raise_exception(message)`` and ``strftime_now(format)`` globals
    and a ``tojson`` filter that keeps non-ASCII characters. Errors in the template, or
    raise_exception() in it, are ValueError.

    Args:
        template: the Jinja template text (e.g. a GGUF file's ``tokenizer.chat_template``).
        messages: a list of ``{"role": str, "content": str, ...}`` dicts, oldest first; the template sees
            them as ``messages``.
        add_generation_prompt: passed to the template as ``add_generation_prompt``: end with the opening of
            an assistant turn; default False.
        **variables: extra variables for the template (``bos_token``, ``eos_token``, ``tools``, ...); none by
            default.

    Returns:
        The rendered text.

    Raises:
        ValueError: if messages is not a list of dicts with str "role" and "content", add_generation_prompt
            is not a bool, the template has a syntax or runtime error or calls raise_exception() (the
            message starts "chat template error:"), the sandbox refuses an operation, or the text would
            exceed ``MAX_RENDERED_CHARS`` (16 Mi) characters.

    Examples:
        >>> from decodelab.text.chat_template import render
        >>> template = ("{{ bos_token }}{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\\n{% endfor %}"
        ...             "{% if add_generation_prompt %}<|assistant|>{% endif %}")
        >>> render(template, [{"role": "user", "content": "Hi"}], add_generation_prompt=True, bos_token="<s>")
        '<s><|user|>Hi\\n<|assistant|>'
        >>> render("{{ raise_exception('no system role') }}", [])
        Traceback (most recent call last):
        ...
        ValueError: chat template error: no system role
    """
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    messages = check_messages(messages)
    if not isinstance(template, str):
        raise ValueError(f"a chat template is Jinja text (str), got {type(template).__name__}")
    if "tools" in variables:
        variables["tools"] = check_tools(variables["tools"])
    if not isinstance(add_generation_prompt, bool):
        raise ValueError(f"add_generation_prompt must be True or False, got {add_generation_prompt!r}")

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    try:
        compiled = env.from_string(template)
        pieces = []
        total = 0
        for piece in compiled.generate(messages=messages, add_generation_prompt=add_generation_prompt, **variables):
            total += len(piece)
            if total > MAX_RENDERED_CHARS:
                raise ValueError(f"the chat template rendered more than {MAX_RENDERED_CHARS} characters")
            pieces.append(piece)
    except (jinja2.exceptions.TemplateError, OverflowError) as e:  # the sandbox's range limit: OverflowError
        raise ValueError(f"chat template error: {e}") from None
    return "".join(pieces)
