"""Bridges from decodelab to other libraries: ``transformers`` (a sampler chain as a transformers
LogitsProcessor), ``lm_eval`` (a decodelab model as an lm-evaluation-harness model) and ``ray``
(decodelab as a stage of a Ray Data pipeline)."""

# The bridges are the submodules, imported by name (each needs its own library); the package
# itself exports nothing.
__all__: list = []
