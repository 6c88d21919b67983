"""The package's layers: the compiled core and configuration at the bottom, then text, samplers and
results, then file formats, then Model, then load(), and the tools (pictures, serving,
integrations, testing, the CLI) at the top. A module imports only from its own layer or below, and
the module-level imports form no loop. Read from the source, so no import has to run."""
import ast
import os

import pytest

import decodelab

PKG = os.path.dirname(os.path.abspath(decodelab.__file__))

# The first matching prefix gives a module's layer.
LAYERS = [
    (0, ["decodelab._native", "decodelab._core", "decodelab._compat", "decodelab.options", "decodelab.rope",
         "decodelab.config", "decodelab.kernel_choice"]),
    (1, ["decodelab.text", "decodelab.samplers", "decodelab.results", "decodelab.trace", "decodelab.beam",
         "decodelab.profiling", "decodelab.eval"]),
    (2, ["decodelab.formats"]),
    (3, ["decodelab.model"]),
    (4, ["decodelab.loading"]),
    (5, ["decodelab.viz", "decodelab.serve", "decodelab.integrations", "decodelab.testing", "decodelab.cli",
         "decodelab.pytest_plugin", "decodelab.__main__"]),
]
FACADE = 5  # decodelab/__init__.py itself, which gathers the public names of every layer


def layer(module):
    if module == "decodelab":
        return FACADE
    for n, prefixes in LAYERS:
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return n
    raise AssertionError(f"{module} has no layer in tests/test_layers.py")


def _modules():
    out = {}
    for folder, _, files in os.walk(PKG):
        for f in files:
            if f.endswith(".py"):
                rel = os.path.relpath(os.path.join(folder, f), os.path.dirname(PKG))[:-3].replace(os.sep, ".")
                out[rel[:-len(".__init__")] if rel.endswith(".__init__") else rel] = os.path.join(folder, f)
    return out


MODULES = _modules()


def _is_main_guard(node):
    return (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
            and isinstance(node.test.left, ast.Name) and node.test.left.id == "__name__")


def imports(module, top_level_only):
    """The decodelab modules `module` imports (with the packages above each), outside a __main__ block."""
    path = MODULES[module]
    package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    found = set()

    def visit(node):
        if _is_main_guard(node):
            return
        if top_level_only and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(up + ([base] if base else []))
            for a in node.names:
                found.add(f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    out = set()
    for name in found:
        if name.startswith("decodelab"):
            parts = name.split(".")
            out.update(".".join(parts[:i]) for i in range(2, len(parts) + 1))
    # A module's own packages are already importing when it runs: an edge to them is no loop.
    ancestors = {".".join(module.split(".")[:i]) for i in range(1, module.count(".") + 1)}
    return {m for m in out if m in MODULES or m == "decodelab._core"} - {module} - ancestors


def test_every_module_has_a_layer():
    for module in MODULES:
        layer(module)
    with pytest.raises(AssertionError, match="no layer"):
        layer("decodelab.somewhere_new")


def test_no_module_imports_from_a_higher_layer():
    upward = []
    for module in MODULES:
        for dep in imports(module, top_level_only=False):
            if layer(dep) > layer(module):
                upward.append(f"{module} (layer {layer(module)}) imports {dep} (layer {layer(dep)})")
    assert not upward, "\n".join(upward)


def find_loops(graph):
    """Every import loop a depth-first walk of `graph` (module -> modules it imports) meets."""
    state, loops = {}, []

    def walk(m, stack):
        state[m] = "open"
        for d in sorted(graph.get(m, ())):
            if state.get(d) == "open":
                loops.append(" -> ".join(stack[stack.index(d):] + [d]))
            elif d not in state:
                walk(d, stack + [d])
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            walk(m, [m])
    return loops


def test_no_import_loops():
    loops = find_loops({m: imports(m, top_level_only=True) for m in MODULES})
    assert not loops, "\n".join(loops)


def test_the_checks_see_a_loop_and_an_upward_import(tmp_path, monkeypatch):
    # The checker itself: a model module that imported loading would be flagged both ways.
    fake = tmp_path / "model.py"
    fake.write_text("from .loading import load\n")
    monkeypatch.setitem(MODULES, "decodelab.model", str(fake))
    assert "decodelab.loading" in imports("decodelab.model", top_level_only=True)
    assert layer("decodelab.loading") > layer("decodelab.model")
    graph = {m: imports(m, top_level_only=True) for m in MODULES}
    assert "decodelab.loading -> decodelab.model -> decodelab.loading" in find_loops(graph)


def test_at_most_16_modules_at_the_top():
    top = [f for f in os.listdir(PKG) if f.endswith(".py")
           and f not in ("__init__.py", "__main__.py", "_native.py")]
    assert len(top) <= 16, sorted(top)
