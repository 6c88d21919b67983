"""Penalties, biases, bans and forced tokens: samplers that change logits by what the context holds
(repetition, presence, frequency, n-grams, DRY) or by fixed rules (logit and sequence bias, bad
words, suppressed tokens, min new tokens, length decay, forced BOS and EOS).

The context is ``apply``'s ``context``, prompt first; the presence and frequency penalties, MinNewTokens
and ExponentialDecayLengthPenalty count only the tokens after its first ``n_prompt``.

Examples:
    >>> logits = np.log([0.5, 0.2, 0.2, 0.1])
    >>> probs(Chain([RepetitionPenalty(2.0), SuppressTokens([3])]).apply(logits, context=[0]))
    [0.385, 0.308, 0.308, 0.0]
"""
from __future__ import annotations

import math
import numbers
from typing import Dict, Iterable, List, Mapping, Sequence

from .._native import _core
from .base import Sampler, _float, _int

__all__ = ["RepetitionPenalty", "PresencePenalty", "FrequencyPenalty", "NoRepeatNGram", "LogitBias", "SuppressTokens",
           "MinNewTokens", "DRY", "SequenceBias", "BadWords", "ExponentialDecayLengthPenalty", "ForcedBOS", "ForcedEOS"]


class RepetitionPenalty(Sampler):
    """For each distinct token in the context: logit < 0 ? logit * r : logit / r. The context
    is the prompt and the output (transformers; ``last_n=-1``, the default); ``last_n`` > 0
    looks only at the last n tokens (llama.cpp's window). ``last_n=0`` is refused: llama.cpp
    reads it as "off".

    Source: Keskar et al. 2019 (CTRL); transformers ``RepetitionPenaltyLogitsProcessor``.

    Args:
        penalty: r; above 1 discourages repeats, below 1 encourages them. Range: [0.001, 1000]
            (further from 1 it overflows float32 logits). No-op: r = 1.
        last_n: -1 (the default) for the whole context, or n > 0 for the last n tokens.

    Raises:
        ValueError: if ``penalty`` is outside [0.001, 1000] or ``last_n`` is neither -1 nor > 0.

    Examples:
        >>> logits = np.log([0.5, 0.2, 0.2, 0.1])
        >>> probs(RepetitionPenalty(2.0).apply(logits, context=[0]))
        [0.333, 0.267, 0.267, 0.133]
    """

    def __init__(self, penalty: float, last_n: int = -1):
        self.penalty = _float("repetition_penalty", penalty)
        self.last_n = _int("last_n", last_n)
        self._core = _core.sampler_repetition_penalty(self.penalty, self.last_n)


class PresencePenalty(Sampler):
    """Subtract the penalty from every token that occurs in the output so far.

    Counts only tokens after the prompt (``context[n_prompt:]``).
    Source: OpenAI API; vLLM ``presence_penalty``.

    Args:
        penalty: the amount subtracted (negative values favour repeats). Range: -2 <= penalty <= 2.
            No-op: 0.

    Raises:
        ValueError: if ``penalty`` is outside [-2, 2].

    Examples:
        >>> logits = np.log([0.5, 0.2, 0.2, 0.1])
        >>> probs(PresencePenalty(1.0).apply(logits, context=[0, 0]))
        [0.269, 0.292, 0.292, 0.146]
    """

    def __init__(self, penalty: float):
        self.penalty = _float("presence_penalty", penalty)
        self._core = _core.sampler_presence_penalty(self.penalty)


class FrequencyPenalty(Sampler):
    """Subtract penalty x (occurrences in the output so far) from each token.

    Counts only tokens after the prompt (``context[n_prompt:]``).
    Source: OpenAI API; vLLM ``frequency_penalty``.

    Args:
        penalty: the amount subtracted per occurrence. Range: -2 <= penalty <= 2. No-op: 0.

    Raises:
        ValueError: if ``penalty`` is outside [-2, 2].

    Examples:
        >>> logits = np.log([0.5, 0.2, 0.2, 0.1])
        >>> probs(FrequencyPenalty(1.0).apply(logits, context=[0, 0]))
        [0.119, 0.352, 0.352, 0.176]
    """

    def __init__(self, penalty: float):
        self.penalty = _float("frequency_penalty", penalty)
        self._core = _core.sampler_frequency_penalty(self.penalty)


class NoRepeatNGram(Sampler):
    """Ban any token that would complete an n-gram already in the context.

    Source: Paulus et al. 2017; transformers ``NoRepeatNGramLogitsProcessor``.

    Args:
        n: the n-gram size. Range: n >= 0. No-op: n = 0.

    Raises:
        ValueError: if ``n`` < 0.

    Examples:
        >>> logits = np.log([0.5, 0.2, 0.2, 0.1])
        >>> probs(NoRepeatNGram(2).apply(logits, context=[3, 0, 3]))
        [0.0, 0.4, 0.4, 0.2]
    """

    def __init__(self, n: int):
        self.n = _int("no_repeat_ngram_size", n)
        self._core = _core.sampler_no_repeat_ngram(self.n)


def _bias(v) -> float:
    if isinstance(v, numbers.Real) and not isinstance(v, bool) and float(v) == -math.inf:
        return -math.inf  # bans the token
    return _float("logit_bias value", v)


class LogitBias(Sampler):
    """Add a bias to chosen tokens' logits (-inf bans a token).

    Source: OpenAI API ``logit_bias``.

    Args:
        bias: a dict of token id -> bias. Range: ids >= 0, biases finite in float32 or -inf.
            No-op: {}.

    Raises:
        ValueError: if ``bias`` is not a dict, a token id is negative, or a bias is neither finite
            nor -inf.

    Examples:
        >>> import math
        >>> logits = np.log([0.5, 0.2, 0.2, 0.1])
        >>> probs(LogitBias({3: math.log(5)}).apply(logits))
        [0.357, 0.143, 0.143, 0.357]
    """

    def __init__(self, bias: Mapping[int, float]):
        if not isinstance(bias, Mapping):
            raise ValueError(f"logit_bias must be a dict of token id -> bias, got {type(bias).__name__} {bias!r:.60}")
        self.bias: Dict[int, float] = {_int("logit_bias token id", k): _bias(v) for k, v in bias.items()}
        self._core = _core.sampler_logit_bias(self.bias)


class SuppressTokens(Sampler):
    """Remove the given tokens.

    Source: transformers ``SuppressTokensLogitsProcessor``.

    Args:
        token_ids: the token ids to remove, each >= 0. No-op: [].

    Raises:
        ValueError: if a token id is negative or not an integer.

    Examples:
        >>> logits = np.log([0.5, 0.2, 0.2, 0.1])
        >>> probs(SuppressTokens([0]).apply(logits))
        [0.0, 0.4, 0.4, 0.2]
    """

    def __init__(self, token_ids: Iterable[int]):
        self.token_ids = [_int("suppress_tokens token id", t) for t in token_ids]
        self._core = _core.sampler_suppress_tokens(self.token_ids)


class MinNewTokens(Sampler):
    """Ban the EOS tokens until ``min_new_tokens`` tokens have been generated (tokens after the
    prompt: ``len(context) - n_prompt``).

    Source: transformers ``MinNewTokensLengthLogitsProcessor``.

    Args:
        min_new_tokens: how many tokens must be generated before EOS may follow. Range: >= 0.
            No-op: 0.
        eos_token_ids: the EOS ids to ban, each >= 0. No-op: [].

    Raises:
        ValueError: if ``min_new_tokens`` or an EOS id is negative.

    Examples:
        >>> logits = np.log([0.5, 0.2, 0.2, 0.1])
        >>> probs(MinNewTokens(2, eos_token_ids=[0]).apply(logits, context=[1], n_prompt=0))
        [0.0, 0.4, 0.4, 0.2]
    """

    def __init__(self, min_new_tokens: int, eos_token_ids: Iterable[int]):
        self.min_new_tokens = _int("min_new_tokens", min_new_tokens)
        self.eos_token_ids = [_int("eos token id", t) for t in eos_token_ids]
        self._core = _core.sampler_min_new_tokens(self.min_new_tokens, self.eos_token_ids)


class DRY(Sampler):
    """"Don't repeat yourself": when the context ends with a run that occurred before, followed by
    token x, subtract multiplier * base ** (run length - allowed_length) from x (for runs at least
    allowed_length long). Runs stop at sequence-breaker tokens. The exponent stops at
    floor(88.7228391 / ln base), so the penalty stays finite (llama.cpp). ``last_n``: -1 (the
    default) looks at the whole context, n > 0 at the last n tokens; 0 is refused, as llama.cpp
    reads it as "off".

    Source: p-e-w 2024 (text-generation-webui); llama.cpp ``dry``.

    Args:
        multiplier: the penalty's scale. Range: finite, >= 0. No-op: multiplier = 0.
        base: the growth per token of run length. Range: finite, >= 1; default 1.75.
        allowed_length: the shortest run that is penalised (shorter runs are not). Range: >= 1;
            default 2.
        sequence_breakers: token ids that end a run, each >= 0; default none.
        last_n: -1 (the default) for the whole context, or n > 0 for the last n tokens.

    Raises:
        ValueError: if a value is outside its range, or ``last_n`` is neither -1 nor > 0.

    Examples:
        >>> logits = np.log([0.5, 0.2, 0.2, 0.1])
        >>> probs(DRY(multiplier=1.0, base=2.0, allowed_length=1).apply(logits, context=[1, 2, 1]))
        [0.572, 0.229, 0.084, 0.114]
    """

    def __init__(self, multiplier: float, base: float = 1.75, allowed_length: int = 2,
                 sequence_breakers: Iterable[int] = (), last_n: int = -1):
        self.multiplier = _float("dry multiplier", multiplier)
        self.base = _float("dry base", base)
        self.allowed_length = _int("dry allowed_length", allowed_length)
        self.sequence_breakers = [_int("dry sequence breaker", t) for t in sequence_breakers]
        self.last_n = _int("dry last_n", last_n)
        self._core = _core.sampler_dry(self.multiplier, self.base, self.allowed_length, self.sequence_breakers,
                                       self.last_n)


def _sequences(name: str, seqs) -> List[List[int]]:
    if isinstance(seqs, (str, bytes)) or not isinstance(seqs, Iterable):
        raise ValueError(f"{name} must be a list of token-id lists, got {seqs!r:.80}")
    out = []
    for i, sq in enumerate(seqs):
        if isinstance(sq, (str, bytes)) or not isinstance(sq, Iterable):
            raise ValueError(f"{name}[{i}] must be a list of token ids, got {sq!r:.80}")
        out.append([_int(f"{name}[{i}] token id", t) for t in sq])
    return out


class SequenceBias(Sampler):
    """Add a bias to a token when it would complete a given sequence: a one-token sequence's bias
    always applies; a longer one's applies to its last token when the context ends with the rest.
    Biases of sequences ending in the same token add up; -inf bans.

    Source: transformers ``SequenceBiasLogitsProcessor``.

    Args:
        sequence_bias: a dict {tuple of ids: bias} or a list of [ids, bias] pairs. Range: at
            least one sequence, each non-empty with ids >= 0; biases finite or -inf. No-op: biases
            of 0.

    Raises:
        ValueError: if ``sequence_bias`` is neither form, is empty, holds an empty sequence, a
            negative id or a bias neither finite nor -inf.

    Examples:
        >>> import math
        >>> logits = np.log([0.5, 0.2, 0.2, 0.1])
        >>> probs(SequenceBias({(1, 2): -math.inf, (3,): math.log(2)}).apply(logits, context=[0, 1]))
        [0.556, 0.222, 0.0, 0.222]
    """

    def __init__(self, sequence_bias):
        pairs = list(sequence_bias.items()) if isinstance(sequence_bias, Mapping) else sequence_bias
        if isinstance(pairs, (str, bytes)) or not isinstance(pairs, Iterable):
            raise ValueError(f"sequence_bias must be a dict of token-id tuples -> bias, got {sequence_bias!r:.80}")
        pairs = list(pairs)
        for i, pr in enumerate(pairs):
            if isinstance(pr, (str, bytes)) or not isinstance(pr, Sequence) or len(pr) != 2:
                raise ValueError(f"sequence_bias entry {i} must be (token ids, bias), got {pr!r:.80}")
        self.sequences = _sequences("sequence_bias", [p[0] for p in pairs])
        self.biases = [_bias(p[1]) for p in pairs]
        self._core = _core.sampler_sequence_bias(self.sequences, self.biases)


class BadWords(Sampler):
    """Ban each token that would complete one of the given sequences (a one-token sequence: that
    token always). A one-token sequence holding an EOS id is left out, as transformers does.

    Source: transformers ``NoBadWordsLogitsProcessor`` (``bad_words_ids``).

    Args:
        bad_words_ids: the banned sequences. Range: a non-empty list of non-empty token-id lists
            (ids >= 0). No-op: none (leave the sampler out).
        eos_token_ids: EOS ids, each >= 0, whose one-token sequences are left out; default none.

    Raises:
        ValueError: if ``bad_words_ids`` is not a list of token-id lists, is empty, or holds an
            empty sequence or a negative id, or an EOS id is negative.

    Examples:
        >>> logits = np.log([0.5, 0.2, 0.2, 0.1])
        >>> probs(BadWords([[1, 2], [3]]).apply(logits, context=[0, 1]))
        [0.714, 0.286, 0.0, 0.0]
    """

    def __init__(self, bad_words_ids, eos_token_ids: Iterable[int] = ()):
        self.bad_words_ids = _sequences("bad_words_ids", bad_words_ids)
        self.eos_token_ids = [_int("eos token id", t) for t in eos_token_ids]
        self._core = _core.sampler_bad_words(self.bad_words_ids, self.eos_token_ids)


class ExponentialDecayLengthPenalty(Sampler):
    """Once more than ``start`` tokens have been generated, raise each EOS logit by
    |logit| x (factor ** (generated - start) - 1): longer outputs grow ever likelier to end.

    Source: transformers ``ExponentialDecayLengthPenalty``
    (``exponential_decay_length_penalty=(start, factor)``).

    Args:
        start: how many generated tokens pass before it acts. Range: start >= 0.
        factor: the growth per token (above 1 favours ending). Range: finite, > 0. No-op: factor = 1.
        eos_token_ids: the EOS ids to raise, at least one, each >= 0.

    Raises:
        ValueError: if ``start`` < 0, ``factor`` <= 0 or not finite, or ``eos_token_ids`` is empty
            or holds a negative id.

    Examples:
        >>> logits = np.log([0.5, 0.2, 0.2, 0.1])
        >>> decay = ExponentialDecayLengthPenalty(1, 2.0, eos_token_ids=[3])
        >>> probs(decay.apply(logits, context=[0, 1, 2], n_prompt=0))
        [0.005, 0.002, 0.002, 0.991]
    """

    def __init__(self, start: int, factor: float, eos_token_ids: Iterable[int]):
        self.start = _int("exponential_decay_length_penalty start", start)
        self.factor = _float("exponential_decay_length_penalty factor", factor)
        self.eos_token_ids = [_int("eos token id", t) for t in eos_token_ids]
        self._core = _core.sampler_exponential_decay_length_penalty(self.start, self.factor, self.eos_token_ids)


class ForcedBOS(Sampler):
    """When the context is one token long, only ``token_id`` may follow (transformers'
    ``forced_bos_token_id``, meant for encoder-decoder models, whose decoder starts from one token).

    Source: transformers ``ForcedBOSTokenLogitsProcessor``.

    Args:
        token_id: the token forced after a one-token context. Range: a token id >= 0. No-op: any
            context not one token long.

    Raises:
        ValueError: if ``token_id`` < 0.

    Examples:
        >>> logits = np.log([0.5, 0.2, 0.2, 0.1])
        >>> probs(ForcedBOS(2).apply(logits, context=[0]))
        [0.0, 0.0, 1.0, 0.0]
    """

    def __init__(self, token_id: int):
        self.token_id = _int("forced_bos_token_id", token_id)
        self._core = _core.sampler_forced_bos(self.token_id)


class ForcedEOS(Sampler):
    """When the context is ``max_length - 1`` tokens long (prompt included), only the EOS ids may
    follow, so the output ends at max_length.

    Source: transformers ``ForcedEOSTokenLogitsProcessor`` (``forced_eos_token_id``).

    Args:
        max_length: the total length (prompt included) at which the output ends. Range: >= 2.
            No-op: any other context length.
        eos_token_ids: the ids allowed at the last position, at least one, each >= 0.

    Raises:
        ValueError: if ``max_length`` < 2 or ``eos_token_ids`` is empty or holds a negative id.

    Examples:
        >>> logits = np.log([0.5, 0.2, 0.2, 0.1])
        >>> probs(ForcedEOS(4, eos_token_ids=[3]).apply(logits, context=[0, 1, 2]))
        [0.0, 0.0, 0.0, 1.0]
    """

    def __init__(self, max_length: int, eos_token_ids: Iterable[int]):
        self.max_length = _int("max_length", max_length)
        self.eos_token_ids = [_int("eos token id", t) for t in eos_token_ids]
        self._core = _core.sampler_forced_eos(self.max_length, self.eos_token_ids)
