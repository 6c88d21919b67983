"""decodelab models in lm-evaluation-harness: its three request types on Model.score and
Model.generate, so standard tasks run on a decodelab model (pip install lm_eval).

    import lm_eval
    from decodelab.integrations.lm_eval import DecodelabLM
    lm_eval.simple_evaluate(model=DecodelabLM(model), tasks=["hellaswag"])
    # or by name: lm_eval --model decodelab --model_args pretrained=PATH,dtype=int8 --tasks ...
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


@register_model("decodelab")
class DecodelabLM(LM):
    """lm-eval's model interface on a decodelab Model: ``loglikelihood`` is Model.score (text split
    as lm-eval splits it), ``loglikelihood_rolling`` scores lm-eval's own rolling windows of the
    text after the BOS (or EOS) token, ``generate_until`` is greedy Model.generate with the
    request's stop strings and ``max_gen_toks``. Pass a loaded ``model``, or ``pretrained`` (a
    path for decodelab.load) and ``dtype``."""

    def __init__(self, model=None, pretrained=None, dtype=None, max_gen_toks: int = 256, **load_kwargs):
        super().__init__()
        if (model is None) == (pretrained is None):
            raise ValueError("give either model (a loaded decodelab.Model) or pretrained (a path), not both")
        self.model = model if model is not None else decodelab.load(pretrained, dtype=dtype, **load_kwargs)
        if self.model.tokenizer is None:
            raise ValueError("lm-eval tasks are text: the model needs a tokenizer")
        self.max_gen_toks = int(max_gen_toks)

    def _prefix(self) -> int:
        tok = self.model.tokenizer
        first = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
        if first is None:
            raise ValueError("rolling log-likelihoods start from a BOS or EOS token; this tokenizer has neither")
        return first

    def loglikelihood(self, requests) -> List[Tuple[float, bool]]:
        out = []
        for s in self.model.score_batch([tuple(r.args) for r in requests]):
            out.append((s.total, s.is_greedy))
        return out

    def loglikelihood_rolling(self, requests) -> List[float]:
        m = self.model
        ctx = m.config.max_position_embeddings
        out = []
        for r in requests:
            (text,) = r.args
            ids = m.tokenizer.encode(text, add_special_tokens=False)
            total = 0.0
            for context, target in map(make_disjoint_window, get_rolling_token_windows(
                    token_list=ids, prefix_token=self._prefix(), max_seq_len=ctx, context_len=1)):
                total += scoring.score_ids(m, list(context), list(target)).total
            out.append(total)
        return out

    def generate_until(self, requests) -> List[str]:
        out = []
        for r in requests:
            context, kw = r.args
            kw = dict(kw or {})
            until = kw.pop("until", None)
            until = [until] if isinstance(until, str) else list(until or [])
            max_new = int(kw.pop("max_gen_toks", self.max_gen_toks))
            temperature = float(kw.pop("temperature", 0.0)) if kw.pop("do_sample", False) else 0.0
            g = self.model.generate(context, max_new_tokens=max_new, temperature=temperature, stop=until or None,
                                    seed=0)
            out.append(g.text)
        return out
