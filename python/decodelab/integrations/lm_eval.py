"""decodelab models in lm-evaluation-harness: its three request types on Model.score and
Model.generate, so standard tasks run on a decodelab model (pip install lm_eval).

    import lm_eval
    from decodelab.integrations.lm_eval import DecodelabLM
    lm_eval.simple_evaluate(model=DecodelabLM(model), tasks=["hellaswag"])
    # on a Ray cluster: DecodelabLM(model, backend=RayBackend(replicas=8)), from decodelab.integrations.ray
    # or by name: lm_eval --model decodelab --model_args pretrained=PATH,dtype=int8 --tasks ...

Importing this module registers the model under the name "decodelab" in lm-eval's registry;
without lm_eval installed the import raises ImportError.

Examples:
    >>> from decodelab.integrations.lm_eval import DecodelabLM
    >>> DecodelabLM(decodelab.load("stories260K")).max_gen_toks
    256
"""
from __future__ import annotations

from typing import List, Tuple

try:
    from lm_eval.api.model import LM
    from lm_eval.api.registry import register_model
    from lm_eval.utils import get_rolling_token_windows, make_disjoint_window
except ImportError:  # pragma: no cover - the message is the point
    raise ImportError("decodelab.integrations.lm_eval needs lm-evaluation-harness: pip install lm_eval") from None

import decodelab
from decodelab.eval import scoring

__all__ = ["DecodelabLM"]


@register_model("decodelab")
class DecodelabLM(LM):
    """lm-eval's model interface on a decodelab Model.

    ``loglikelihood`` is Model.score (text split as lm-eval splits it), ``loglikelihood_rolling``
    scores lm-eval's own rolling windows of the text after the BOS (or EOS) token,
    ``generate_until`` is greedy Model.generate with the request's stop strings and
    ``max_gen_toks``. Pass a loaded ``model``, or ``pretrained`` (a path for decodelab.load) and
    ``dtype``. With ``backend`` the requests run there instead of in this process, with the same
    results (the Ray cluster's: ``decodelab.integrations.ray.RayBackend``). Registered in lm-eval as
    "decodelab", so ``--model decodelab --model_args pretrained=PATH`` works on its command line.

    Args:
        model: a loaded decodelab Model with a tokenizer; default None (then ``pretrained``).
        pretrained: a path or built-in name for ``decodelab.load``; default None (then ``model``).
        dtype: the weights' dtype for ``decodelab.load`` (e.g. "int8"); default None (load()'s).
        max_gen_toks: the token budget of a generate_until request that gives none, >= 1;
            default 256.
        backend: None (the default): run the requests in this process; or an object whose
            ``run(model, task, rows)`` runs rows of the tasks "score" and "generate" and returns
            the output rows in order, such as ``RayBackend(replicas=4)``; it loads the model from
            its path.
        **load_kwargs: more keywords for ``decodelab.load`` (threads, tokenizer, ...).

    Raises:
        ValueError: both or neither of ``model`` and ``pretrained`` are given, the model has no
            tokenizer, ``max_gen_toks`` is not an integer >= 1, or ``backend`` has no ``run``
            method.

    Examples:
        >>> from lm_eval.api.instance import Instance
        >>> from decodelab.integrations.lm_eval import DecodelabLM
        >>> lm = DecodelabLM(pretrained="stories260K", max_gen_toks=8)
        >>> req = Instance(request_type="loglikelihood", doc={}, arguments=("Once upon a time", " there"), idx=0)
        >>> [(type(total).__name__, type(greedy).__name__) for total, greedy in lm.loglikelihood([req])]
        [('float', 'bool')]
        >>> req = Instance(request_type="generate_until", doc={}, arguments=("Once upon a time", {"until": ["."]}),
        ...                idx=0)
        >>> [type(text).__name__ for text in lm.generate_until([req])]
        ['str']
        >>> DecodelabLM()
        Traceback (most recent call last):
        ...
        ValueError: give either model (a loaded decodelab.Model) or pretrained (a path), not both
    """

    def __init__(self, model=None, pretrained=None, dtype=None, max_gen_toks: int = 256, backend=None,
                 **load_kwargs):
        super().__init__()
        if (model is None) == (pretrained is None):
            raise ValueError("give either model (a loaded decodelab.Model) or pretrained (a path), not both")
        if isinstance(max_gen_toks, bool) or not isinstance(max_gen_toks, int) or max_gen_toks < 1:
            raise ValueError(f"max_gen_toks must be an integer >= 1, got {max_gen_toks!r:.40}")
        if backend is not None and not callable(getattr(backend, "run", None)):
            raise ValueError(f"backend must be None or have a run() method, got {type(backend).__name__}")
        self.backend = backend
        self.model = model if model is not None else decodelab.load(pretrained, dtype=dtype, **load_kwargs)
        if self.model.tokenizer is None:
            raise ValueError("lm-eval tasks are text: the model needs a tokenizer")
        self.max_gen_toks = max_gen_toks

    def _remote(self, task: str, rows: List[dict]) -> List[dict]:
        """The backend's output rows of ``rows``; a row that failed raises as it would here."""
        out = self.backend.run(self.model, task, rows)
        for k, r in enumerate(out):
            if r["error"] is not None:
                raise ValueError(f"request {k} ({task}): {r['error']}")
        return out

    def _prefix(self) -> int:
        tok = self.model.tokenizer
        first = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
        if first is None:
            raise ValueError("rolling log-likelihoods start from a BOS or EOS token; this tokenizer has neither")
        return first

    def loglikelihood(self, requests) -> List[Tuple[float, bool]]:
        """The log-probability of each request's continuation after its context (Model.score_batch).

        Args:
            requests: lm-eval Instances whose ``args`` are (context, continuation) strings.

        Returns:
            One (total log-probability in nats, whether every continuation token is the greedy
            choice) pair per request, in order.
        """
        if self.backend is not None:
            rows = [{"prompt": ctx, "continuation": cont} for ctx, cont in (r.args for r in requests)]
            return [(r["logprob"], r["is_greedy"]) for r in self._remote("score", rows)]
        return [(s.total, s.is_greedy) for s in self.model.score_batch([tuple(r.args) for r in requests])]

    def loglikelihood_rolling(self, requests) -> List[float]:
        """The log-probability of each request's whole text, for perplexity.

        The text's tokens (without special tokens) are scored after the BOS token (the EOS token
        where there is no BOS), in lm-eval's disjoint rolling windows of the model's context length.

        Args:
            requests: lm-eval Instances whose ``args`` are (text,).

        Returns:
            One total log-probability (nats) per request, in order.

        Raises:
            ValueError: the tokenizer has neither a BOS nor an EOS token.
        """
        m = self.model
        ctx = m.config.max_position_embeddings
        windows = []  # (request index, context ids, target ids), every request's in order
        for k, r in enumerate(requests):
            (text,) = r.args
            ids = m.tokenizer.encode(text, add_special_tokens=False)
            for context, target in map(make_disjoint_window, get_rolling_token_windows(
                    token_list=ids, prefix_token=self._prefix(), max_seq_len=ctx, context_len=1)):
                windows.append((k, list(context), list(target)))
        if self.backend is not None:
            rows = [{"prompt": c, "continuation": t} for _, c, t in windows]
            scores = [r["logprob"] for r in self._remote("score", rows)]
        else:
            scores = [scoring.score_ids(m, c, t).total for _, c, t in windows]
        out = [0.0] * len(requests)
        for (k, _, _), s in zip(windows, scores):  # summed in window order, as one loop would
            out[k] += s
        return out

    def generate_until(self, requests) -> List[str]:
        """A continuation of each request's context, ended by its stop strings or its token budget.

        Greedy unless the request's generation keywords say ``do_sample: true`` (then its
        temperature, default 0, with seed 0); ``until`` gives the stop strings (not part of the
        text) and ``max_gen_toks`` the budget (default: the adapter's ``max_gen_toks``). Other
        keywords are ignored.

        Args:
            requests: lm-eval Instances whose ``args`` are (context, generation keywords dict).

        Returns:
            The generated text of each request, in order.
        """
        jobs = []  # (context, generate() keywords) of each request
        for r in requests:
            context, kw = r.args
            kw = dict(kw or {})
            until = kw.pop("until", None)
            until = [until] if isinstance(until, str) else list(until or [])
            max_new = int(kw.pop("max_gen_toks", self.max_gen_toks))
            temperature = float(kw.pop("temperature", 0.0)) if kw.pop("do_sample", False) else 0.0
            jobs.append((context, {"max_new_tokens": max_new, "temperature": temperature,
                                   "stop": until or None, "seed": 0}))
        if self.backend is not None:
            rows = [{"prompt": context, "sampling_params": kw} for context, kw in jobs]
            return [r["generated_text"] for r in self._remote("generate", rows)]
        return [self.model.generate(context, **kw).text for context, kw in jobs]
