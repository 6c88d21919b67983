"""decodelab: LLM inference and decoding research with every stage visible.

``decodelab.load`` reads a model (a Hugging Face folder, a GGUF file, a llama2.c checkpoint, or the
built-in "stories260K") into a :class:`Model`, whose ``generate``, ``stream``, ``forward``,
``prefill``/``decode`` and ``score`` run on the C++ engine. ``decodelab.samplers`` holds the sampler
stages and chains; a :class:`Generation` records what a call produced, with per-token logprobs and
per-stage traces on request.

Examples:
    >>> import decodelab
    >>> model = decodelab.load("stories260K")  # 260K parameters, shipped inside the package
    >>> g = model.generate("Once upon a time", max_new_tokens=50, eos_token_id=[])
    >>> isinstance(g.text, str), len(g.token_ids), g.finish_reason
    (True, 50, 'length')
"""
from ._native import _core
from . import _compat
from .config import ModelConfig
from . import samplers
from .model import Model  # before loading, which builds a Model
from .loading import load
from .results import GeneratedSequence, Generation, TokenLogprob, TopLogprob
from .trace import StageSummary, StepTrace, Trace
from .text.tokenizer import HFTokenizer, Llama2cTokenizer, Tokenizer
from .samplers.grammar import Grammar

__version__ = "0.1.0"


_compat.install()


def __getattr__(name):
    # decodelab.plot and the other old module paths, reached as attributes (_compat.MOVED_MODULES).
    if f"decodelab.{name}" in _compat.MOVED_MODULES:
        import importlib

        return importlib.import_module(f"decodelab.{name}")
    raise AttributeError(f"module 'decodelab' has no attribute {name!r}")


def cpu_info() -> dict:
    """What the CPU kernels run on.

    Returns:
        A dict: ``detected`` (the CPU features that decide it), ``supported`` (the kernel variants
        this CPU runs), ``compiled`` (those this build holds: generic, avx2, avx512, avx512_vnni in a
        portable build, one in a DECODELAB_NATIVE_ARCH build), ``cap`` (the DECODELAB_ISA
        environment variable, read at import; None when unset), ``chosen`` (the variant in use),
        ``portable`` (True for a portable build) and ``choices`` (kernel choices measured on this
        CPU so far, ``decodelab.kernel_choice.choices()``).

    Examples:
        >>> info = decodelab.cpu_info()
        >>> sorted(info)
        ['cap', 'choices', 'chosen', 'compiled', 'detected', 'portable', 'supported']
        >>> info["chosen"] in info["supported"], info["chosen"] in info["compiled"]
        (True, True)
    """
    from . import kernel_choice

    return dict(_core.cpu_info(), choices=kernel_choice.choices())


__all__ = [
    "Generation",
    "Grammar",
    "GeneratedSequence",
    "StageSummary",
    "StepTrace",
    "TokenLogprob",
    "TopLogprob",
    "Trace",
    "samplers",
    "HFTokenizer",
    "Llama2cTokenizer",
    "Model",
    "ModelConfig",
    "Tokenizer",
    "load",
    "__version__",
    "cpu_info",
]
