"""Import paths from before the package had subpackages (``decodelab.plot``, ``decodelab.gguf_file``
and the like): each still imports, as the module it moved to, with one DeprecationWarning naming
the new path. The table is the one place these old paths live."""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

# old module -> the module it became (the same object: setting an attribute through either path
# sets it on both).
MOVED_MODULES = {
    "decodelab.batching": "decodelab.serve.engine",
    "decodelab.chat": "decodelab.text.chat_template",
    "decodelab.constraints": "decodelab.samplers.grammar",
    "decodelab.gguf_export": "decodelab.formats.gguf.export",
    "decodelab.gguf_file": "decodelab.formats.gguf.reader",
    "decodelab.gguf_model": "decodelab.formats.gguf.model",
    "decodelab.gguf_quantize": "decodelab.formats.gguf.quantize",
    "decodelab.gguf_quants": "decodelab.formats.gguf.blocks",
    "decodelab.gguf_tokenizer": "decodelab.formats.gguf.tokenizer",
    "decodelab.lens": "decodelab.viz.lens",
    "decodelab.metrics": "decodelab.eval.metrics",
    "decodelab.playground": "decodelab.viz.playground",
    "decodelab.plot": "decodelab.viz.plot",
    "decodelab.scoring": "decodelab.eval.scoring",
    "decodelab.streaming": "decodelab.text.streaming",
    "decodelab.token_view": "decodelab.viz.token_view",
    "decodelab.tokenizer": "decodelab.text.tokenizer",
    "decodelab.watermark": "decodelab.samplers.watermark",
}

# (module, name) -> "module:name" for names that left a module that still exists (its module
# __getattr__ calls moved_name).
MOVED_NAMES = {
    ("decodelab.model", "load"): "decodelab:load",
    ("decodelab.formats.gguf.export", "check"): "decodelab.testing.llama_cpp:compare_gguf",
}


def _deprecated(old: str, new: str) -> None:
    # The warning names the first frame outside this file, the import machinery and a module's
    # __getattr__: the user's line. warnings itself passes over importlib's bootstrap frames.
    level, frame = 2, sys._getframe(1)
    while frame is not None and (frame.f_code.co_filename == __file__ or "importlib" in frame.f_code.co_filename
                                 or frame.f_code.co_name == "__getattr__"):
        if "importlib._bootstrap" not in frame.f_code.co_filename:
            level += 1
        frame = frame.f_back
    warnings.warn(f"{old} has moved to {new}; the old path will be removed", DeprecationWarning, stacklevel=level)


def moved_name(module: str, name: str):
    """The object a moved name now is, with its warning; AttributeError for any other name."""
    target = MOVED_NAMES.get((module, name))
    if target is None:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    where, attr = target.split(":")
    _deprecated(f"{module}.{name}", f"{where}.{attr}")
    return getattr(importlib.import_module(where), attr)


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old module path and loads it as the module it moved to."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in MOVED_MODULES:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        new = MOVED_MODULES[spec.name]
        _deprecated(spec.name, new)
        module = importlib.import_module(new)
        # Import then sets __spec__ to the alias's spec; the spec carries the module's own back.
        spec.loader_state = module.__spec__
        return module

    def exec_module(self, module):
        module.__spec__ = module.__spec__.loader_state


def install() -> None:
    """Put the alias finder on sys.meta_path (once). A module that lost names sends its module
    ``__getattr__`` to ``moved_name``."""
    if not any(isinstance(f, _Alias) for f in sys.meta_path):
        sys.meta_path.append(_Alias())
