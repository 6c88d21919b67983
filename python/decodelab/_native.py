"""Loads the compiled core.

oneDNN comes from the ``onednn-cpu-gomp`` wheel, which installs ``libdnnl.so.3`` under the
environment's data prefix rather than next to our extension. It is loaded here by its full path
before ``_core`` so the dynamic linker resolves ``_core``'s dependency on it by soname.
"""
from __future__ import annotations

import ctypes
import importlib.metadata
import os


def _preload_onednn() -> None:
    try:
        dist = importlib.metadata.distribution("onednn-cpu-gomp")
    except importlib.metadata.PackageNotFoundError:
        return  # a build against a system oneDNN finds it through the linker's own paths
    for f in dist.files or []:
        if str(f).endswith("libdnnl.so.3"):
            path = os.path.realpath(str(dist.locate_file(f)))
            if os.path.exists(path):
                ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
                return


_preload_onednn()

from . import _core  # noqa: E402

__all__ = ["_core"]
