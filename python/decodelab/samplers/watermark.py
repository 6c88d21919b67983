"""The green-list watermark (Kirchenbauer et al. 2023): the ``Watermark`` sampler that adds it, and the
``WatermarkDetector`` that finds it by counting the tokens in the green list their predecessor seeds
against the share chance gives, as a z-score (counting and z-score as transformers' detector).

Examples:
    >>> w = Watermark(vocab_size=4, greenlist_ratio=0.5, bias=10.0)
    >>> chain, ids = Chain([w, Greedy()]), [1]
    >>> for step in range(20):
    ...     ids.append(int(np.argmax(chain.apply(np.zeros(4), context=ids, step=step))))
    >>> WatermarkDetector(vocab_size=4, greenlist_ratio=0.5)(ids).prediction
    True
"""
from __future__ import annotations

import dataclasses
import math
from typing import Optional, Sequence

from .. import options
from .._native import _core
from .base import Sampler, _float, _int

__all__ = ["Watermark", "WatermarkDetector", "WatermarkResult", "watermark_scheme"]


class Watermark(Sampler):
    """The green-list watermark (Kirchenbauer et al. 2023): seeded by the preceding token, a fixed
    share of the vocabulary is "green" at each step and gets ``bias`` added; detect it with
    ``WatermarkDetector`` and the same settings. The green lists equal
    transformers' bit for bit (its torch.randperm under the same seeds). A context shorter than
    ``context_width`` gets no bias (transformers skips the step).

    Source: transformers ``WatermarkLogitsProcessor``.

    Args:
        vocab_size: the model's vocabulary size. Range: [1, 2**24]; ``apply`` refuses logits of
            another length.
        greenlist_ratio: the share of the vocabulary that is green at each step. Range: (0, 1);
            default 0.25.
        bias: what green tokens get added to their logits. Range: finite; default 2.0. No-op:
            bias = 0.
        hashing_key: the key that seeds the green lists, an integer in [0, 2**64); default
            15485863 (transformers').
        seeding_scheme: "lefthash" (the default: seeded by the preceding token) or "selfhash"
            (seeded by the candidate token itself and the tokens before it in a window of
            ``context_width``; each of the 40 most likely candidates is checked), as transformers.
        context_width: the window of tokens that seeds a green list, in [1, 1024]; default 1.

    Raises:
        ValueError: if a setting is outside its range (the message names it and the limit).

    Examples:
        >>> w = Watermark(vocab_size=4, greenlist_ratio=0.5, bias=1.0)
        >>> int(np.isclose(w.apply(np.zeros(4), context=[1]), 1.0).sum())
        2
        >>> probs(w.apply(np.zeros(4), context=[]))  # too short to seed: no bias
        [0.25, 0.25, 0.25, 0.25]
    """

    def __init__(self, vocab_size: int, greenlist_ratio: float = 0.25, bias: float = 2.0,
                 hashing_key: int = 15485863, seeding_scheme: str = "lefthash", context_width: int = 1):
        self.scheme = watermark_scheme(vocab_size, greenlist_ratio, hashing_key, seeding_scheme, context_width)
        self.vocab_size, self.greenlist_ratio, self.hashing_key = vocab_size, greenlist_ratio, hashing_key
        self.seeding_scheme, self.context_width = seeding_scheme, context_width
        self.bias = _float("watermark bias", bias)
        self._core = _core.sampler_watermark(self.scheme, self.bias)


def watermark_scheme(vocab_size, greenlist_ratio, hashing_key, seeding_scheme, context_width):
    """The core's WatermarkScheme for these settings, each checked.

    Args:
        vocab_size: the vocabulary size, in [1, 2**24].
        greenlist_ratio: the green share of the vocabulary, in (0, 1).
        hashing_key: the seeding key, an integer in [0, 2**64).
        seeding_scheme: "lefthash" or "selfhash".
        context_width: the window of tokens that seeds a green list, in [1, 1024].

    Returns:
        decodelab._core.WatermarkScheme: ``greenlist(prefix)`` gives the green ids after a prefix
        and ``score(ids, ignore_repeated_ngrams)`` the (scored, green) counts of a passage.

    Raises:
        ValueError: if a setting is outside its range or ``seeding_scheme`` is not a str.

    Examples:
        >>> scheme = watermark_scheme(4, 0.5, 15485863, "lefthash", 1)
        >>> len(scheme.greenlist([1]))
        2
    """
    if not isinstance(seeding_scheme, str):
        raise ValueError(f"watermark seeding_scheme must be 'lefthash' or 'selfhash', got {seeding_scheme!r}")
    return _core.WatermarkScheme(_int("watermark vocab_size", vocab_size), _float("watermark greenlist_ratio",
                                 greenlist_ratio), options.checked_seed(hashing_key), seeding_scheme,
                                 _int("watermark context_width", context_width))


@dataclasses.dataclass(frozen=True)
class WatermarkResult:
    """One passage's verdict: z = (green - ratio x scored) / sqrt(scored x ratio x (1 - ratio)).

    Attributes:
        num_tokens_scored: how many tokens were scored (each after its first ``context_width``,
            a leading BOS left out; with ``ignore_repeated_ngrams``, each distinct window once).
        num_green_tokens: how many of them were green.
        green_fraction: num_green_tokens / num_tokens_scored.
        z_score: the z-score above.
        p_value: one-sided: the chance of at least this z without a watermark.
        prediction: True when z_score > the detector call's ``z_threshold``.

    Examples:
        >>> r = WatermarkDetector(vocab_size=4, greenlist_ratio=0.5)([1, 2, 3, 0, 1])
        >>> r.num_tokens_scored, r.num_green_tokens, r.z_score, r.p_value, r.prediction
        (4, 2, 0.0, 0.5, False)
    """

    num_tokens_scored: int
    num_green_tokens: int
    green_fraction: float
    z_score: float
    p_value: float       # one-sided: the chance of at least this z without a watermark
    prediction: bool     # z_score > z_threshold


class WatermarkDetector:
    """Scores token ids for the watermark of ``samplers.Watermark`` made with the same settings.

    Call it on a passage's token ids (``detector(token_ids, z_threshold=3.0)``) to get a
    ``WatermarkResult``; that call raises ValueError for a token id outside the vocabulary, a
    non-number ``z_threshold``, or fewer than ``context_width + 1`` ids after a leading BOS.

    Args:
        vocab_size: the vocabulary size, in [1, 2**24], as the Watermark's.
        greenlist_ratio: the green share, in (0, 1), as the Watermark's; default 0.25.
        hashing_key: the seeding key, an integer in [0, 2**64), as the Watermark's; default 15485863.
        seeding_scheme: "lefthash" (the default) or "selfhash", as the Watermark's.
        context_width: in [1, 1024], as the Watermark's; default 1.
        bos_token_id: a leading token with this id is not scored; default None (every token is).
        ignore_repeated_ngrams: True counts each distinct (context, token) window once, which
            guards against repetitive text; default False.

    Raises:
        ValueError: if a setting is outside its range or ``ignore_repeated_ngrams`` is not a bool.

    Examples:
        >>> d = WatermarkDetector(vocab_size=4, greenlist_ratio=0.5)
        >>> d([1, 2, 3, 0, 1]).num_tokens_scored
        4
        >>> WatermarkDetector(vocab_size=4, bos_token_id=1)([1, 2, 3, 0, 1]).num_tokens_scored
        3
    """

    def __init__(self, vocab_size: int, greenlist_ratio: float = 0.25, hashing_key: int = 15485863,
                 seeding_scheme: str = "lefthash", context_width: int = 1, bos_token_id: Optional[int] = None,
                 ignore_repeated_ngrams: bool = False):
        self.scheme = watermark_scheme(vocab_size, greenlist_ratio, hashing_key, seeding_scheme, context_width)
        self.greenlist_ratio = float(greenlist_ratio)
        self.context_width = context_width
        self.bos_token_id = bos_token_id
        if not isinstance(ignore_repeated_ngrams, bool):
            raise ValueError(f"ignore_repeated_ngrams must be True or False, got {ignore_repeated_ngrams!r}")
        self.ignore_repeated_ngrams = ignore_repeated_ngrams

    def __call__(self, token_ids: Sequence[int], z_threshold: float = 3.0) -> WatermarkResult:
        """Score a passage for the watermark.

        Args:
            token_ids: the passage's token ids, each in [0, vocab_size).
            z_threshold: the z-score above which ``prediction`` is True; default 3.0.

        Returns:
            WatermarkResult: the counts, z-score, p-value and verdict.

        Raises:
            ValueError: if an id is outside the vocabulary, ``z_threshold`` is not a finite number,
                or fewer than ``context_width + 1`` ids remain after a leading BOS.
        """
        ids = [options.integer(f"token_ids[{i}]", t, 0) for i, t in enumerate(token_ids)]
        z_threshold = options.real("z_threshold", z_threshold)
        if ids and self.bos_token_id is not None and ids[0] == self.bos_token_id:
            ids = ids[1:]
        if len(ids) - self.context_width < 1:
            raise ValueError(f"need at least {self.context_width + 1} tokens to score (context_width="
                             f"{self.context_width}, plus one), got {len(ids)}")
        scored, green = self.scheme.score(ids, self.ignore_repeated_ngrams)
        r = self.greenlist_ratio
        z = (green - r * scored) / math.sqrt(scored * r * (1 - r))
        return WatermarkResult(num_tokens_scored=scored, num_green_tokens=green, green_fraction=green / scored,
                               z_score=z, p_value=0.5 * math.erfc(z / math.sqrt(2)), prediction=z > z_threshold)
