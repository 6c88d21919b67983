"""pytest parametrize marks over decodelab's sampler orders and presets, so one test runs under
each system's order (hf, vllm, llama.cpp) or each named preset.

Examples:
    >>> from decodelab.testing import parametrize_orders
    >>> @parametrize_orders()
    ... def test_top_k_keeps_k(order):
    ...     chain = decodelab.samplers.build_chain(order=order, temperature=1.0, top_k=3)
    ...     assert np.isfinite(chain.stages[0].apply(np.arange(10.0))).sum() == 3
    >>> [m.args for m in test_top_k_keeps_k.pytestmark]
    [('order', ['hf', 'vllm', 'llama.cpp'])]
"""
from __future__ import annotations

from typing import Iterable, Optional

from .. import samplers as S

__all__ = ["parametrize_orders", "parametrize_presets"]


def _parametrize(argname: str, names: Optional[Iterable[str]], known: dict, what: str):
    import pytest

    chosen = list(names) if names is not None else list(known)
    for n in chosen:
        if n not in known:
            raise ValueError(f"unknown {what} {n!r}; known: {', '.join(known)}")
    return pytest.mark.parametrize(argname, chosen)


def parametrize_orders(argname: str = "order", orders: Optional[Iterable[str]] = None):
    """``@parametrize_orders()``: the test runs once per order in ``decodelab.samplers.ORDERS``.

    Args:
        argname: the test's argument that receives the order name; default "order".
        orders: the orders to run, a subset of ``decodelab.samplers.ORDERS``; default None (all:
            "hf", "vllm", "llama.cpp").

    Returns:
        A ``pytest.mark.parametrize`` mark to decorate the test with.

    Raises:
        ValueError: an order that is not in ``decodelab.samplers.ORDERS``.

    Examples:
        >>> from decodelab.testing import parametrize_orders
        >>> parametrize_orders().args
        ('order', ['hf', 'vllm', 'llama.cpp'])
        >>> parametrize_orders("o", ["vllm"]).args
        ('o', ['vllm'])
        >>> parametrize_orders(orders=["sglang"])
        Traceback (most recent call last):
        ...
        ValueError: unknown order 'sglang'; known: hf, vllm, llama.cpp
    """
    return _parametrize(argname, orders, S.ORDERS, "order")


def parametrize_presets(argname: str = "preset", presets: Optional[Iterable[str]] = None):
    """``@parametrize_presets()``: the test runs once per preset in ``decodelab.samplers.PRESETS``.

    Args:
        argname: the test's argument that receives the preset name; default "preset".
        presets: the presets to run, a subset of ``decodelab.samplers.PRESETS``; default None (all:
            "factual", "balanced", "creative").

    Returns:
        A ``pytest.mark.parametrize`` mark to decorate the test with.

    Raises:
        ValueError: a preset that is not in ``decodelab.samplers.PRESETS``.

    Examples:
        >>> from decodelab.testing import parametrize_presets
        >>> parametrize_presets().args
        ('preset', ['factual', 'balanced', 'creative'])
        >>> @parametrize_presets(presets=["factual"])
        ... def test_preset_generates(preset):
        ...     assert decodelab.load("stories260K").generate("Once", preset=preset, max_new_tokens=2).token_ids
        >>> test_preset_generates("factual")  # pytest would call it once, with "factual"
    """
    return _parametrize(argname, presets, S.PRESETS, "preset")
