"""Teacher-forced scores: the log-likelihood a model gives a continuation of a prompt (as
lm-evaluation-harness's ``loglikelihood`` reports it), raw or under a sampler chain's processed
distribution, and the perplexity of a text with a sliding window for texts past the context.

Model.score, Model.score_batch and Model.perplexity are the usual way in; the functions here are
the steps they take (split_pair, score_ids, perplexity), for token-level work and the lm-eval
integration.

Examples:
    >>> model = decodelab.load("stories260K")
    >>> s = model.score("Once upon a time", " there was")
    >>> s.n_prompt_tokens, len(s.token_ids), bool(s.total < 0)
    (5, 2, True)
"""
from __future__ import annotations

import dataclasses
import math
from typing import List, Optional, Sequence, Tuple, Union

import numpy as np

__all__ = ["Score", "split_pair", "log_softmax", "score_ids", "perplexity"]

Text = Union[str, Sequence[int]]


@dataclasses.dataclass
class Score:
    """The continuation's log-likelihood given the prompt, as lm-evaluation-harness reports it.

    Attributes:
        total: the summed natural-log probability of the continuation's tokens, <= 0 (-inf where
            a sampler chain removed one of them).
        token_logprobs: each continuation token's natural-log probability, in order.
        token_ids: the continuation's token ids.
        is_greedy: whether every continuation token was the most likely one at its position.
        n_prompt_tokens: how many prompt tokens preceded the continuation.

    Examples:
        >>> model = decodelab.load("stories260K")
        >>> s = model.score("Once upon a time", " there was")
        >>> s.token_ids, s.n_prompt_tokens
        ([383, 286], 5)
        >>> bool(np.isclose(s.total, sum(s.token_logprobs))), bool(s.perplexity >= 1)
        (True, True)
    """

    total: float
    token_logprobs: List[float]
    token_ids: List[int]
    is_greedy: bool
    n_prompt_tokens: int

    @property
    def perplexity(self) -> float:
        """exp(-total / tokens): the continuation's own perplexity, >= 1 (inf where total is -inf)."""
        return math.exp(-self.total / len(self.token_ids))


def split_pair(tokenizer, prompt: Text, continuation: Text, vocab_size: int) -> Tuple[List[int], List[int]]:
    """(prompt ids, continuation ids) as lm-evaluation-harness forms them.

    For text, trailing whitespace of the prompt moves to the continuation, and the continuation's
    tokens are those of prompt + continuation past the prompt's own (so a token that spans the
    boundary counts as the continuation's). An empty prompt (no tokens, not even BOS) becomes the
    BOS token, or EOS where there is no BOS, as lm-eval's prefix token. Token id lists are taken
    as they are, after a range check.

    Args:
        tokenizer: the model's tokenizer (Model.tokenizer); may be None when both are token ids.
        prompt: the prompt, text or a sequence of token ids.
        continuation: the continuation to score, of the same kind as ``prompt``.
        vocab_size: the model's vocabulary size; token ids must be in [0, vocab_size).

    Returns:
        ``(prompt ids, continuation ids)``, two non-empty lists of ints.

    Raises:
        ValueError: one of prompt and continuation is text and the other token ids, text comes
            without a tokenizer, a token id is not an int in [0, vocab_size), an empty prompt has
            neither BOS nor EOS to start from, or either side is empty.

    Examples:
        >>> model = decodelab.load("stories260K")
        >>> split_pair(model.tokenizer, "Once upon a time ", "there was", 512)   # the space moves over
        ([1, 403, 407, 261, 378], [383, 286])
        >>> split_pair(None, [1, 403], [407], 512)
        ([1, 403], [407])
        >>> split_pair(None, [1, 403], "upon", 512)
        Traceback (most recent call last):
        ...
        ValueError: prompt and continuation must both be text or both be token ids
    """
    from .. import options

    if isinstance(prompt, str) != isinstance(continuation, str):
        raise ValueError("prompt and continuation must both be text or both be token ids")
    if not isinstance(prompt, str):
        ctx = options.token_ids("prompt", prompt, vocab_size)
        cont = options.token_ids("continuation", continuation, vocab_size)
    else:
        if tokenizer is None:
            raise ValueError("this model has no tokenizer; pass token ids")
        if not continuation:
            raise ValueError("the continuation is empty: there is nothing to score")
        n = len(prompt) - len(prompt.rstrip())
        if n:
            prompt, continuation = prompt[:-n], prompt[-n:] + continuation
        ctx = tokenizer.encode(prompt)
        if not ctx:  # no prompt tokens (no BOS either): the continuation follows EOS, as lm-eval's prefix token
            first = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
            if first is None:
                raise ValueError("an empty prompt needs a BOS or EOS token to start from")
            ctx, cont = [first], tokenizer.encode(continuation)
        else:
            cont = tokenizer.encode(prompt + continuation)[len(ctx):]  # lm-eval: the prompt's own tokens first
    if not ctx:
        raise ValueError("the prompt is empty: at least one token must precede the continuation")
    if not cont:
        raise ValueError("the continuation is empty: there is nothing to score")
    return list(ctx), list(cont)


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Natural-log probabilities in float64 (-inf for removed tokens).

    Args:
        logits: scores along the last axis, any shape; -inf marks a removed token and NaN counts
            as -inf.

    Returns:
        A float64 array of the same shape: ``logits - logsumexp(logits)`` along the last axis.

    Examples:
        >>> log_softmax(np.array([0.0, 0.0, -np.inf]))
        array([-0.69314718, -0.69314718,        -inf])
        >>> log_softmax(np.zeros((2, 4), np.float32)).dtype
        dtype('float64')
    """
    x = np.asarray(logits, dtype=np.float64)
    x = np.where(np.isnan(x), -np.inf, x)
    m = np.max(x, axis=-1, keepdims=True)
    z = x - m
    return z - np.log(np.sum(np.exp(z), axis=-1, keepdims=True))


def score_ids(model, ctx: List[int], cont: List[int], chain=None) -> Score:
    """A continuation's Score from one forward pass over prompt + continuation.

    Each continuation token's log-probability comes from the logits before it, after ``chain``'s
    stages when one is given (a token a stage removes scores -inf).

    Args:
        model: the decodelab Model.
        ctx: the prompt's token ids, at least one.
        cont: the continuation's token ids, at least one. The model reads ctx + cont but its last
            token (that one is only predicted), which must fit the model's context window.
        chain: a samplers.Chain without its selector whose stages process each position's
            logits first, or None (the default) to score under the model's own distribution.

    Returns:
        The Score of ``cont`` after ``ctx``.

    Raises:
        ValueError: ctx + cont, but its last token, is longer than the model's context window.

    Examples:
        >>> from decodelab import samplers
        >>> model = decodelab.load("stories260K")
        >>> ctx = model.tokenizer.encode("Once upon a time")
        >>> top = int(np.argmax(model.forward(ctx)[-1]))                  # the most likely next token
        >>> s = score_ids(model, ctx, [top])
        >>> s.is_greedy, s.n_prompt_tokens
        (True, 5)
        >>> score_ids(model, ctx, [top], samplers.Chain([samplers.TopK(1)])).total   # the only token left
        0.0
    """
    ids = ctx + cont
    # The last token is only predicted: a window of W tokens scores W + 1 (as lm-eval's rolling
    # windows and Hugging Face's scoring count them).
    if len(ids) - 1 > model.config.max_position_embeddings:
        raise ValueError(f"prompt + continuation have {len(ids)} tokens, more than the context window of "
                         f"{model.config.max_position_embeddings} plus the last, predicted token")
    logits = model.forward(ids[:-1])[len(ctx) - 1:]
    if chain is not None:
        logits = np.stack([chain.apply(logits[i], ids[:len(ctx) + i], n_prompt=len(ctx), step=i)
                           for i in range(len(cont))])
    lp = log_softmax(logits)
    rows = np.arange(len(cont))
    token_lp = lp[rows, cont]
    greedy = bool(np.all(np.argmax(lp, axis=-1) == np.asarray(cont)))
    return Score(total=float(token_lp.sum()), token_logprobs=[float(v) for v in token_lp], token_ids=list(cont),
                 is_greedy=greedy, n_prompt_tokens=len(ctx))


def perplexity(model, ids: List[int], window: Optional[int], stride: Optional[int]) -> float:
    """exp(mean negative log-likelihood) of every token after the first.

    Each token is predicted from at most ``window`` tokens before it: windows of ``window`` tokens
    advanced by ``stride``, each scoring only the tokens no earlier window scored (Hugging Face's
    sliding-window perplexity). A text that fits one window is one forward pass.

    Args:
        model: the decodelab Model.
        ids: the text's token ids, at least two.
        window: tokens per forward pass, in [2, context window]; None for the model's context
            window (max_position_embeddings).
        stride: tokens each window advances, in [1, window]; None for ``window`` (windows that do
            not overlap).

    Returns:
        The perplexity, a float >= 1.

    Raises:
        ValueError: fewer than two tokens, or ``window`` or ``stride`` not an integer in its range.

    Examples:
        >>> model = decodelab.load("stories260K")
        >>> ids = model.tokenizer.encode("Once upon a time there was a little girl named Lily.")
        >>> len(ids), bool(perplexity(model, ids, None, None) >= 1)
        (15, True)
        >>> perplexity(model, ids, None, None) == model.perplexity(ids)
        True
        >>> perplexity(model, ids[:1], None, None)
        Traceback (most recent call last):
        ...
        ValueError: perplexity needs at least two tokens
    """
    from .. import options

    ctx_max = model.config.max_position_embeddings
    window = ctx_max if window is None else options.integer("window", window, 2, ctx_max)
    stride = window if stride is None else options.integer("stride", stride, 1, window)
    if len(ids) < 2:
        raise ValueError("perplexity needs at least two tokens")
    nll, count, prev_end = 0.0, 0, 0
    for begin in range(0, len(ids), stride):
        end = min(begin + window, len(ids))
        chunk = ids[begin:end]
        lp = log_softmax(model.forward(chunk)[:-1])
        targets = np.asarray(chunk[1:])
        first = max(prev_end, begin + 1) - begin - 1  # predictions of tokens not scored before
        rows = np.arange(first, len(chunk) - 1)
        nll -= float(lp[rows, targets[rows]].sum())
        count += len(rows)
        prev_end = end
        if end == len(ids):
            break
    return math.exp(nll / count)
