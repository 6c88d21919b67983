"""Real English text the project can build offline, for accuracy measurements: the docstrings of
a fixed list of Python standard-library modules and their public functions and classes (the
text differs a little between Python versions; reports name the version)."""
from __future__ import annotations

import importlib
import inspect
from typing import Sequence

STDLIB_MODULES = ("json", "textwrap", "functools", "collections", "string", "fractions", "heapq", "bisect")


def stdlib_docstrings(modules: Sequence[str] = STDLIB_MODULES) -> str:
    """The module docstring, then each public function's and class's in name order, per module,
    separated by blank lines."""
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
