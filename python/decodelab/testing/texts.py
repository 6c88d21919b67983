"""Real English text the project can build offline, for accuracy measurements: the docstrings of
a fixed list of Python standard-library modules and their public functions and classes (the
text differs a little between Python versions; reports name the version).

Examples:
    >>> from decodelab.testing import stdlib_docstrings
    >>> text = stdlib_docstrings(["json"])
    >>> text.startswith("JSON (JavaScript Object Notation)")
    True
"""
from __future__ import annotations

import importlib
import inspect
from typing import Sequence

__all__ = ["stdlib_docstrings", "STDLIB_MODULES"]

STDLIB_MODULES = ("json", "textwrap", "functools", "collections", "string", "fractions", "heapq", "bisect")


def stdlib_docstrings(modules: Sequence[str] = STDLIB_MODULES) -> str:
    """The docstrings of standard-library modules as one text.

    Per module: the module docstring, then the docstring of each public name at the module's top
    level that is a Python function (not a builtin) or a class, in name order (empty ones
    skipped); all of them separated by blank lines.

    Args:
        modules: the names of the modules to read, in order; default STDLIB_MODULES (json,
            textwrap, functools, collections, string, fractions, heapq, bisect).

    Returns:
        The text, a str.

    Examples:
        >>> from decodelab.testing import stdlib_docstrings
        >>> text = stdlib_docstrings()
        >>> len(text) > 10000, text.startswith("JSON (JavaScript Object Notation)")
        (True, True)
        >>> stdlib_docstrings(["bisect"]).startswith("Bisection algorithms.")
        True
    """
    docs = []
    for name in modules:
        mod = importlib.import_module(name)
        docs.append(inspect.getdoc(mod) or "")
        for key, value in sorted(vars(mod).items()):
            if key.startswith("_") or not (inspect.isfunction(value) or inspect.isclass(value)):
                continue
            doc = inspect.getdoc(value)
            if doc:
                docs.append(doc)
    return "\n\n".join(d for d in docs if d)
