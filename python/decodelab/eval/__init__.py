"""Measuring models and generations: ``scoring`` (teacher-forced log-likelihoods and perplexity,
behind ``Model.score`` and ``Model.perplexity``) and ``metrics`` (diversity, repetition, entropy
and length measures over generations, and ``compare`` for a table of decoding settings)."""
from .metrics import compare, distinct_n, length_stats, mean_entropy, repetition_rate, self_bleu
from .scoring import Score, perplexity

__all__ = ["Score", "perplexity", "compare", "distinct_n", "repetition_rate", "self_bleu", "mean_entropy",
           "length_stats"]
