"""_core.pyi describes the whole compiled module: a public name or class member missing from the
stub fails here, so type checkers and editors see what the module offers."""
import ast
import os

import decodelab
from decodelab import _core

STUB = os.path.join(os.path.dirname(decodelab.__file__), "_core.pyi")


def _stub():
    with open(STUB, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    top, members = set(), {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            top.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            top.add(node.target.id)
        if isinstance(node, ast.ClassDef):
            names = set()
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    names.add(item.name)
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    names.add(item.target.id)
            members[node.name] = {n for n in names if not n.startswith("_")}
    return top, members


def test_every_public_core_name_is_in_the_stub():
    top, members = _stub()
    public = {n for n in dir(_core) if not n.startswith("_")}
    assert not public - top, f"missing from _core.pyi: {sorted(public - top)}"
    assert not top - public, f"in _core.pyi but not in the module: {sorted(top - public)}"
    for name, names in members.items():
        cls = getattr(_core, name)
        have = {n for n in vars(cls) if not n.startswith("_")}
        assert not have - names, f"{name} members missing from _core.pyi: {sorted(have - names)}"
        assert not names - have, f"{name} members in _core.pyi but not in the module: {sorted(names - have)}"
