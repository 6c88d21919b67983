"""Pictures and views of what a model does: ``plot`` (matplotlib figures of sampler stages, beam
trees, generation curves, the logit lens and speculative rounds), ``lens`` (the logit lens),
``token_view`` (text coloured by probability) and ``playground`` (sampler sliders in Jupyter).
Each needs its optional library only when called."""
from .lens import LogitLens, logit_lens
from .playground import Playground
from .token_view import TokenView

__all__ = ["LogitLens", "logit_lens", "Playground", "TokenView"]
