"""Checks for the lessons' exercises: ``check(label, answer, expected)`` tells a student whether an
answer is right, in words, and leaves an exercise still at ``...`` for later, so that a notebook
runs top to bottom before anyone has answered. The lessons' tests run the worked solutions through
the same checks with ``DECODELAB_EXERCISES=solutions``, where an unanswered exercise is an error.

Examples:
    >>> from decodelab.testing.exercises import check
    >>> check("Exercise 1", 0.25, 1 / 4)
    Exercise 1: correct.
    True
    >>> check("Exercise 2", ..., 3)  # doctest: +ELLIPSIS
    Exercise 2: not answered yet; replace the ... in the cell above and run this cell again.
    False
    >>> check("Exercise 3", {"b", "a"}, {"a", "b"})
    Exercise 3: correct.
    True
"""
from __future__ import annotations

import math
import os
from typing import Any, Callable, Optional

import numpy as np

__all__ = ["check", "solutions_mode"]


def solutions_mode() -> bool:
    """Whether the worked solutions are being checked.

    Returns:
        True when ``DECODELAB_EXERCISES=solutions`` is set (the lessons' tests set it), where an
        unanswered exercise is an error rather than a reminder.

    Examples:
        >>> from decodelab.testing.exercises import solutions_mode
        >>> solutions_mode() == (os.environ.get("DECODELAB_EXERCISES") == "solutions")
        True
    """
    return os.environ.get("DECODELAB_EXERCISES", "") == "solutions"


def _unanswered(answer) -> bool:
    """``...`` itself, or a tuple, list or dict with ``...`` somewhere in it."""
    if answer is ...:
        return True
    if isinstance(answer, (list, tuple)):
        return any(_unanswered(a) for a in answer)
    if isinstance(answer, dict):
        return any(_unanswered(a) for a in answer.values())
    return False


def _is_number(x) -> bool:
    return isinstance(x, (int, float, np.number)) and not isinstance(x, bool)


def _difference(answer, expected, rtol: float, atol: float) -> Optional[str]:
    """None when `answer` matches `expected`, else what differs, in words."""
    if isinstance(expected, (bool, np.bool_)):
        return None if isinstance(answer, (bool, np.bool_)) and bool(answer) == bool(expected) \
            else f"expected {bool(expected)}, got {answer!r}"
    if _is_number(expected):
        if not _is_number(answer):
            return f"expected a number, got {type(answer).__name__} {answer!r}"
        a, e = float(answer), float(expected)
        if math.isclose(a, e, rel_tol=rtol, abs_tol=atol) or (math.isnan(a) and math.isnan(e)):
            return None
        return f"got {a:.6g}, expected about {e:.6g} (within {rtol:g} relative, {atol:g} absolute)"
    if isinstance(expected, np.ndarray):
        try:
            a = np.asarray(answer, dtype=expected.dtype if expected.dtype.kind in "biuf" else None)
        except (TypeError, ValueError):
            return f"expected an array like {expected.shape}, got {type(answer).__name__}"
        if a.shape != expected.shape:
            return f"expected shape {expected.shape}, got shape {a.shape}"
        if expected.dtype.kind in "fc":
            bad = ~np.isclose(a, expected, rtol=rtol, atol=atol, equal_nan=True)
        else:
            bad = a != expected
        if bad.any():
            i = tuple(int(v) for v in np.argwhere(bad)[0])
            return f"{int(bad.sum())} of {bad.size} entries differ; at index {i}: got {a[i]!r}, expected {expected[i]!r}"
        return None
    if isinstance(expected, (set, frozenset)):
        try:
            a = set(answer)
        except TypeError:
            return f"expected a set, got {type(answer).__name__}"
        if a == expected:
            return None
        parts = []
        if expected - a:
            parts.append(f"missing {sorted(expected - a, key=repr)[:5]}")
        if a - expected:
            parts.append(f"should not contain {sorted(a - expected, key=repr)[:5]}")
        return "; ".join(parts)
    if isinstance(expected, dict):
        if not isinstance(answer, dict):
            return f"expected a dict, got {type(answer).__name__}"
        if set(answer) != set(expected):
            return f"expected keys {sorted(expected, key=repr)}, got {sorted(answer, key=repr)}"
        for k in expected:
            d = _difference(answer[k], expected[k], rtol, atol)
            if d:
                return f"[{k!r}]: {d}"
        return None
    if isinstance(expected, (list, tuple)):
        if not isinstance(answer, (list, tuple, np.ndarray)):
            return f"expected a {type(expected).__name__}, got {type(answer).__name__}"
        if len(answer) != len(expected):
            return f"expected {len(expected)} items, got {len(answer)}"
        for i, (a, e) in enumerate(zip(answer, expected)):
            d = _difference(a, e, rtol, atol)
            if d:
                return f"item {i}: {d}"
        return None
    return None if answer == expected else f"got {answer!r}, expected {expected!r}"


def check(label: str, answer: Any, expected: Any, *, rtol: float = 1e-4, atol: float = 1e-6,
          hint: str = "") -> bool:
    """Say whether `answer` is right.

    Args:
        label: what the student sees first, e.g. ``"Exercise 2"``.
        answer: the student's answer; ``...`` (Ellipsis), alone or inside a tuple, list or dict,
            means not answered yet.
        expected: the right answer, computed in the check cell (by decodelab, not by the student's
            route); numbers and float arrays compare within `rtol` / `atol`, sets as sets, lists
            and dicts item by item, anything else with ``==``. A callable instead takes the answer
            and returns None when it is right, or a sentence saying what is wrong.
        rtol: relative tolerance for numbers.
        atol: absolute tolerance for numbers.
        hint: a sentence shown with a wrong answer.

    Returns:
        True when right; False when not answered yet (outside solutions mode).

    Raises:
        AssertionError: the answer is wrong (the message says what differs, then the hint), or
            it is unanswered while the solutions are checked (``DECODELAB_EXERCISES=solutions``).

    Examples:
        >>> check("Exercise 1", 7, lambda a: None if a % 7 == 0 else f"{a} is not a multiple of 7")
        Exercise 1: correct.
        True
    """
    if _unanswered(answer):
        if solutions_mode():
            raise AssertionError(f"{label}: not answered, and the solutions are being checked")
        print(f"{label}: not answered yet; replace the ... in the cell above and run this cell again.")
        return False
    if callable(expected) and not isinstance(expected, type):
        difference = expected(answer)
    else:
        difference = _difference(answer, expected, rtol, atol)
    if difference:
        raise AssertionError(f"{label}: not yet right: {difference}." + (f" Hint: {hint}" if hint else ""))
    print(f"{label}: correct.")
    return True
