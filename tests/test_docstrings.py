"""Docstrings a documentation site can read: every public module, class and function has a Google
style docstring (Args, Returns or Yields, Raises where it raises, and Examples), and every example
runs here as a doctest against the installed package, on stories260K or tiny checkpoints."""
import ast
import doctest
import importlib
import inspect
import pkgutil
import re
import textwrap

import numpy as np
import pytest

import decodelab

pytestmark = pytest.mark.doctest


def _public_modules():
    names = ["decodelab"]
    for mi in pkgutil.walk_packages(decodelab.__path__, "decodelab."):
        if not any(part.startswith("_") for part in mi.name.split(".")):
            names.append(mi.name)
    return sorted(names)


MODULES = _public_modules()


def _items(module):
    """(qualified name, object) for each public class, function, method and property of a module."""
    m = importlib.import_module(module)
    out = []
    for name in getattr(m, "__all__", ()):
        obj = getattr(m, name)
        if getattr(obj, "__module__", None) != module or not (inspect.isfunction(obj) or inspect.isclass(obj)):
            continue  # re-exported from where it is defined, or a constant
        out.append((name, obj))
        if inspect.isclass(obj):
            for k, v in vars(obj).items():
                if not k.startswith("_") and (inspect.isfunction(v) or isinstance(v, (property, staticmethod,
                                                                                       classmethod))):
                    out.append((f"{name}.{k}", v))
    return out


def _section(doc, title):
    """The text of a Google style section (``Args:``), or None."""
    m = re.search(rf"^{title}:\s*$(.*?)(?=^[A-Z][A-Za-z ]*:\s*$|\Z)", doc, flags=re.M | re.S)
    return m.group(1) if m else None


def _raises(func):
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(func)))
    except (OSError, TypeError, SyntaxError):
        return False
    def raises(node):
        # A raise inside a nested function or class belongs to it; a bare raise re-raises.
        if isinstance(node, ast.Raise):
            return node.exc is not None
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            return False
        return any(raises(child) for child in ast.iter_child_nodes(node))

    return any(raises(child) for child in ast.iter_child_nodes(tree.body[0]))


def _params(func, skip_first):
    sig = inspect.signature(func)
    names = list(sig.parameters)
    return names[1:] if skip_first and names else names


def problems(module):
    """What the docstrings of a module lack, one line each."""
    found = []
    m = importlib.import_module(module)
    if not (m.__doc__ or "").strip():
        found.append(f"{module}: no module docstring")
    if module != "decodelab" and not hasattr(m, "__all__") and not module.endswith("__main__"):
        found.append(f"{module}: no __all__ naming its public names")
    for name, obj in _items(module):
        where = f"{module}.{name}"
        func = obj.fget if isinstance(obj, property) else getattr(obj, "__func__", obj)
        doc = inspect.getdoc(func) or ""
        if not doc.strip():
            found.append(f"{where}: no docstring")
            continue
        if isinstance(obj, property):
            continue  # a property needs only a sentence
        is_method = "." in name
        if inspect.isclass(obj):
            init = vars(obj).get("__init__")
            params = _params(init, True) if inspect.isfunction(init) else []
            if dataclass_fields := getattr(obj, "__dataclass_fields__", None):
                params = []  # a dataclass lists its fields under Attributes
                if _section(doc, "Attributes") is None:
                    found.append(f"{where}: a dataclass without an Attributes section")
                else:
                    missing = [f for f in dataclass_fields if not re.search(rf"\b{f}\b", _section(doc, "Attributes"))]
                    if missing:
                        found.append(f"{where}: Attributes does not name {', '.join(missing)}")
            raises = inspect.isfunction(init) and _raises(init)
        else:
            params = _params(func, is_method and not isinstance(obj, staticmethod))
            raises = _raises(func)
            ret = inspect.signature(func).return_annotation
            if inspect.isgeneratorfunction(func):
                if _section(doc, "Yields") is None:
                    found.append(f"{where}: a generator without a Yields section")
            elif ret not in (None, "None") and name.split(".")[-1] != "__init__" and _section(doc, "Returns") is None:
                found.append(f"{where}: no Returns section")
        params = [p.lstrip("*") for p in params]
        if params:
            args = _section(doc, "Args")
            if args is None:
                found.append(f"{where}: no Args section (takes {', '.join(params)})")
            else:
                missing = [p for p in params if not re.search(rf"(^|\W){re.escape(p)}\b", args)]
                if missing:
                    found.append(f"{where}: Args does not name {', '.join(missing)}")
        if raises and _section(doc, "Raises") is None:
            found.append(f"{where}: raises but has no Raises section")
        if not is_method:
            ex = _section(doc, "Examples")
            if ex is None or ">>>" not in ex:
                found.append(f"{where}: no Examples section with a >>> example")
    return found


@pytest.mark.parametrize("module", MODULES)
def test_docstrings_are_complete(module):
    found = problems(module)
    assert not found, "\n".join(found)


@pytest.mark.parametrize("module", MODULES)
def test_docstring_examples_run(module, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # examples that write files write them here
    m = importlib.import_module(module)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    # What every example may take as imported: numpy as np and decodelab, and in the samplers'
    # modules every sampler name (their package docstring says so).
    extra = {"np": np, "decodelab": decodelab}
    if module.startswith("decodelab.samplers"):
        extra.update({n: getattr(decodelab.samplers, n) for n in decodelab.samplers.__all__})
    failures = []
    for t in finder.find(m, module, extraglobs=extra):  # the module's own objects, not its re-exports
        runner.run(t, out=failures.append)
    assert not failures, "".join(failures)
