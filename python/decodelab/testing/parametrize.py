"""pytest parametrize marks over decodelab's sampler orders and presets, so one test runs under
each system's order (hf, vllm, llama.cpp) or each named preset."""
from __future__ import annotations

from typing import Iterable, Optional

from .. import samplers as S


def parametrize_orders(argname: str = "order", orders: Optional[Iterable[str]] = None):
    """``@parametrize_orders()``: the test runs once per order in ``decodelab.samplers.ORDERS``."""
    import pytest

    names = list(orders) if orders is not None else list(S.ORDERS)
    for o in names:
        if o not in S.ORDERS:
            raise ValueError(f"unknown order {o!r}; known: {', '.join(S.ORDERS)}")
    return pytest.mark.parametrize(argname, names)


def parametrize_presets(argname: str = "preset", presets: Optional[Iterable[str]] = None):
    """``@parametrize_presets()``: the test runs once per preset in ``decodelab.samplers.PRESETS``."""
    import pytest

    names = list(presets) if presets is not None else list(S.PRESETS)
    for p in names:
        if p not in S.PRESETS:
            raise ValueError(f"unknown preset {p!r}; known: {', '.join(S.PRESETS)}")
    return pytest.mark.parametrize(argname, names)
