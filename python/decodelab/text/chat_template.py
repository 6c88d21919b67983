"""Chat templates: a model's Jinja template rendered over a list of messages the way transformers'
apply_chat_template renders it (jinja2's immutable sandbox, trim_blocks and lstrip_blocks, the
raise_exception and strftime_now helpers, tojson), so templates from GGUF metadata or
tokenizer_config.json give the same text here as there."""
from __future__ import annotations

import datetime
import json
from typing import Any, Dict, List, Sequence

# Rendered text longer than this is refused: a template is untrusted input and a loop in it could
# otherwise produce text without bound.
MAX_RENDERED_CHARS = 1 << 24


def check_messages(messages) -> List[Dict[str, Any]]:
    """messages: a list of {"role": str, "content": str, ...} dicts; ValueError naming the first bad one."""
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise ValueError(f"messages must be a list of {{'role': ..., 'content': ...}} dicts, got {messages!r:.80}")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise ValueError(f"messages[{i}] must be a dict with str 'role' and 'content', got {m!r:.80}")
        out.append(m)
    return out


def render(template: str, messages, *, add_generation_prompt: bool = False, **variables) -> str:
    """The template's text for messages; extra keyword variables (bos_token, tools, ...) pass
    through to the template. Errors in the template, or raise_exception() in it, are ValueError."""
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    messages = check_messages(messages)
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
