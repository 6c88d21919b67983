"""Sampler objects: each one rewrites a next-token logits vector, and a Chain composes them.

Every sampler runs in the C++ core; these classes are their Python twins. ``apply`` returns new
logits (removed tokens at ``-inf``) and never changes the array it is given; ``Chain.trace``
shows the distribution after every stage. Conventions shared by all samplers: NaN logits count
as removed, ``+inf`` logits take all the probability, and a truncation filter always keeps the
most likely token (XTC aside: it removes top choices on purpose; bans such as SuppressTokens can
remove every token). The families live in ``base`` (Sampler, Chain), ``warpers`` (temperature,
truncation), ``penalties``, ``selectors`` (the final pick), ``watermark``, ``grammar`` (constrained
decoding) and ``chains`` (keyword options to a Chain, ORDERS, PRESETS). The examples in these modules take
``import numpy as np``, ``import decodelab`` and ``from decodelab.samplers import *`` as done, and
use one four-token distribution (``probs`` shows it rounded to 3 digits).

Examples:
    >>> import numpy as np
    >>> from decodelab.samplers import *
    >>> logits = np.log([0.5, 0.2, 0.2, 0.1])
    >>> probs(Chain([TopK(3), Temperature(0.5)]).apply(logits))
    [0.758, 0.121, 0.121, 0.0]
    >>> [(r.name, r.n_kept) for r in Chain([TopK(3), Temperature(0.5)]).trace(logits)]
    [('input', 4), ('top_k(3)', 3), ('temperature(0.5)', 3)]
"""
from .base import Chain, Sampler, StageRecord, probs, softmax
from .chains import DEFAULT_ORDER, ORDERS, PRESETS, build_chain
from .grammar import Grammar, GrammarMask
from .penalties import (DRY, BadWords, ExponentialDecayLengthPenalty, ForcedBOS, ForcedEOS, FrequencyPenalty,
                        LogitBias, MinNewTokens, NoRepeatNGram, PresencePenalty, RepetitionPenalty, SequenceBias,
                        SuppressTokens)
from .selectors import Dist, Greedy, Mirostat
from .warpers import XTC, EpsilonCutoff, EtaCutoff, MinP, Temperature, TopH, TopK, TopNSigma, TopP, TypicalP
from .watermark import Watermark, WatermarkDetector

__all__ = [
    "Sampler", "Chain", "StageRecord", "probs", "softmax",
    "Temperature", "TopK", "TopP", "MinP", "TypicalP", "EpsilonCutoff", "EtaCutoff", "TopNSigma", "XTC",
    "RepetitionPenalty", "PresencePenalty", "FrequencyPenalty", "NoRepeatNGram", "LogitBias", "SuppressTokens",
    "MinNewTokens", "DRY", "SequenceBias", "BadWords", "ExponentialDecayLengthPenalty", "ForcedBOS", "ForcedEOS",
    "TopH", "Watermark", "WatermarkDetector", "Mirostat", "Greedy", "Dist", "Grammar", "GrammarMask",
    "ORDERS", "DEFAULT_ORDER", "PRESETS", "build_chain",
]
