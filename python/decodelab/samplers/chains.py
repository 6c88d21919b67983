"""Keyword chains: generate()'s sampling keywords turned into a Chain, in the order of transformers,
vLLM or llama.cpp (``ORDERS``), starting from a named ``PRESETS`` entry when asked.

``ORDERS`` maps each order ("hf", "vllm", "llama.cpp") to its stage names in order; a keyword absent
from an order is refused for it. ``DEFAULT_ORDER`` is "hf". ``PRESETS`` maps "factual", "balanced" and
"creative" to keyword dicts.

Examples:
    >>> ORDERS["llama.cpp"][-1], DEFAULT_ORDER
    ('temperature', 'hf')
    >>> PRESETS["factual"]
    {'temperature': 0.2, 'top_p': 0.9}
    >>> build_chain(preset="factual")
    Chain([Temperature(0.2), TopP(0.9), Dist(seed=0)])
"""
from __future__ import annotations

from typing import Optional, Sequence

from .base import Chain, Sampler
from .penalties import (BadWords, FrequencyPenalty, LogitBias, MinNewTokens, NoRepeatNGram, PresencePenalty,
                        RepetitionPenalty, SequenceBias)
from .selectors import Dist, Greedy
from .warpers import MinP, Temperature, TopK, TopP, TypicalP

__all__ = ["ORDERS", "DEFAULT_ORDER", "PRESETS", "build_chain"]


# --- keyword chains in the order of each system (../shared REFERENCE.md) -----------------------

# Stage names in order; a keyword absent from a system's order is refused for that order.
ORDERS = {
    # transformers generation/utils.py _get_logits_processor (processors, then warpers)
    "hf": ["logit_bias", "sequence_bias", "repetition_penalty", "presence_penalty", "frequency_penalty",
           "no_repeat_ngram_size", "bad_words_ids", "min_new_tokens", "temperature", "top_k", "top_p", "min_p",
           "typical_p"],
    # vLLM v1/sample/sampler.py
    "vllm": ["bad_words_ids", "min_new_tokens", "logit_bias", "repetition_penalty", "frequency_penalty",
             "presence_penalty", "temperature", "min_p", "top_k", "top_p"],
    # llama.cpp common/sampling.cpp default chain: temperature last
    "llama.cpp": ["logit_bias", "repetition_penalty", "presence_penalty", "frequency_penalty", "top_k",
                  "typical_p", "top_p", "min_p", "temperature"],
}
DEFAULT_ORDER = "hf"

PRESETS = {
    # Near-deterministic: code, extraction, factual answers.
    "factual": dict(temperature=0.2, top_p=0.9),
    # The common chat default.
    "balanced": dict(temperature=0.7, top_p=0.9, repetition_penalty=1.05),
    # Stories and brainstorming: a flatter distribution, min_p guarding the tail.
    "creative": dict(temperature=1.0, min_p=0.05, top_p=0.98, presence_penalty=0.3),
}

_NOOP = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "typical_p": 1.0, "repetition_penalty": 1.0,
         "presence_penalty": 0.0, "frequency_penalty": 0.0, "no_repeat_ngram_size": 0, "min_new_tokens": 0}


def _stage(key: str, v, eos_ids: Sequence[int], keep: int = 1) -> Sampler:
    if key == "temperature":
        return Temperature(v)
    if key == "top_k":
        return TopK(v, keep)
    if key == "top_p":
        return TopP(v, keep)
    if key == "min_p":
        return MinP(v, keep)
    if key == "typical_p":
        return TypicalP(v, keep)
    if key == "repetition_penalty":
        return RepetitionPenalty(v)
    if key == "presence_penalty":
        return PresencePenalty(v)
    if key == "frequency_penalty":
        return FrequencyPenalty(v)
    if key == "no_repeat_ngram_size":
        return NoRepeatNGram(v)
    if key == "logit_bias":
        return LogitBias(v)
    if key == "min_new_tokens":
        return MinNewTokens(v, eos_ids)
    if key == "bad_words_ids":
        return BadWords(v, eos_ids)
    if key == "sequence_bias":
        return SequenceBias(v)
    raise ValueError(f"unknown sampling option {key!r}")


# Options given as a collection: no no-op value, and empty (or None) adds no stage.
_COLLECTIONS = ("logit_bias", "bad_words_ids", "sequence_bias")


def build_chain(*, order: str = DEFAULT_ORDER, seed: int = 0, eos_token_ids: Sequence[int] = (),
                preset: Optional[str] = None, greedy_default: bool = False, min_tokens_to_keep: int = 1,
                **options) -> Chain:
    """The Chain that keyword options describe, in the order of ``order``, starting from the named
    ``preset`` (``PRESETS``) when given; the keywords override it.

    The rule for ``temperature=0``, stated here alone: it is greedy decoding. The chain ends in
    Greedy; processors (penalties, bias, n-gram bans) still apply and the warpers add no stage, as
    in transformers' greedy search; a warper given as a keyword (not by the preset) is an error,
    since it would do nothing. A temperature left out means 0 with ``greedy_default`` (generate()'s
    default) and 1 otherwise. Any other temperature ends the chain in Dist(seed). Options at their
    no-op value add no stage.

    Args:
        order: the stage order, a key of ``ORDERS``: "hf" (the default, ``DEFAULT_ORDER``), "vllm"
            or "llama.cpp".
        seed: the seed of the final ``Dist`` stage, an integer in [0, 2**64); default 0. Unused
            when the chain ends in Greedy.
        eos_token_ids: the EOS ids that ``min_new_tokens`` bans, each >= 0; default none.
        preset: a key of ``PRESETS`` ("factual", "balanced", "creative") to start from; default
            None, no preset.
        greedy_default: True reads a temperature left out (or None) as 0, greedy decoding, as
            generate() does; default False, which reads it as 1.
        min_tokens_to_keep: goes to the truncation warpers (top_k, top_p, min_p, typical_p), >= 1;
            default 1. Beam sampling passes the number of EOS ids + 1, as transformers does.
        **options: the sampling keywords: temperature, top_k, top_p, min_p, typical_p,
            repetition_penalty, presence_penalty, frequency_penalty, no_repeat_ngram_size,
            logit_bias, min_new_tokens, bad_words_ids (``BadWords``) and sequence_bias
            (``SequenceBias``), each in its sampler's range. None, or the sampler's no-op value
            (temperature 1, top_k 0, top_p 1, min_p 0, typical_p 1, penalties 1 or 0,
            no_repeat_ngram_size 0, min_new_tokens 0, an empty logit_bias, bad_words_ids or
            sequence_bias), adds no stage.

    Returns:
        Chain: the stages in ``order``, ending in ``Greedy()`` or ``Dist(seed)``.

    Raises:
        ValueError: if ``order`` or ``preset`` is unknown, a keyword is not a sampling option or
            not part of ``order`` (the message names an order that has it, where one does), a
            truncation warper is given as a keyword with ``temperature=0`` (even at its no-op
            value), or a value is outside its sampler's range.

    Examples:
        >>> build_chain(temperature=0.5, top_k=3)
        Chain([Temperature(0.5), TopK(3), Dist(seed=0)])
        >>> build_chain(order="llama.cpp", temperature=0.5, top_k=3)
        Chain([TopK(3), Temperature(0.5), Dist(seed=0)])
        >>> build_chain(temperature=0, repetition_penalty=1.2)
        Chain([RepetitionPenalty(1.2), Greedy()])
        >>> build_chain(preset="balanced", top_p=1.0, seed=7)  # the keyword turns the preset's top_p off
        Chain([RepetitionPenalty(1.05), Temperature(0.7), Dist(seed=7)])
        >>> build_chain(temperature=0, top_p=0.9)
        Traceback (most recent call last):
            ...
        ValueError: top_p has no effect with temperature=0 (greedy decoding); set temperature > 0 to sample
    """
    given = options  # the keywords themselves, without the preset's
    if preset is not None:
        if preset not in PRESETS:
            raise ValueError(f"preset must be one of {', '.join(map(repr, PRESETS))}, got {preset!r}")
        options = {**PRESETS[preset], **options}
    if greedy_default and options.get("temperature") is None:
        options = {**options, "temperature": 0.0}
    if order not in ORDERS:
        raise ValueError(f"order must be one of {', '.join(repr(o) for o in ORDERS)}, got {order!r}")
    warpers = ("top_k", "top_p", "min_p", "typical_p")
    if options.get("temperature") == 0:
        useless = [k for k in warpers if given.get(k) is not None]
        if useless:
            raise ValueError(f"{', '.join(useless)} has no effect with temperature=0 (greedy decoding); "
                             "set temperature > 0 to sample")
    for k, v in options.items():
        if k not in _NOOP and k not in _COLLECTIONS:
            raise ValueError(f"unknown sampling option {k!r}")
        # Validate every value, even one that adds no stage.
        if v is not None and k in _NOOP:
            _stage(k, v, eos_token_ids)
    active = {k: v for k, v in options.items() if v is not None and not (k in _NOOP and v == _NOOP[k])
              and not (k in _COLLECTIONS and isinstance(v, (dict, list, tuple)) and not v)}
    greedy = options.get("temperature") == 0
    warpers = {"temperature", *warpers}
    missing = [k for k in active if k not in ORDERS[order] and not (greedy and k in warpers)]
    if missing:
        has = [o for o in ORDERS if all(k in ORDERS[o] for k in missing)]
        raise ValueError(f"{', '.join(missing)} is not part of the {order!r} sampler order"
                         + (f"; use order={has[0]!r}" if has else ""))
    stages = []
    for key in ORDERS[order]:
        if key in active and not (greedy and key in warpers):
            stages.append(_stage(key, active[key], eos_token_ids, min_tokens_to_keep))
    stages.append(Greedy() if greedy else Dist(seed))
    return Chain(stages)
