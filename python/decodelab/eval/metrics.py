"""The measures a decoding study reports across samples: diversity (distinct-n, self-BLEU),
degeneration (repetition), confidence (mean entropy, mean chosen-token probability) and length,
and ``compare()``, which runs strategies side by side into a pandas DataFrame.

    >>> distinct_n(["the cat sat", "the cat ran"], 2)   # {the cat, cat sat, cat ran} / 4 bigrams
    0.75
"""
from __future__ import annotations

import math
import statistics
from typing import Dict, Iterable, List, Optional, Sequence, Union

Texts = Sequence[Union[str, Sequence[int]]]
_MODES = ("corpus", "li2016", "per_text")


def _tokens(t) -> list:
    """Whitespace tokens of a str, or a token-id sequence as it is."""
    if isinstance(t, str):
        return t.split()
    if isinstance(t, (bytes, bytearray)):
        raise ValueError("texts must be str or token-id lists, got bytes")
    return list(t)


def _ngrams(toks: list, n: int) -> list:
    return [tuple(toks[i:i + n]) for i in range(len(toks) - n + 1)]


def _check(texts, n: int) -> List[list]:
    if isinstance(texts, (str, bytes)) or not isinstance(texts, Iterable):
        raise ValueError(f"texts must be a list of str or of token-id lists, got {type(texts).__name__}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    return [_tokens(t) for t in texts]


def distinct_n(texts: Texts, n: int = 2, mode: str = "corpus") -> float:
    """Distinct n-grams: "corpus" (the default), distinct n-grams across all texts over all their
    n-grams; "li2016", distinct n-grams over the number of tokens (Li et al. 2016); "per_text",
    each text's distinct over its own n-grams, averaged. Texts are split on whitespace; token-id
    lists are taken as they are. 0.0 when there are no n-grams.

    >>> distinct_n(["a a a a"], 1), distinct_n(["a b", "a c"], 1, mode="li2016")
    (0.25, 0.75)
    """
    toks = _check(texts, n)
    if mode not in _MODES:
        raise ValueError(f"mode must be one of {', '.join(_MODES)}, got {mode!r}")
    grams = [_ngrams(t, n) for t in toks]
    if mode == "per_text":
        per = [len(set(g)) / len(g) for g in grams if g]
        return sum(per) / len(per) if per else 0.0
    every = [x for g in grams for x in g]
    if mode == "li2016":
        total = sum(len(t) for t in toks)
        return len(set(every)) / total if total else 0.0
    return len(set(every)) / len(every) if every else 0.0


def repetition_rate(texts: Texts, n: int = 2) -> float:
    """rep-n (Welleck et al. 2019): within each text, the share of its n-grams that repeat an
    earlier one, 1 - distinct / all, averaged over the texts that have n-grams.

    >>> repetition_rate(["a b a b a b"], 2)   # ab ba ab ba ab: 2 distinct of 5
    0.6
    """
    per = [1 - len(set(g)) / len(g) for g in (_ngrams(t, n) for t in _check(texts, n)) if g]
    return sum(per) / len(per) if per else 0.0


def self_bleu(texts: Texts, n: int = 4) -> float:
    """Self-BLEU (Zhu et al. 2018, Texygen): each text's BLEU-n against all the others as
    references, averaged; higher means the samples resemble each other. NLTK's sentence BLEU
    with uniform weights and smoothing method 1, as Texygen computes it. Needs nltk.

    >>> round(self_bleu(["the cat sat on the mat", "the cat sat on the mat"]), 3)
    1.0
    """
    toks = _check(texts, n)
    if len(toks) < 2:
        raise ValueError(f"self-BLEU needs at least two texts, got {len(toks)}")
    try:
        from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu
    except ImportError:
        raise ImportError("self_bleu needs nltk: pip install nltk (or decodelab[metrics])") from None
    smooth = SmoothingFunction().method1
    weights = tuple([1.0 / n] * n)
    scores = [sentence_bleu(toks[:i] + toks[i + 1:], hyp, weights=weights, smoothing_function=smooth)
              for i, hyp in enumerate(toks)]
    return sum(scores) / len(scores)


def _traced(generations) -> list:
    gens = list(generations)
    for g in gens:
        if getattr(g, "trace", None) is None:
            raise ValueError("these measures read traces: generate(..., trace=True)")
    return gens


def mean_entropy(generations, distribution: str = "processed") -> float:
    """Mean entropy (nats) per generated token of the distribution each token was drawn from
    ("processed": after every sampler stage before the selector) or of the model's own ("raw"),
    over all steps of all generations (each made with ``trace=True``).

    >>> gens = [model.generate("Once upon a time", temperature=1.0, top_p=0.9, seed=s, trace=True)
    ...         for s in range(4)]                                 # doctest: +SKIP
    >>> mean_entropy(gens), mean_entropy(gens, "raw")              # doctest: +SKIP
    (1.21..., 1.87...)
    """
    if distribution not in ("processed", "raw"):
        raise ValueError(f"distribution must be 'processed' or 'raw', got {distribution!r}")
    values = [(s.stages[0] if distribution == "raw" else s.stages[-2 if len(s.stages) > 1 else 0]).entropy
              for g in _traced(generations) for s in g.trace]
    return sum(values) / len(values) if values else float("nan")


def mean_token_probability(generations, distribution: str = "raw") -> float:
    """Mean probability of the chosen tokens under the model's distribution ("raw") or the one
    they were drawn from ("processed"), from traces.

    >>> mean_token_probability([model.generate("Once upon a time", trace=True)])   # doctest: +SKIP
    0.62...
    """
    if distribution not in ("processed", "raw"):
        raise ValueError(f"distribution must be 'processed' or 'raw', got {distribution!r}")
    values = [math.exp(s.logprob_raw if distribution == "raw" else s.logprob_processed)
              for g in _traced(generations) for s in g.trace]
    return sum(values) / len(values) if values else float("nan")


def length_stats(texts: Texts) -> Dict[str, float]:
    """Mean, median, standard deviation, minimum and maximum length in tokens (whitespace tokens
    of str, or token-id lists).

    >>> length_stats(["a b", "a b c d"])["mean"]
    3.0
    """
    lens = [len(t) for t in _check(texts, 1)]
    if not lens:
        raise ValueError("length_stats needs at least one text")
    return {"mean": statistics.fmean(lens), "median": float(statistics.median(lens)),
            "std": statistics.pstdev(lens), "min": float(min(lens)), "max": float(max(lens))}


def compare(model, prompts: Sequence, strategies: Dict[str, dict], *, n: int = 8, max_new_tokens: int = 64,
            seed: int = 0, progress: bool = True, bleu: Optional[bool] = None):
    """Runs each strategy (name -> generate() keywords) on every prompt n times, seeds seed ..
    seed + n - 1, and returns a pandas DataFrame, one row per strategy: distinct-1/2 and rep-2 over
    the generated token ids, self-BLEU over the samples of each prompt (where nltk is installed, or
    ``bleu=True``), mean entropy and chosen-token probability, mean length and decode tokens/s.
    The same seeds give the same table. A tqdm bar counts the generations (``progress``)."""
    import pandas as pd
    from tqdm.auto import tqdm

    if isinstance(prompts, (str, bytes)) or not prompts:
        raise ValueError("prompts must be a non-empty list of prompts")
    if not isinstance(strategies, dict) or not strategies:
        raise ValueError("strategies must be a non-empty dict of name -> generate() keywords")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    if bleu is None:
        try:
            import nltk  # noqa: F401
            bleu = n > 1
        except ImportError:
            bleu = False
    rows = []
    bar = tqdm(total=len(strategies) * len(prompts) * n, disable=not progress, desc="compare")
    for name, kw in strategies.items():
        if not isinstance(kw, dict):
            raise ValueError(f"strategy {name!r} must be a dict of generate() keywords, got {kw!r:.60}")
        gens, per_prompt = [], []
        for p in prompts:
            mine = []
            for i in range(n):
                mine.append(model.generate(p, max_new_tokens=max_new_tokens, seed=seed + i, trace=True,
                                           **dict(kw)))
                bar.update(1)
            gens += mine
            per_prompt.append(mine)
        ids = [g.token_ids for g in gens]
        tokens = sum(len(g.token_ids) for g in gens)
        seconds = sum(g.decode_seconds for g in gens)
        row = {"strategy": name, "distinct_1": distinct_n(ids, 1), "distinct_2": distinct_n(ids, 2),
               "rep_2": repetition_rate(ids, 2), "mean_entropy": mean_entropy(gens),
               "mean_token_prob": mean_token_probability(gens), "mean_length": length_stats(ids)["mean"],
               "tokens_per_second": tokens / seconds if seconds > 0 else float("nan")}
        if bleu:
            row["self_bleu"] = statistics.fmean(self_bleu([g.token_ids for g in mine]) for mine in per_prompt)
        rows.append(row)
    bar.close()
    return pd.DataFrame(rows).set_index("strategy")


def plot_compare(table, columns: Sequence[str] = ("distinct_2", "rep_2", "mean_entropy", "mean_token_prob")):
    """A bar chart per measure of compare()'s table, strategies side by side; returns the figure."""
    import matplotlib.pyplot as plt

    cols = [c for c in columns if c in table.columns]
    if not cols:
        raise ValueError(f"none of {list(columns)} is a column of the table ({list(table.columns)})")
    fig, axes = plt.subplots(1, len(cols), figsize=(3.2 * len(cols), 3), squeeze=False)
    for ax, c in zip(axes[0], cols):
        ax.bar(range(len(table)), table[c].to_numpy(), color=[f"C{i}" for i in range(len(table))])
        ax.set_xticks(range(len(table)))
        ax.set_xticklabels(table.index, rotation=30, ha="right")
        ax.set_title(c)
    fig.tight_layout()
    return fig
