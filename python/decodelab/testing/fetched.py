"""The real GGUF files that ``../shared/models/fetch`` downloads (from PyPI packages that carry
them in parts), found by name in its folder: ``$DECODELAB_MODEL_CACHE``, by default
``~/.cache/decodelab-models`` as fetch chooses it. Tests skip with the reason when a file is absent.

Examples:
    >>> from decodelab.testing import FETCHED, fetched_model
    >>> sorted(FETCHED)
    ['gemma-3-270m', 'qwen2.5-coder-0.5b', 'qwen2.5-coder-1.5b']
    >>> path = fetched_model("qwen2.5-coder-0.5b")  # None until fetch has run
    >>> path is None or path.endswith("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
    True
"""
from __future__ import annotations

import os
from typing import Optional

__all__ = ["FETCHED", "model_cache", "fetched_model"]

# Name -> file, as fetch writes them: Qwen2.5-Coder-0.5B-Instruct and Gemma 3 270M (base), Q4_K_M;
# with `fetch --large`, Qwen2.5-Coder-1.5B-Instruct, larger than any CPU cache.
FETCHED = {
    "qwen2.5-coder-0.5b": "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    "gemma-3-270m": "gemma-3-270m-q4_k_m.gguf",
    "qwen2.5-coder-1.5b": "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
}


def model_cache() -> str:
    """The folder fetch writes to.

    Returns:
        ``$DECODELAB_MODEL_CACHE`` when set, else ``$XDG_CACHE_HOME/decodelab-models`` or
        ``~/.cache/decodelab-models``, as ``../shared/models/fetch`` decides it.

    Examples:
        >>> from decodelab.testing import model_cache
        >>> model_cache().endswith("decodelab-models") or "DECODELAB_MODEL_CACHE" in os.environ
        True
    """
    if os.environ.get("DECODELAB_MODEL_CACHE"):
        return os.environ["DECODELAB_MODEL_CACHE"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "decodelab-models")


def fetched_model(name: str) -> Optional[str]:
    """The path of a fetched model file, or None when fetch has not put it there.

    Args:
        name: one of FETCHED's names ("qwen2.5-coder-0.5b", "gemma-3-270m", "qwen2.5-coder-1.5b").

    Returns:
        The file's path (str) when it exists in ``model_cache()``, else None.

    Raises:
        ValueError: ``name`` is not one of FETCHED's names.

    Examples:
        >>> from decodelab.testing import fetched_model
        >>> fetched_model("llama-7b")
        Traceback (most recent call last):
        ...
        ValueError: fetched_model takes one of 'gemma-3-270m', 'qwen2.5-coder-0.5b', 'qwen2.5-coder-1.5b', got 'llama-7b'
    """
    if name not in FETCHED:
        raise ValueError(f"fetched_model takes one of {', '.join(map(repr, sorted(FETCHED)))}, got {name!r}")
    path = os.path.join(model_cache(), FETCHED[name])
    return path if os.path.isfile(path) else None
