"""Kernel choices made by a short measurement on the running CPU, where two paths give results of
the same kind and which one is faster differs between CPUs.

One choice is made this way today: for bfloat16 weights on a CPU with native bf16 products
(AVX512_BF16 or AMX), prompts of 80 or more rows either go through oneDNN's bf16 matmul on inputs
rounded to bf16, or through the fp32 matmul on the weights widened per call. Which is faster
depends on the CPU: AMX tiles favour the first, AVX512_BF16 without AMX can favour the second.
The first call times both on one prompt-sized product (a few tens of milliseconds) and keeps the
answer for the process and CPU model; ``decodelab.cpu_info()["choices"]`` shows it. The int4,
int8 and w8a8 dtypes, whose results must not depend on the CPU, have no such choice.

Examples:
    >>> from decodelab import kernel_choice
    >>> isinstance(kernel_choice.bf16_matmul(), bool)
    True
    >>> sorted(kernel_choice.choices()) in ([], ["bf16_matmul"])
    True
"""
from __future__ import annotations

import time
from typing import Dict

import numpy as np

from ._native import _core

__all__ = ["bf16_matmul", "choices", "MARGIN"]

# The bf16 path must be this much faster to be chosen: its inputs are rounded, so a near tie
# (where noise could flip the answer between runs) keeps the exact fp32 inputs.
MARGIN = 1.2
# A prompt-sized product: 128 rows through a 1024 x 1024 layer.
_SHAPE = (128, 1024, 1024)
_CHOICES: Dict[str, dict] = {}


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def bf16_matmul() -> bool:
    """Whether bfloat16 layers should take oneDNN's bf16 matmul for prompts on this CPU.

    False without native bf16 products (oneDNN would emulate them at a fifth of the fp32 speed).
    Otherwise both paths are timed once per process (a first untimed call each, which sets up
    oneDNN's kernels, then two alternating rounds, the best of each) and the bf16 path is chosen
    when it is at least ``MARGIN`` times as fast.

    Returns:
        True to use the bf16 matmul, False for fp32 inputs.

    Examples:
        >>> from decodelab import kernel_choice
        >>> kernel_choice.bf16_matmul() in (True, False)
        True
    """
    if not _core.bf16_matmul_native():
        return False
    found = _CHOICES.get("bf16_matmul")
    if found is None:
        rows, n_in, n_out = _SHAPE
        rng = np.random.default_rng(0)
        x = rng.standard_normal((rows, n_in), dtype=np.float32)
        w = rng.standard_normal((n_out, n_in), dtype=np.float32)
        best = {True: float("inf"), False: float("inf")}
        start = time.perf_counter()
        for path in (True, False):
            _core.linear_seconds(x, w, "bfloat16", 1, bf16_matmul=path)
        for path in (True, False, True, False):
            best[path] = min(best[path], float(np.min(_core.linear_seconds(x, w, "bfloat16", 2, bf16_matmul=path))))
        found = {"choice": bool(best[True] * MARGIN < best[False]), "cpu": _cpu_model(),
                 "seconds_bf16_matmul": best[True], "seconds_fp32_inputs": best[False],
                 "shape": list(_SHAPE), "measured_in_seconds": time.perf_counter() - start}
        _CHOICES["bf16_matmul"] = found
    return found["choice"]


def choices() -> Dict[str, dict]:
    """The choices measured so far in this process, by name.

    Returns:
        {"bf16_matmul": {"choice", "cpu", "seconds_bf16_matmul", "seconds_fp32_inputs", "shape",
        "measured_in_seconds"}} once a bfloat16 model has loaded on a CPU with native bf16; {} before.

    Examples:
        >>> from decodelab import kernel_choice
        >>> isinstance(kernel_choice.choices(), dict)
        True
    """
    return {k: dict(v) for k, v in _CHOICES.items()}
