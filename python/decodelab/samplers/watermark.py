"""The green-list watermark (Kirchenbauer et al. 2023): the ``Watermark`` sampler that adds it, and the
``WatermarkDetector`` that finds it by counting the tokens in the green list their predecessor seeds
against the share chance gives, as a z-score (counting and z-score as transformers' detector)."""
from __future__ import annotations

import dataclasses
import math
from typing import Optional, Sequence

import numpy as np

from .. import options
from .._native import _core
from .base import Sampler, _float, _int

__all__ = ["Watermark", "WatermarkDetector", "WatermarkResult", "watermark_scheme"]


class Watermark(Sampler):
    """The green-list watermark (Kirchenbauer et al. 2023): seeded by the preceding token, a fixed
    share of the vocabulary is "green" at each step and gets ``bias`` added; detect it with
    ``WatermarkDetector`` and the same settings. The green lists equal
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


@dataclasses.dataclass(frozen=True)
class WatermarkResult:
    """One passage's verdict: z = (green - ratio x scored) / sqrt(scored x ratio x (1 - ratio))."""

    num_tokens_scored: int
    num_green_tokens: int
    green_fraction: float
    z_score: float
    p_value: float       # one-sided: the chance of at least this z without a watermark
    prediction: bool     # z_score > z_threshold


class WatermarkDetector:
    """Scores token ids for the watermark of ``samplers.Watermark`` made with the same settings.
    ``bos_token_id``: a leading BOS is not scored; ``ignore_repeated_ngrams``: each distinct
    (context, token) window counts once, which guards against repetitive text.

    >>> from decodelab.samplers import Watermark
    >>> d = WatermarkDetector(vocab_size=4, greenlist_ratio=0.5)
    >>> d([1, 2, 3, 0, 1]).num_tokens_scored
    4
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
