"""Detecting the green-list watermark (Kirchenbauer et al. 2023) that samplers.Watermark adds: count
the tokens that fall in the green list their predecessor seeds and compare with the share chance
gives, as a z-score. The counting and the z-score follow transformers' WatermarkDetector."""
from __future__ import annotations

import dataclasses
import math
from typing import Optional, Sequence

from . import options
from .samplers import watermark_scheme


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
