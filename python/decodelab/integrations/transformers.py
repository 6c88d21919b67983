"""A decodelab sampler chain as a transformers ``LogitsProcessor``, so the same sampler settings run
inside ``model.generate`` of any Hugging Face model, on any device:

    from transformers import LogitsProcessorList
    from decodelab.integrations.transformers import as_logits_processor
    chain = Chain([RepetitionPenalty(1.3), TopK(20), MinP(0.1)])
    model.generate(ids, do_sample=False, logits_processor=LogitsProcessorList([as_logits_processor(chain)]))

The chain must only process logits: transformers chooses the token (greedy or sampling), so a chain
that ends in a selector (Greedy, Dist, Mirostat) is refused. Each call copies the scores to the
CPU as float32, runs the chain in decodelab's core per row (context: that row's input_ids; the
prompt: the length at the first call of a generate), and returns them in the scores' own dtype and
device.

Examples:
    >>> import torch
    >>> from decodelab.integrations.transformers import as_logits_processor
    >>> from decodelab.samplers import TopK
    >>> as_logits_processor(TopK(2))(torch.tensor([[0, 1]]), torch.tensor([[1.0, 3.0, 2.0, 0.5]]))
    tensor([[-inf, 3., 2., -inf]])
"""
from __future__ import annotations

import numpy as np

from ..samplers import Chain, Sampler

__all__ = ["as_logits_processor"]


def as_logits_processor(chain: Sampler):
    """The transformers LogitsProcessor that applies ``chain`` (a Chain or a single sampler).

    The processor holds its own copies (clones) of the stages, so stateful samplers start fresh
    and ``chain`` itself is not changed. It treats a call whose input is not one token longer than
    the last call's as the start of a new generate(), and takes that length as the prompt's.

    Args:
        chain: a decodelab Chain, or one Sampler, that only processes logits (no selector such as
            Greedy, Dist or Mirostat).

    Returns:
        A ``transformers.LogitsProcessor``: called with (input_ids, scores) of shape (batch, seq)
        and (batch, vocab), it returns the processed scores (removed tokens at -inf), of the
        scores' dtype and on their device. Put it in a ``LogitsProcessorList`` for
        ``model.generate(logits_processor=...)``. Needs torch and transformers.

    Raises:
        ValueError: ``chain`` is not a decodelab Sampler, or it has a stage that selects the token.

    Examples:
        >>> import torch
        >>> from decodelab.integrations.transformers import as_logits_processor
        >>> from decodelab.samplers import Chain, Greedy, MinP, RepetitionPenalty, TopK
        >>> processor = as_logits_processor(Chain([RepetitionPenalty(1.3), TopK(3), MinP(0.1)]))
        >>> processor
        DecodelabLogitsProcessor(Chain([RepetitionPenalty(1.3), TopK(3), MinP(0.1)]))
        >>> scores = torch.tensor([[1.0, 3.0, 2.0, 0.5, -1.0], [0.0, 0.0, 0.0, 0.0, 5.0]])
        >>> out = processor(torch.tensor([[0, 1], [2, 3]]), scores)
        >>> out.shape, out.dtype, torch.isinf(out).sum(dim=1).tolist()
        (torch.Size([2, 5]), torch.float32, [2, 4])
        >>> as_logits_processor(Chain([TopK(3), Greedy()]))
        Traceback (most recent call last):
        ...
        ValueError: as_logits_processor needs a chain that only processes logits; it ends in Greedy, ...
    """
    import torch
    from transformers import LogitsProcessor

    if not isinstance(chain, Sampler):
        raise ValueError(f"as_logits_processor takes a decodelab sampler or Chain, got {chain!r:.80}")
    stages = chain.stages if isinstance(chain, Chain) else [chain]
    selectors = [type(s).__name__ for s in stages if s.selects]
    if selectors:
        raise ValueError(f"as_logits_processor needs a chain that only processes logits; it ends in "
                         f"{', '.join(selectors)}, which picks the token itself: leave the choice to "
                         "transformers (do_sample=False for greedy, True to sample)")

    class DecodelabLogitsProcessor(LogitsProcessor):
        """decodelab's chain on each row of the scores (see the module's docstring)."""

        def __init__(self):
            self.chain = Chain([s.clone() for s in stages])
            self.n_prompt = self.last_len = None

        def __call__(self, input_ids: "torch.LongTensor", scores: "torch.FloatTensor") -> "torch.FloatTensor":
            if self.last_len is None or input_ids.shape[1] != self.last_len + 1:
                self.n_prompt = int(input_ids.shape[1])  # not the next step: a new generate() call
            self.last_len = int(input_ids.shape[1])
            ids = input_ids.detach().cpu().numpy()
            rows = scores.detach().to("cpu", torch.float32).numpy()
            out = np.empty_like(rows)
            step = ids.shape[1] - self.n_prompt
            for r in range(rows.shape[0]):
                out[r] = self.chain.apply(rows[r], ids[r].tolist(), n_prompt=self.n_prompt, step=step, sequence=r)
            return torch.from_numpy(out).to(device=scores.device, dtype=scores.dtype)

        def __repr__(self) -> str:
            return f"DecodelabLogitsProcessor({self.chain!r})"

    return DecodelabLogitsProcessor()
