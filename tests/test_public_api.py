"""The public API, committed in tests/public_api.txt: every documented path imports without a warning
(the suite turns warnings into errors), and every old path kept for compatibility resolves to the
same object as its new path with one DeprecationWarning that names the new path."""
import importlib
import json
import os
import subprocess
import sys

import pytest

LIST = os.path.join(os.path.dirname(os.path.abspath(__file__)), "public_api.txt")


def _entries():
    public, compat = [], []
    with open(LIST, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if " -> " in line:
                compat.append(tuple(line.split(" -> ")))
            else:
                public.append(line)
    return public, compat


PUBLIC, COMPAT = _entries()


def resolve(path):
    """The object a dotted path names: the longest importable module prefix, then attributes."""
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        name = ".".join(parts[:i])
        try:
            obj = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name is not None and not name.startswith(e.name):
                raise  # the module exists but one of its own imports is missing
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(f"nothing of {path!r} imports")


def test_the_list_is_not_empty():
    assert len(PUBLIC) > 200 and len(COMPAT) >= 18


@pytest.mark.parametrize("path", PUBLIC)
def test_public_path_imports_without_a_warning(path):
    resolve(path)


_CHECK_COMPAT = r"""
import json, sys, warnings
from test_public_api import resolve
out = {}
for old, new in json.loads(sys.argv[1]):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = resolve(old)
    msgs = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
    out[old] = {"same": got is resolve(new), "warnings": msgs}
print(json.dumps(out))
"""


def test_old_paths_resolve_to_the_new_objects_with_one_warning():
    # A fresh interpreter: an old path warns the first time it is imported in a process.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(LIST)] + sys.path))
    r = subprocess.run([sys.executable, "-c", _CHECK_COMPAT, json.dumps(COMPAT)], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout)
    modules = {old for old, _ in COMPAT if old.count(".") == 1}
    for old, new in COMPAT:
        assert out[old]["same"], f"{old} is not {new}"
        module = old if old in modules else next((m for m in modules if old.startswith(m + ".")), None)
        if module is None or module == old:
            # A moved module (or a moved name of a module that stayed): its own warning, naming the new path.
            assert len(out[old]["warnings"]) == 1 and new.rsplit(".", 1)[0] in out[old]["warnings"][0], out[old]
    for old in modules:
        # Each old module warned once, at its first import; later imports of it are silent.
        assert sum(old + " has moved" in w for o in out for w in out[o]["warnings"]) == 1, old
