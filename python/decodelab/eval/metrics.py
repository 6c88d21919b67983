"""The measures a decoding study reports across samples: diversity (distinct-n, self-BLEU),
degeneration (repetition), confidence (mean entropy, mean chosen-token probability) and length,
and ``compare()``, which runs strategies side by side into a pandas DataFrame.

Texts are lists of str (split on whitespace) or of token-id lists (taken as they are). The
measures of confidence read the traces of generations made with ``trace=True``.

Examples:
    >>> distinct_n(["the cat sat", "the cat ran"], 2)   # {the cat, cat sat, cat ran} / 4 bigrams
    0.75
"""
from __future__ import annotations

import math
import statistics
from typing import Dict, Iterable, List, Optional, Sequence, Union

__all__ = ["distinct_n", "repetition_rate", "self_bleu", "mean_entropy", "mean_token_probability", "length_stats",
           "compare", "plot_compare"]

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
    """Distinct n-grams, a diversity measure: higher means more varied text.

    Args:
        texts: the texts, a list of str (split on whitespace) or of token-id lists (taken as they
            are).
        n: the n-gram length, an integer >= 1; default 2.
        mode: "corpus" (the default), distinct n-grams across all texts over all their n-grams;
            "li2016", distinct n-grams over the number of tokens (Li et al. 2016); "per_text",
            each text's distinct over its own n-grams, averaged over the texts that have any.

    Returns:
        The share in [0, 1]; 0.0 when there are no n-grams.

    Raises:
        ValueError: ``texts`` is a single str or not a list, a text is bytes, ``n`` is not an
            integer >= 1, or ``mode`` is not one of the three.

    Examples:
        >>> distinct_n(["a a a a"], 1), distinct_n(["a b", "a c"], 1, mode="li2016")
        (0.25, 0.75)
        >>> distinct_n([[1, 2, 1, 2]], 2)             # token ids: (1, 2) (2, 1) (1, 2)
        0.6666666666666666
        >>> distinct_n(["a b"], 2, mode="bigram")
        Traceback (most recent call last):
        ...
        ValueError: mode must be one of corpus, li2016, per_text, got 'bigram'
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
    """rep-n (Welleck et al. 2019), a degeneration measure: the share of n-grams that repeat.

    Within each text, the share of its n-grams that repeat an earlier one, 1 - distinct / all,
    averaged over the texts that have n-grams.

    Args:
        texts: the texts, a list of str (split on whitespace) or of token-id lists.
        n: the n-gram length, an integer >= 1; default 2.

    Returns:
        The rate in [0, 1); 0.0 when no text has an n-gram.

    Raises:
        ValueError: ``texts`` is a single str or not a list, a text is bytes, or ``n`` is not an
            integer >= 1.

    Examples:
        >>> repetition_rate(["a b a b a b"], 2)   # ab ba ab ba ab: 2 distinct of 5
        0.6
        >>> repetition_rate(["a a a", "a b c"], 2)   # (1 - 1/2 + 0) / 2
        0.25
    """
    per = [1 - len(set(g)) / len(g) for g in (_ngrams(t, n) for t in _check(texts, n)) if g]
    return sum(per) / len(per) if per else 0.0


def self_bleu(texts: Texts, n: int = 4) -> float:
    """Self-BLEU (Zhu et al. 2018, Texygen): how much the samples resemble each other.

    Each text's BLEU-n against all the others as references, averaged; higher means the samples
    resemble each other. NLTK's sentence BLEU with uniform weights and smoothing method 1, as
    Texygen computes it. Needs nltk (the ``metrics`` extra), whose first import takes seconds.

    Args:
        texts: at least two texts, a list of str (split on whitespace) or of token-id lists.
        n: the largest n-gram order of BLEU, an integer >= 1; default 4.

    Returns:
        The mean BLEU-n in [0, 1].

    Raises:
        ValueError: ``texts`` is a single str or not a list, a text is bytes, ``n`` is not an
            integer >= 1, or there are fewer than two texts.
        ImportError: nltk is not installed.

    Examples:
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


def _entropy(step) -> float:
    """The entropy of the distribution a traced step's token was drawn from (before the selector)."""
    return step.stages[-2 if len(step.stages) > 1 else 0].entropy


def generation_record(g) -> dict:
    """What compare() reads of one generation made with ``trace=True``, as plain lists: its token
    ids, decode seconds, and per step the processed distribution's entropy and the chosen token's
    probability under the raw one (what a Ray replica sends back for ``RayBackend``).

    Args:
        g: a Generation made with ``trace=True``.

    Returns:
        A dict with token_ids, decode_seconds, entropies and token_probs.

    Raises:
        ValueError: the generation has no trace.

    Examples:
        >>> import decodelab
        >>> g = decodelab.load("stories260K").generate("Once", max_new_tokens=4, trace=True, eos_token_id=[])
        >>> r = generation_record(g)
        >>> len(r["token_ids"]), len(r["entropies"]), r["entropies"][0] == mean_entropy([g]) or len(g.token_ids) > 1
        (4, 4, True)
    """
    trace = _traced([g])[0].trace
    return {"token_ids": list(g.token_ids), "decode_seconds": float(g.decode_seconds),
            "entropies": [_entropy(s) for s in trace], "token_probs": [math.exp(s.logprob_raw) for s in trace]}


def mean_entropy(generations, distribution: str = "processed") -> float:
    """Mean entropy (nats) per generated token, a confidence measure: lower is more certain.

    Over all steps of all generations, the entropy of the distribution each token was drawn from
    ("processed": after every sampler stage before the selector) or of the model's own ("raw").

    Args:
        generations: generations made with ``trace=True`` (Model.generate's results).
        distribution: "processed" (the default) or "raw".

    Returns:
        The mean entropy in nats, >= 0; NaN when the generations have no steps.

    Raises:
        ValueError: ``distribution`` is neither, or a generation has no trace.

    Examples:
        >>> import decodelab
        >>> model = decodelab.load("stories260K")
        >>> gens = [model.generate("Once upon a time", max_new_tokens=8, temperature=1.0, top_k=1, trace=True)]
        >>> mean_entropy(gens)                       # top-k 1 leaves one token: no uncertainty
        0.0
        >>> bool(mean_entropy(gens, "raw") > 0)
        True
    """
    if distribution not in ("processed", "raw"):
        raise ValueError(f"distribution must be 'processed' or 'raw', got {distribution!r}")
    values = [s.stages[0].entropy if distribution == "raw" else _entropy(s)
              for g in _traced(generations) for s in g.trace]
    return sum(values) / len(values) if values else float("nan")


def mean_token_probability(generations, distribution: str = "raw") -> float:
    """Mean probability of the chosen tokens, a confidence measure, from traces.

    Args:
        generations: generations made with ``trace=True`` (Model.generate's results).
        distribution: "raw" (the default), the model's own distribution, or "processed", the one
            each token was drawn from.

    Returns:
        The mean probability in [0, 1]; NaN when the generations have no steps.

    Raises:
        ValueError: ``distribution`` is neither, or a generation has no trace.

    Examples:
        >>> import decodelab
        >>> model = decodelab.load("stories260K")
        >>> gens = [model.generate("Once upon a time", max_new_tokens=8, temperature=1.0, top_k=1, trace=True)]
        >>> mean_token_probability(gens, "processed")
        1.0
        >>> 0 < mean_token_probability(gens) <= 1
        True
        >>> mean_token_probability([model.generate("Once upon a time", max_new_tokens=2)])
        Traceback (most recent call last):
        ...
        ValueError: these measures read traces: generate(..., trace=True)
    """
    if distribution not in ("processed", "raw"):
        raise ValueError(f"distribution must be 'processed' or 'raw', got {distribution!r}")
    values = [math.exp(s.logprob_raw if distribution == "raw" else s.logprob_processed)
              for g in _traced(generations) for s in g.trace]
    return sum(values) / len(values) if values else float("nan")


def length_stats(texts: Texts) -> Dict[str, float]:
    """Mean, median, standard deviation, minimum and maximum length in tokens.

    Args:
        texts: at least one text, a list of str (whitespace tokens) or of token-id lists.

    Returns:
        A dict with float values under "mean", "median", "std" (the population standard
        deviation), "min" and "max".

    Raises:
        ValueError: there is no text, ``texts`` is a single str or not a list, or a text is bytes.

    Examples:
        >>> length_stats(["a b", "a b c d"])["mean"]
        3.0
        >>> length_stats([[5, 6, 7], [8]])
        {'mean': 2.0, 'median': 2.0, 'std': 1.0, 'min': 1.0, 'max': 3.0}
    """
    lens = [len(t) for t in _check(texts, 1)]
    if not lens:
        raise ValueError("length_stats needs at least one text")
    return {"mean": statistics.fmean(lens), "median": float(statistics.median(lens)),
            "std": statistics.pstdev(lens), "min": float(min(lens)), "max": float(max(lens))}


def compare(model, prompts: Sequence, strategies: Dict[str, dict], *, n: int = 8, max_new_tokens: int = 64,
            seed: int = 0, progress: bool = True, bleu: Optional[bool] = None, backend=None):
    """Runs decoding strategies side by side and tabulates the measures of this module.

    Each strategy runs on every prompt n times, with seeds seed .. seed + n - 1 and
    ``trace=True``. The same seeds give the same table (but for the speed column).

    Args:
        model: the decodelab Model to generate with.
        prompts: a non-empty list of prompts (text or token ids), not a single str.
        strategies: a non-empty dict, strategy name -> dict of Model.generate keywords.
        n: generations per prompt and strategy, an integer >= 1; default 8.
        max_new_tokens: the most tokens each generation adds; default 64.
        seed: the first seed; default 0.
        progress: show a tqdm bar counting the generations; default True.
        bleu: add a self_bleu column, the mean over prompts of the self-BLEU of each prompt's
            samples (needs nltk and n >= 2); None (the default) adds it where nltk is installed
            and n > 1.
        backend: None (the default): generate in this process; or an object whose
            ``records(model, prompts, strategies, n=, max_new_tokens=, seed=)`` returns each
            generation's ``generation_record`` as ``records[strategy][prompt_index][seed_index]``,
            such as ``decodelab.integrations.ray.RayBackend(replicas=4)``, which runs them on a Ray
            cluster. The table is the same from any backend but for tokens_per_second.

    Returns:
        A pandas DataFrame indexed by strategy name, with the columns distinct_1, distinct_2 and
        rep_2 (over the generated token ids), mean_entropy (of the processed distributions),
        mean_token_prob (under the raw ones), mean_length (tokens), tokens_per_second (decode
        speed) and, with ``bleu``, self_bleu.

    Raises:
        ValueError: ``prompts`` is empty or a single str, ``strategies`` is not a non-empty dict
            of dicts, ``n`` is not an integer >= 1, or ``backend`` has no ``records`` method;
            generate's own errors pass through (a backend's as it raises them).
        ImportError: pandas or tqdm is not installed, or nltk with ``bleu=True``.

    Examples:
        >>> import decodelab
        >>> model = decodelab.load("stories260K")
        >>> table = compare(model, ["Once upon a time"], {"greedy": {}, "top_p": {"temperature": 1.0, "top_p": 0.9}},
        ...                 n=2, max_new_tokens=8, progress=False, bleu=False)
        >>> table.index.tolist()
        ['greedy', 'top_p']
        >>> table.columns.tolist()
        ['distinct_1', 'distinct_2', 'rep_2', 'mean_entropy', 'mean_token_prob', 'mean_length', 'tokens_per_second']
        >>> table.shape
        (2, 7)
    """
    import pandas as pd
    from tqdm.auto import tqdm

    if isinstance(prompts, (str, bytes)) or not prompts:
        raise ValueError("prompts must be a non-empty list of prompts")
    if not isinstance(strategies, dict) or not strategies:
        raise ValueError("strategies must be a non-empty dict of name -> generate() keywords")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    if backend is not None and not callable(getattr(backend, "records", None)):
        raise ValueError(f"backend must be None or have a records() method, got {type(backend).__name__}")
    for name, kw in strategies.items():
        if not isinstance(kw, dict):
            raise ValueError(f"strategy {name!r} must be a dict of generate() keywords, got {kw!r:.60}")
    if bleu is None:
        try:
            import nltk  # noqa: F401
            bleu = n > 1
        except ImportError:
            bleu = False
    # records[name][prompt index][i]: generation_record of that strategy's i-th seed on that prompt.
    if backend is not None:
        records = backend.records(model, prompts, strategies, n=n, max_new_tokens=max_new_tokens, seed=seed)
    else:
        records = {}
        bar = tqdm(total=len(strategies) * len(prompts) * n, disable=not progress, desc="compare")
        for name, kw in strategies.items():
            records[name] = []
            for p in prompts:
                mine = []
                for i in range(n):
                    g = model.generate(p, max_new_tokens=max_new_tokens, seed=seed + i, trace=True, **dict(kw))
                    mine.append(generation_record(g))
                    bar.update(1)
                records[name].append(mine)
        bar.close()
    rows = []
    for name in strategies:
        recs = [r for mine in records[name] for r in mine]
        ids = [r["token_ids"] for r in recs]
        tokens = sum(len(x) for x in ids)
        seconds = sum(r["decode_seconds"] for r in recs)
        entropies = [e for r in recs for e in r["entropies"]]
        probs = [q for r in recs for q in r["token_probs"]]
        row = {"strategy": name, "distinct_1": distinct_n(ids, 1), "distinct_2": distinct_n(ids, 2),
               "rep_2": repetition_rate(ids, 2),
               "mean_entropy": sum(entropies) / len(entropies) if entropies else float("nan"),
               "mean_token_prob": sum(probs) / len(probs) if probs else float("nan"),
               "mean_length": length_stats(ids)["mean"],
               "tokens_per_second": tokens / seconds if seconds > 0 else float("nan")}
        if bleu:
            row["self_bleu"] = statistics.fmean(self_bleu([r["token_ids"] for r in mine]) for mine in records[name])
        rows.append(row)
    return pd.DataFrame(rows).set_index("strategy")


def plot_compare(table, columns: Sequence[str] = ("distinct_2", "rep_2", "mean_entropy", "mean_token_prob")):
    """A bar chart per measure of compare()'s table, strategies side by side.

    Args:
        table: a DataFrame indexed by strategy, such as compare() returns.
        columns: the measures to plot, those of them the table has; default distinct_2, rep_2,
            mean_entropy and mean_token_prob.

    Returns:
        The matplotlib Figure, one subplot per measure plotted.

    Raises:
        ValueError: none of ``columns`` is a column of the table.
        ImportError: matplotlib is not installed.

    Examples:
        >>> import pandas as pd
        >>> table = pd.DataFrame({"distinct_2": [0.41, 0.87], "rep_2": [0.35, 0.04]}, index=["greedy", "top_p"])
        >>> fig = plot_compare(table)
        >>> [ax.get_title() for ax in fig.axes]
        ['distinct_2', 'rep_2']
    """
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
