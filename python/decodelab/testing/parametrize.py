"""pytest parametrize marks over decodelab's sampler orders and presets, so one test runs under
each system's order (hf, vllm, llama.cpp) or each named preset."""
from __future__ import annotations

from typing import Iterable, Optional

from .. import samplers as S


def _parametrize(argname: str, names: Optional[Iterable[str]], known: dict, what: str):
    import pytest

    chosen = list(names) if names is not None else list(known)
    for n in chosen:
        if n not in known:
            raise ValueError(f"unknown {what} {n!r}; known: {', '.join(known)}")
    return pytest.mark.parametrize(argname, chosen)


def parametrize_orders(argname: str = "order", orders: Optional[Iterable[str]] = None):
    """``@parametrize_orders()``: the test runs once per order in ``decodelab.samplers.ORDERS``."""
    return _parametrize(argname, orders, S.ORDERS, "order")


def parametrize_presets(argname: str = "preset", presets: Optional[Iterable[str]] = None):
    """``@parametrize_presets()``: the test runs once per preset in ``decodelab.samplers.PRESETS``."""
    return _parametrize(argname, presets, S.PRESETS, "preset")
