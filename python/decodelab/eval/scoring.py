"""Teacher-forced scores: the log-likelihood a model gives a continuation of a prompt (as
lm-evaluation-harness's ``loglikelihood`` reports it), raw or under a sampler chain's processed
distribution, and the perplexity of a text with a sliding window for texts past the context."""
from __future__ import annotations

import dataclasses
import math
from typing import List, Optional, Sequence, Tuple, Union

import numpy as np

Text = Union[str, Sequence[int]]


@dataclasses.dataclass
class Score:
    """The continuation's log-likelihood given the prompt: ``total`` (the summed natural-log
    probability), each token's ``token_logprobs``, ``is_greedy`` (every token was the most likely
    one), the continuation's ``token_ids`` and how many prompt tokens preceded them."""

    total: float
    token_logprobs: List[float]
    token_ids: List[int]
    is_greedy: bool
    n_prompt_tokens: int

    @property
    def perplexity(self) -> float:
        """exp(-total / tokens): the continuation's own perplexity."""
        return math.exp(-self.total / len(self.token_ids))


def split_pair(tokenizer, prompt: Text, continuation: Text, vocab_size: int) -> Tuple[List[int], List[int]]:
    """(prompt ids, continuation ids) as lm-evaluation-harness forms them: trailing whitespace of
    the prompt moves to the continuation, and the continuation's tokens are those of prompt +
    continuation past the prompt's own (so a token that spans the boundary counts as the
    continuation's). Token id lists are taken as they are."""
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
    """Natural-log probabilities in float64 (-inf for removed tokens)."""
    x = np.asarray(logits, dtype=np.float64)
    x = np.where(np.isnan(x), -np.inf, x)
    m = np.max(x, axis=-1, keepdims=True)
    z = x - m
    return z - np.log(np.sum(np.exp(z), axis=-1, keepdims=True))


def score_ids(model, ctx: List[int], cont: List[int], chain=None) -> Score:
    """One forward pass over ctx + cont; each continuation token's log-probability from the
    logits before it (after ``chain``'s stages, a samplers.Chain without its selector, if given)."""
    ids = ctx + cont
    if len(ids) > model.config.max_position_embeddings:
        raise ValueError(f"prompt + continuation have {len(ids)} tokens, more than the context window of "
                         f"{model.config.max_position_embeddings}")
    logits = model.forward(ids)[len(ctx) - 1:len(ids) - 1]
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
    """exp(mean negative log-likelihood) of every token after the first, each predicted from at
    most `window` tokens before it: windows of `window` tokens advanced by `stride`, each scoring
    only the tokens no earlier window scored (Hugging Face's sliding-window perplexity)."""
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
