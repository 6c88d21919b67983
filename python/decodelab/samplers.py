"""Sampler objects: each one rewrites a next-token logits vector, and a Chain composes them.

Every sampler runs in the C++ core; these classes are their Python twins. ``apply`` returns new
logits (removed tokens at ``-inf``) and never changes the array it is given; ``Chain.trace``
shows the distribution after every stage. Conventions shared by all samplers: NaN logits count
as removed, ``+inf`` logits take all the probability, and a filter always keeps the most likely
token. The examples use one four-token distribution:

>>> import numpy as np
>>> from decodelab.samplers import *
>>> logits = np.log([0.5, 0.2, 0.2, 0.1])
>>> probs(Chain([TopK(3), Temperature(0.5)]).apply(logits))
[0.758, 0.121, 0.121, 0.0]
"""
from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Dict, Iterable, List, Mapping, Optional, Sequence

import numpy as np

from . import options
from ._native import _core

__all__ = [
    "Sampler", "Chain", "StageRecord", "probs", "softmax",
    "Temperature", "TopK", "TopP", "MinP", "TypicalP", "EpsilonCutoff", "EtaCutoff", "TopNSigma", "XTC",
    "RepetitionPenalty", "PresencePenalty", "FrequencyPenalty", "NoRepeatNGram", "LogitBias", "SuppressTokens",
    "MinNewTokens", "DRY", "SequenceBias", "BadWords", "ExponentialDecayLengthPenalty", "ForcedBOS", "ForcedEOS",
    "TopH", "Watermark", "Mirostat", "Greedy", "Dist",
    "ORDERS", "DEFAULT_ORDER", "PRESETS", "build_chain",
]


def softmax(logits) -> np.ndarray:
    """Probabilities of a logits vector under the samplers' conventions (float32)."""
    return _core.softmax(np.asarray(logits, dtype=np.float32))


def probs(logits, digits: int = 3) -> List[float]:
    """Probabilities of a logits vector, rounded: a readable view of a distribution."""
    return [round(float(p), digits) for p in _core.softmax(np.asarray(logits, dtype=np.float32))]


def _int(name: str, v, lo: Optional[int] = None) -> int:
    return options.integer(name, v, lo, 2**63 - 1)


def _float(name: str, v) -> float:
    return options.real(name, v)


def _keep(v) -> int:
    return _int("min_tokens_to_keep", v)  # its range is checked in the core, with the sampler's name


def _logits(logits) -> np.ndarray:
    a = np.asarray(logits)
    if a.ndim != 1 or not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer)):
        raise ValueError(f"logits must be a 1-D array of numbers, got shape {a.shape} of {a.dtype}")
    return a.astype(np.float32, copy=False)


def _where(context, n_prompt, step, sequence):
    """The checked (context ids, n_prompt, step, sequence) of an apply() or trace() call."""
    if isinstance(context, (str, bytes)) or context is None:
        raise ValueError(f"context must be a list of token ids, got {type(context).__name__}")
    ids = [_int(f"context[{i}]", t, 0) for i, t in enumerate(context)]
    return (ids, options.integer("n_prompt", n_prompt, 0, len(ids)), _int("step", step, 0),
            _int("sequence", sequence, 0))




class Sampler:
    """Base of all samplers: ``apply`` is the one thing a sampler must do."""

    _core: "_core.Sampler"

    @property
    def name(self) -> str:
        return self._core.name

    @property
    def selects(self) -> bool:
        """True when the sampler picks the token itself (Greedy, Dist, Mirostat)."""
        return self._core.selects

    def apply(self, logits, context: Sequence[int] = (), *, n_prompt: int = 0, step: int = 0,
              sequence: int = 0) -> np.ndarray:
        """Processed logits for a 1-D logits vector (a new float32 array; removed tokens at -inf).

        ``context``: the token ids so far; ``context[:n_prompt]`` is the prompt (presence and
        frequency penalties count only what follows it). ``step`` and ``sequence`` key the
        random stream of random samplers."""
        return self._core.apply(_logits(logits), *_where(context, n_prompt, step, sequence))

    def accept(self, token: int) -> None:
        """Tell a stateful sampler which token was chosen (Mirostat updates its target)."""
        self._core.accept(int(token))

    def reset(self) -> None:
        self._core.reset()

    def clone(self) -> "Sampler":
        c = object.__new__(type(self))
        c.__dict__.update(self.__dict__)
        c._core = self._core.clone()
        return c

    def __repr__(self) -> str:
        name = self.name
        args = name[name.index("(") + 1:-1] if "(" in name else ""
        return f"{type(self).__name__}({args})"


@dataclasses.dataclass
class StageRecord:
    """The distribution after one stage of a chain."""

    name: str
    logits: np.ndarray
    probs: np.ndarray
    kept: np.ndarray          # bool mask of tokens still in the running
    n_kept: int
    entropy: float            # nats
    mass_removed: float       # probability, before this stage, of the tokens it removed
    top_ids: List[int]
    top_probs: List[float]


class Chain(Sampler):
    """Samplers applied in order; a chain is itself a sampler.

    >>> logits = np.log([0.5, 0.2, 0.2, 0.1])
    >>> chain = Chain([TopK(3), TopP(0.7)])
    >>> probs(chain.apply(logits))
    [0.714, 0.0, 0.286, 0.0]
    >>> [(r.name, r.n_kept) for r in chain.trace(logits)]
    [('input', 4), ('top_k(3)', 3), ('top_p(0.7)', 2)]
    """

    def __init__(self, stages: Iterable[Sampler]):
        self.stages = list(stages)
        for s in self.stages:
            if not isinstance(s, Sampler):
                raise ValueError(f"Chain stages must be samplers, got {s!r}")
        self._core = _core.Chain([s._core for s in self.stages])

    def clone(self) -> "Chain":
        return Chain([s.clone() for s in self.stages])

    def trace(self, logits, context: Sequence[int] = (), *, n_prompt: int = 0, step: int = 0,
              sequence: int = 0, top: int = 10) -> List[StageRecord]:
        """One record per stage, the input first."""
        top = options.integer("top", top, 0)
        pairs = self._core.trace(_logits(logits), *_where(context, n_prompt, step, sequence))
        out = []
        before = pairs[0][1]
        for name, lg in pairs:
            st = _core.stage_stats(before, lg, top)
            p = _core.softmax(lg)
            out.append(StageRecord(name=name, logits=lg, probs=p, kept=~(np.isnan(lg) | np.isneginf(lg)),
                                   n_kept=st["n_kept"], entropy=st["entropy"], mass_removed=st["mass_removed"],
                                   top_ids=list(st["top_ids"]), top_probs=list(st["top_probs"])))
            before = lg
        return out

    def __repr__(self) -> str:
        return "Chain([" + ", ".join(repr(s) for s in self.stages) + "])"


class Temperature(Sampler):
    """Divide the logits by T: below 1 sharpens, above 1 flattens.

    Range: T >= 0; T = 0 keeps only the most likely token (greedy). No-op: T = 1.
    Source: Ackley et al. 1985; transformers ``TemperatureLogitsWarper``.

    >>> logits = np.log([0.5, 0.2, 0.2, 0.1])
    >>> probs(Temperature(0.5).apply(logits))
    [0.735, 0.118, 0.118, 0.029]
    >>> probs(Temperature(0).apply(logits))
    [1.0, 0.0, 0.0, 0.0]
    """

    def __init__(self, t: float):
        self.t = _float("temperature", t)
        self._core = _core.sampler_temperature(self.t)


class TopK(Sampler):
    """Keep the k most likely tokens; tokens tied with the k-th are kept too (as transformers).

    Range: k >= 0. No-op: k = 0 or k >= vocabulary size. ``min_tokens_to_keep`` raises k to at
    least that many (transformers). Source: Fan et al. 2018; transformers ``TopKLogitsWarper``.

    >>> logits = np.log([0.5, 0.2, 0.2, 0.1])
    >>> probs(TopK(2).apply(logits))
    [0.556, 0.222, 0.222, 0.0]
    """

    def __init__(self, k: int, min_tokens_to_keep: int = 1):
        self.k = _int("top_k", k)
        self.min_tokens_to_keep = _keep(min_tokens_to_keep)
        self._core = _core.sampler_top_k(self.k, self.min_tokens_to_keep)


class TopP(Sampler):
    """Nucleus sampling: keep the most likely tokens until their mass reaches p, including the
    token that crosses p (transformers' rule; some code drops it). Tokens rank by logit (two
    logits can share one float32 probability); among equal logits the higher id ranks first, as
    in transformers' ascending stable sort. The ``min_tokens_to_keep`` ranked first always stay.

    Range: 0 < p <= 1. No-op: p = 1.
    Source: Holtzman et al. 2020; transformers ``TopPLogitsWarper``.

    >>> logits = np.log([0.5, 0.2, 0.2, 0.1])
    >>> probs(TopP(0.6).apply(logits))
    [0.714, 0.0, 0.286, 0.0]
    """

    def __init__(self, p: float, min_tokens_to_keep: int = 1):
        self.p = _float("top_p", p)
        self.min_tokens_to_keep = _keep(min_tokens_to_keep)
        self._core = _core.sampler_top_p(self.p, self.min_tokens_to_keep)


class MinP(Sampler):
    """Keep tokens whose probability is at least p times the top token's, and the
    ``min_tokens_to_keep`` of highest logit (equal logits: the lower id first, as transformers'
    stable descending sort).

    Range: 0 <= p <= 1. No-op: p = 0.
    Source: Nguyen et al. 2024; transformers ``MinPLogitsWarper``.

    >>> logits = np.log([0.5, 0.2, 0.2, 0.1])
    >>> probs(MinP(0.3).apply(logits))
    [0.556, 0.222, 0.222, 0.0]
    """

    def __init__(self, p: float, min_tokens_to_keep: int = 1):
        self.p = _float("min_p", p)
        self.min_tokens_to_keep = _keep(min_tokens_to_keep)
        self._core = _core.sampler_min_p(self.p, self.min_tokens_to_keep)


class TypicalP(Sampler):
    """Locally typical sampling: rank tokens by |-log p - H| and keep the smallest set whose
    mass reaches p; the ``min_tokens_to_keep`` most typical always stay.

    Range: 0 < p <= 1. No-op: p = 1.
    Source: Meister et al. 2022; transformers ``TypicalLogitsWarper``. The entropy, the distances
    and the running mass are float64 here; transformers computes them in float32, which over a
    vocabulary of tens of thousands can keep one token more or less at the edge of the set.

    >>> logits = np.log([0.5, 0.2, 0.2, 0.1])
    >>> probs(TypicalP(0.5).apply(logits))
    [0.556, 0.222, 0.222, 0.0]
    """

    def __init__(self, p: float, min_tokens_to_keep: int = 1):
        self.p = _float("typical_p", p)
        self.min_tokens_to_keep = _keep(min_tokens_to_keep)
        self._core = _core.sampler_typical_p(self.p, self.min_tokens_to_keep)


class EpsilonCutoff(Sampler):
    """Remove tokens with probability below epsilon, but never one whose logit is at least the
    ``min_tokens_to_keep``-th largest: tokens tied with the top one all stay (transformers).

    Range: 0 <= epsilon < 1. No-op: epsilon = 0.
    Source: Hewitt et al. 2022; transformers ``EpsilonLogitsWarper``.

    >>> logits = np.log([0.5, 0.2, 0.2, 0.1])
    >>> probs(EpsilonCutoff(0.15).apply(logits))
    [0.556, 0.222, 0.222, 0.0]
    """

    def __init__(self, epsilon: float, min_tokens_to_keep: int = 1):
        self.epsilon = _float("epsilon", epsilon)
        self.min_tokens_to_keep = _keep(min_tokens_to_keep)
        self._core = _core.sampler_epsilon_cutoff(self.epsilon, self.min_tokens_to_keep)


class EtaCutoff(Sampler):
    """Remove tokens with probability below min(eta, sqrt(eta) * exp(-entropy)), with
    ``min_tokens_to_keep`` as EpsilonCutoff's.

    Range: 0 <= eta < 1. No-op: eta = 0.
    Source: Hewitt et al. 2022; transformers ``EtaLogitsWarper``.

    >>> logits = np.log([0.5, 0.2, 0.2, 0.1])
    >>> probs(EtaCutoff(0.3).apply(logits))
    [0.556, 0.222, 0.222, 0.0]
    """

    def __init__(self, eta: float, min_tokens_to_keep: int = 1):
        self.eta = _float("eta", eta)
        self.min_tokens_to_keep = _keep(min_tokens_to_keep)
        self._core = _core.sampler_eta_cutoff(self.eta, self.min_tokens_to_keep)


class TopNSigma(Sampler):
    """Keep logits within n standard deviations of the largest (statistics over the candidates).

    Range: n >= 0. No-op: n = 0.
    Source: Tang et al. 2024, "Top-nσ"; llama.cpp ``top_n_sigma``.

    >>> logits = np.log([0.5, 0.2, 0.2, 0.1])
    >>> probs(TopNSigma(1.0).apply(logits))
    [1.0, 0.0, 0.0, 0.0]
    >>> probs(TopNSigma(2.0).apply(logits))
    [0.556, 0.222, 0.222, 0.0]
    """

    def __init__(self, n: float):
        self.n = _float("top_n_sigma", n)
        self._core = _core.sampler_top_n_sigma(self.n)


class XTC(Sampler):
    """Exclude Top Choices: with the given probability per step, remove every token at or above
    the threshold except the least likely of them (when at least two are).

    Range: probability in [0, 1], threshold in [0, 1] (above 0.5 it never acts). No-op:
    probability = 0. Source: llama.cpp ``xtc`` (p-e-w, 2024).

    >>> logits = np.log([0.5, 0.2, 0.2, 0.1])
    >>> probs(XTC(probability=1.0, threshold=0.15).apply(logits))
    [0.0, 0.667, 0.0, 0.333]
    """

    def __init__(self, probability: float, threshold: float, seed: int = 0):
        self.probability = _float("xtc probability", probability)
        self.threshold = _float("xtc threshold", threshold)
        self._core = _core.sampler_xtc(self.probability, self.threshold, options.checked_seed(seed))


class RepetitionPenalty(Sampler):
    """For each distinct token in the context: logit < 0 ? logit * r : logit / r. The context
    is the prompt and the output (transformers; ``last_n=-1``, the default); ``last_n`` > 0
    looks only at the last n tokens (llama.cpp's window). ``last_n=0`` is refused: llama.cpp
    reads it as "off".

    Range: r > 0. No-op: r = 1. Source: Keskar et al. 2019 (CTRL);
    transformers ``RepetitionPenaltyLogitsProcessor``.

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

    Range: -2 <= penalty <= 2. No-op: 0. Counts only tokens after the prompt
    (``context[n_prompt:]``). Source: OpenAI API; vLLM ``presence_penalty``.

    >>> logits = np.log([0.5, 0.2, 0.2, 0.1])
    >>> probs(PresencePenalty(1.0).apply(logits, context=[0, 0]))
    [0.269, 0.292, 0.292, 0.146]
    """

    def __init__(self, penalty: float):
        self.penalty = _float("presence_penalty", penalty)
        self._core = _core.sampler_presence_penalty(self.penalty)


class FrequencyPenalty(Sampler):
    """Subtract penalty x (occurrences in the output so far) from each token.

    Range: -2 <= penalty <= 2. No-op: 0. Counts only tokens after the prompt.
    Source: OpenAI API; vLLM ``frequency_penalty``.

    >>> logits = np.log([0.5, 0.2, 0.2, 0.1])
    >>> probs(FrequencyPenalty(1.0).apply(logits, context=[0, 0]))
    [0.119, 0.352, 0.352, 0.176]
    """

    def __init__(self, penalty: float):
        self.penalty = _float("frequency_penalty", penalty)
        self._core = _core.sampler_frequency_penalty(self.penalty)


class NoRepeatNGram(Sampler):
    """Ban any token that would complete an n-gram already in the context.

    Range: n >= 0. No-op: n = 0. Source: Paulus et al. 2017; transformers
    ``NoRepeatNGramLogitsProcessor``.

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

    Range: token id -> finite bias or -inf. No-op: {}. Source: OpenAI API ``logit_bias``.

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

    No-op: []. Source: transformers ``SuppressTokensLogitsProcessor``.

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

    Range: min_new_tokens >= 0. No-op: 0. Source: transformers
    ``MinNewTokensLengthLogitsProcessor``.

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

    Range: multiplier >= 0, base >= 1, allowed_length >= 1. No-op: multiplier = 0.
    Source: p-e-w 2024 (text-generation-webui); llama.cpp ``dry``.

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

    Range: a dict {tuple of ids: bias} or a list of [ids, bias]; biases finite or -inf.
    No-op: biases of 0. Source: transformers ``SequenceBiasLogitsProcessor``.

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

    Range: a non-empty list of non-empty token-id lists. No-op: none (leave it out). Source: transformers ``NoBadWordsLogitsProcessor`` (``bad_words_ids``).

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

    Range: start >= 0, factor > 0 (above 1 favours ending). No-op: factor = 1. Source: transformers
    ``ExponentialDecayLengthPenalty`` (``exponential_decay_length_penalty=(start, factor)``).

    >>> logits = np.log([0.5, 0.2, 0.2, 0.1])
    >>> probs(ExponentialDecayLengthPenalty(1, 2.0, eos_token_ids=[3]).apply(logits, context=[0, 1, 2], n_prompt=0))
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

    Range: a token id. No-op: any context longer than one token. Source: transformers ``ForcedBOSTokenLogitsProcessor``.

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

    Range: max_length >= 2, EOS ids. No-op: any other context length. Source: transformers ``ForcedEOSTokenLogitsProcessor`` (``forced_eos_token_id``).

    >>> logits = np.log([0.5, 0.2, 0.2, 0.1])
    >>> probs(ForcedEOS(4, eos_token_ids=[3]).apply(logits, context=[0, 1, 2]))
    [0.0, 0.0, 0.0, 1.0]
    """

    def __init__(self, max_length: int, eos_token_ids: Iterable[int]):
        self.max_length = _int("max_length", max_length)
        self.eos_token_ids = [_int("eos token id", t) for t in eos_token_ids]
        self._core = _core.sampler_forced_eos(self.max_length, self.eos_token_ids)


class TopH(Sampler):
    """Top-H: among the 100 highest logits, keep tokens in rank order while the running sum of
    -p log p stays within ``top_h`` times their entropy (the first always stays).

    Range: 0 < top_h <= 1. No-op: none (1 keeps the 100 most likely). Source: Potraghloo et al. 2025; transformers ``TopHLogitsWarper``.

    >>> logits = np.log([0.5, 0.2, 0.2, 0.1])
    >>> probs(TopH(0.5).apply(logits))
    [1.0, 0.0, 0.0, 0.0]
    >>> probs(TopH(0.9).apply(logits))
    [0.556, 0.222, 0.222, 0.0]
    """

    def __init__(self, top_h: float):
        self.top_h = _float("top_h", top_h)
        self._core = _core.sampler_top_h(self.top_h)


class Watermark(Sampler):
    """The green-list watermark (Kirchenbauer et al. 2023): seeded by the preceding token, a fixed
    share of the vocabulary is "green" at each step and gets ``bias`` added; detect it with
    ``decodelab.watermark.WatermarkDetector`` and the same settings. The green lists equal
    transformers' bit for bit (its torch.randperm under the same seeds).

    Range: greenlist_ratio in (0, 1), finite bias, seeding_scheme "lefthash" or "selfhash",
    context_width >= 1. No-op: bias = 0. Source: transformers ``WatermarkLogitsProcessor``.

    >>> w = Watermark(vocab_size=4, greenlist_ratio=0.5, bias=1.0)
    >>> int(np.isclose(w.apply(np.zeros(4), context=[1]), 1.0).sum())
    2
    """

    def __init__(self, vocab_size: int, greenlist_ratio: float = 0.25, bias: float = 2.0,
                 hashing_key: int = 15485863, seeding_scheme: str = "lefthash", context_width: int = 1):
        self.scheme = watermark_scheme(vocab_size, greenlist_ratio, hashing_key, seeding_scheme, context_width)
        self.vocab_size, self.greenlist_ratio, self.hashing_key = vocab_size, greenlist_ratio, hashing_key
        self.seeding_scheme, self.context_width = seeding_scheme, context_width
        self.bias = _float("watermark bias", bias)
        self._core = _core.sampler_watermark(self.scheme, self.bias)


def watermark_scheme(vocab_size, greenlist_ratio, hashing_key, seeding_scheme, context_width):
    """The core's WatermarkScheme for these settings, each checked."""
    if not isinstance(seeding_scheme, str):
        raise ValueError(f"watermark seeding_scheme must be 'lefthash' or 'selfhash', got {seeding_scheme!r}")
    return _core.WatermarkScheme(_int("watermark vocab_size", vocab_size), _float("watermark greenlist_ratio",
                                 greenlist_ratio), options.checked_seed(hashing_key), seeding_scheme,
                                 _int("watermark context_width", context_width))


class Mirostat(Sampler):
    """Mirostat 2.0: keep tokens whose surprise -log2 p is at most mu, draw one, then move mu by
    eta x (observed surprise - tau). mu starts at 2 tau; ``reset`` restores it. Picks the token.

    Range: tau > 0, 0 < eta <= 1. Source: Basu et al. 2021; llama.cpp ``mirostat_v2``.

    >>> logits = np.log([0.5, 0.2, 0.2, 0.1])
    >>> m = Mirostat(tau=1.0, eta=0.1, seed=0)
    >>> sum(p > 0 for p in probs(m.apply(logits)))
    1
    """

    def __init__(self, tau: float = 5.0, eta: float = 0.1, seed: int = 0):
        self.tau = _float("mirostat tau", tau)
        self.eta = _float("mirostat eta", eta)
        self._core = _core.sampler_mirostat_v2(self.tau, self.eta, options.checked_seed(seed))


class Greedy(Sampler):
    """Pick the most likely token (ties: the lowest id, as torch.argmax).

    >>> logits = np.log([0.5, 0.2, 0.2, 0.1])
    >>> probs(Greedy().apply(logits))
    [1.0, 0.0, 0.0, 0.0]
    """

    def __init__(self):
        self._core = _core.sampler_greedy()


class Dist(Sampler):
    """Draw a token from the distribution. The draw uses a counter-based generator keyed by
    (seed, sequence, step), so a result never depends on batch order or thread count.

    Range: 0 <= seed < 2**64. Source: llama.cpp ``dist``.

    >>> logits = np.log([0.5, 0.2, 0.2, 0.1])
    >>> draws = [int(np.argmax(Dist(seed=7).apply(logits, step=s))) for s in range(2000)]
    >>> (np.bincount(draws) / 2000).round(1).tolist()
    [0.5, 0.2, 0.2, 0.1]
    >>> draws[:8] == [int(np.argmax(Dist(seed=7).apply(logits, step=s))) for s in range(8)]
    True
    """

    def __init__(self, seed: int = 0):
        self.seed = options.checked_seed(seed)
        self._core = _core.sampler_dist(self.seed)


# --- keyword chains in the order of each system (../shared REFERENCE.md) -----------------------

# Stage names in order; a keyword absent from a system's order is refused for that order.
ORDERS = {
    # transformers generation/utils.py _get_logits_processor (processors, then warpers)
    "hf": ["logit_bias", "repetition_penalty", "presence_penalty", "frequency_penalty", "no_repeat_ngram_size",
           "min_new_tokens", "temperature", "top_k", "top_p", "min_p", "typical_p"],
    # vLLM v1/sample/sampler.py
    "vllm": ["min_new_tokens", "logit_bias", "repetition_penalty", "frequency_penalty", "presence_penalty",
             "temperature", "min_p", "top_k", "top_p"],
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
    raise ValueError(f"unknown sampling option {key!r}")


def build_chain(*, order: str = DEFAULT_ORDER, seed: int = 0, eos_token_ids: Sequence[int] = (),
                preset: Optional[str] = None, greedy_default: bool = False, min_tokens_to_keep: int = 1,
                **options) -> Chain:
    """The Chain that keyword options describe, in the order of ``order``, starting from the named
    ``preset`` (``PRESETS``) when given; the keywords override it. ``min_tokens_to_keep`` goes to
    the truncation warpers (beam sampling passes the number of EOS ids + 1, as transformers does).

    The rule for ``temperature=0``, stated here alone: it is greedy decoding. The chain ends in
    Greedy; processors (penalties, bias, n-gram bans) still apply and the warpers add no stage, as
    in transformers' greedy search; a warper given as a keyword (not by the preset) is an error,
    since it would do nothing. A temperature left out means 0 with ``greedy_default`` (generate()'s
    default) and 1 otherwise. Any other temperature ends the chain in Dist(seed). Options at their
    no-op value add no stage.
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
        if k not in _NOOP and k != "logit_bias":
            raise ValueError(f"unknown sampling option {k!r}")
        # Validate every value, even one that adds no stage.
        if v is not None and k != "logit_bias":
            _stage(k, v, eos_token_ids)
    active = {k: v for k, v in options.items() if v is not None and not (k in _NOOP and v == _NOOP[k])
              and not (k == "logit_bias" and not v)}
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
