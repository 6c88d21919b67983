"""A decodelab sampler chain as a transformers ``LogitsProcessor``, so the same sampler settings run
inside ``model.generate`` of any Hugging Face model, on any device:

    from transformers import LogitsProcessorList
    from decodelab.integrations.transformers import as_logits_processor
    chain = Chain([RepetitionPenalty(1.3), TopK(20), MinP(0.1)])
    model.generate(ids, do_sample=False, logits_processor=LogitsProcessorList([as_logits_processor(chain)]))

The chain must only process logits: transformers chooses the token (greedy or sampling), so a chain
that ends in a selector (Greedy, Dist, Mirostat) is refused. Each call copies the scores to the
CPU as float32, runs the chain in decodelab's core per row (context: that row's input_ids; the
prompt: the length at the first call of a generate), and returns them in the scores' own dtype and device.
"""
from __future__ import annotations

import numpy as np

from ..samplers import Chain, Sampler


def as_logits_processor(chain: Sampler):
    """The transformers LogitsProcessor that applies ``chain`` (a Chain or a single sampler)."""
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
