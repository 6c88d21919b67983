"""MkDocs hooks: the pages made at build time. API pages from each public module's __all__, the
lessons from notebooks/ (executed here, or taken already executed from DECODELAB_DOCS_NOTEBOOKS),
the benchmarks page from benchmarks/results/, and MathJax copied from jupyter-server-mathjax so
that the site loads nothing from outside itself."""
import hashlib
import io
import json
import os
import re
import shutil
import tempfile

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = os.path.join(ROOT, "notebooks")
RESULTS = os.path.join(ROOT, "benchmarks", "results")

# ---------------------------------------------------------------------------------------------
# API reference: one page per top-level module of decodelab; a name is documented once, in the
# shallowest public module that exports it (decodelab.samplers.TopP, not .warpers.TopP).


def public_modules():
    """Every decodelab module without a private part, parents first, read statically by griffe (as
    mkdocstrings reads them): no module is imported, so optional dependencies need not be there."""
    import griffe

    pkg = griffe.load("decodelab", search_paths=[os.path.join(ROOT, "python")], allow_inspection=False)

    def walk(m):
        yield m
        for sub in m.members.values():
            if not sub.is_alias and sub.is_module:
                yield from walk(sub)

    mods = [m for m in walk(pkg) if not any(p.startswith("_") for p in m.path.split(".")[1:])]
    return sorted(mods, key=lambda m: m.path)


def _exports(module):
    return [str(n) for n in (module.exports or [])]


def _canonical(member):
    return member.target_path if member.is_alias else member.path


def exported_above(module, name, by_path):
    """Whether a parent package exports the same object under the same name."""
    target = _canonical(module.members[name])
    parts = module.path.split(".")
    for i in range(len(parts) - 1, 0, -1):
        parent = by_path[".".join(parts[:i])]
        if name in _exports(parent) and name in parent.members and _canonical(parent.members[name]) == target:
            return True
    return False


def documented_names(module, by_path):
    """The names of module.__all__ that its own page documents (not modules, not re-exports)."""
    out = []
    for name in _exports(module):
        if name not in module.members:
            raise ValueError(f"{module.path}.__all__ names {name!r}, which the module does not define")
        member = module.members[name]
        if (not member.is_alias and member.is_module) or by_path.get(_canonical(member)) is not None:
            continue  # a module: it has its own section
        if exported_above(module, name, by_path):
            continue
        out.append(name)
    return out


def api_pages():
    """{page path: markdown} for the API reference, and the nav entries in order."""
    pages, nav = {}, []
    groups = {}
    mods = public_modules()
    by_path = {m.path: m for m in mods}
    for m in mods:
        parts = m.path.split(".")
        top = "decodelab" if len(parts) == 1 else ".".join(parts[:2])
        groups.setdefault(top, []).append(m)
    for top, mods in groups.items():
        sections = []
        for m in mods:
            # Every module shows its docstring; a module whose names are all re-exported above
            # shows nothing more.
            names = documented_names(m, by_path)
            members = "".join(f"\n          - {n}" for n in names) if names else " false"
            sections.append(f"::: {m.path}\n    options:\n      members:{members}\n")
        path = f"api/{top}.md"
        pages[path] = f"# {top}\n\n" + "\n".join(sections)
        nav.append({top: path})
    index = ["# API reference", "",
             "Generated from the docstrings of every public module. Each name is documented once, on",
             "the page of the shallowest module that exports it: `decodelab.samplers.TopP` rather than",
             "`decodelab.samplers.warpers.TopP`.", ""]
    index += [f"- [{list(e)[0]}]({list(e.values())[0].split('/', 1)[1]})" for e in nav]
    pages["api/index.md"] = "\n".join(index) + "\n"
    return pages, [{"Overview": "api/index.md"}] + nav


# ---------------------------------------------------------------------------------------------
# Lessons: each notebook executed once per process (mkdocs serve rebuilds reuse it).

_executed = {}


def lesson_paths():
    return sorted(os.path.join(NOTEBOOKS, f) for f in os.listdir(NOTEBOOKS) if f.endswith(".ipynb"))


# An exercise is three cells in a row: a code cell tagged "exercise" where the student writes the
# answer (``...`` until then), a code cell tagged "check" that calls decodelab.testing.exercises.check,
# and a markdown cell tagged "solution": a collapsed <details> block holding one ```python block.
_SOLUTION = re.compile(r"<details>\s*<summary>[^<]*</summary>\s*```python\n(.*?)```\s*</details>\s*$", re.S)


def lesson_exercises(nb):
    """[(exercise index, check index, solution code)] of a lesson, in order; ValueError naming the
    cell when the three cells are not as described above."""
    out = []
    for i, cell in enumerate(nb.cells):
        tags = cell.metadata.get("tags", [])
        if "exercise" not in tags:
            if ("check" in tags or "solution" in tags) and not (out and i in (out[-1][0] + 1, out[-1][1] + 1)):
                raise ValueError(f"cell {i}: a check or solution cell must follow an exercise cell")
            continue
        if i + 2 >= len(nb.cells) or cell.cell_type != "code" or "..." not in cell.source:
            raise ValueError(f"cell {i}: an exercise is a code cell with ... for the answer, then a check and a solution")
        check, solution = nb.cells[i + 1], nb.cells[i + 2]
        if check.cell_type != "code" or "check" not in check.metadata.get("tags", []) or "check(" not in check.source:
            raise ValueError(f"cell {i + 1}: the cell after an exercise must be a code cell tagged check calling check(...)")
        m = _SOLUTION.search(solution.source)
        if solution.cell_type != "markdown" or "solution" not in solution.metadata.get("tags", []) or not m:
            raise ValueError(f"cell {i + 2}: the cell after a check must be a markdown cell tagged solution "
                             "holding <details><summary>...</summary> and one ```python block")
        out.append((i, i + 1, m.group(1)))
    return out


def with_solutions(nb):
    """A copy of the lesson with each exercise cell's answer replaced by its worked solution (the
    student's version kept in the cell's metadata for for_readers)."""
    import copy

    nb = copy.deepcopy(nb)
    for i, _, code in lesson_exercises(nb):
        nb.cells[i].metadata["decodelab_exercise"] = nb.cells[i].source
        nb.cells[i].source = code.rstrip("\n")
    return nb


def for_readers(nb):
    """An executed lesson as students see it: exercise cells back to ``...``, exercise and check
    cells without outputs (the solutions' run stays a test, not a page)."""
    import copy

    nb = copy.deepcopy(nb)
    for cell in nb.cells:
        if "decodelab_exercise" in cell.metadata:
            cell.source = cell.metadata.pop("decodelab_exercise")
        if cell.cell_type == "code" and {"exercise", "check"} & set(cell.metadata.get("tags", [])):
            cell.outputs, cell.execution_count = [], None
    return nb


def explanation_words(nb):
    """Words of explanation in a lesson: runs of letters in its markdown cells, leaving out the
    solutions, fenced and inline code, math, HTML tags and link targets."""
    words = 0
    for cell in nb.cells:
        if cell.cell_type != "markdown" or "solution" in cell.metadata.get("tags", []):
            continue
        text = re.sub(r"```.*?```|\$\$.*?\$\$|\$[^$\n]+\$|`[^`\n]*`|<[^>\n]+>|\]\([^)\s]*\)", " ", cell.source, flags=re.S)
        words += len(re.findall(r"[^\W\d_]+(?:['’-][^\W\d_]+)*", text))
    return words


def lesson_missing_models(path):
    """The fetched models (decodelab.testing.fetched_model names) a lesson loads that
    ../shared/models/fetch has not put in place; such a lesson cannot run here."""
    import nbformat
    from decodelab.testing import fetched_model

    nb = nbformat.read(path, as_version=4)
    names = re.findall(r"fetched_model\(\s*[\"']([^\"']+)[\"']", "\n".join(c.source for c in nb.cells if c.cell_type == "code"))
    return sorted({n for n in names if fetched_model(n) is None})


def execute_lesson(path):
    """The notebook at `path` run top to bottom in its own folder with its exercises answered by
    their solutions (which the check cells then judge, strictly), as a nbformat object. Widgets
    are dropped afterwards, their text kept: a static page cannot run them, and their scripts would
    come from a CDN."""
    import nbclient
    import nbformat

    nb = with_solutions(nbformat.read(path, as_version=4))
    before = os.environ.get("DECODELAB_EXERCISES")
    os.environ["DECODELAB_EXERCISES"] = "solutions"  # the kernel inherits it
    try:
        nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                resources={"metadata": {"path": os.path.dirname(path)}}).execute()
    finally:
        if before is None:
            os.environ.pop("DECODELAB_EXERCISES", None)
        else:
            os.environ["DECODELAB_EXERCISES"] = before
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            out.get("data", {}).pop("application/vnd.jupyter.widget-view+json", None)
    return nb


def lessons_folder():
    """A new temporary folder laid out as docs/ would hold the lessons, lessons/NAME.ipynb, each
    executed: copied from DECODELAB_DOCS_NOTEBOOKS where set (the test suite's notebook run, left
    as it is), else run here. mkdocs-jupyter reads notebooks from disk, hence files."""
    given = os.environ.get("DECODELAB_DOCS_NOTEBOOKS")
    if given:
        missing = [p for p in lesson_paths() if not os.path.exists(os.path.join(given, os.path.basename(p)))]
        if missing:
            raise ValueError(f"DECODELAB_DOCS_NOTEBOOKS={given!r} lacks {', '.join(map(os.path.basename, missing))}")
    import nbformat

    out = tempfile.mkdtemp(prefix="decodelab-lessons-")
    os.makedirs(os.path.join(out, "lessons"))
    for p in lesson_paths():
        dst = os.path.join(out, "lessons", os.path.basename(p))
        if given:
            nbformat.write(for_readers(nbformat.read(os.path.join(given, os.path.basename(p)), as_version=4)), dst)
            continue
        with open(p, "rb") as f:
            key = hashlib.sha256(f.read()).hexdigest()
        if key not in _executed:
            _executed[key] = nbformat.writes(for_readers(execute_lesson(p)))
        with open(dst, "w", encoding="utf-8") as f:
            f.write(_executed[key])
    return out


def lesson_title(path):
    with open(path, encoding="utf-8") as f:
        nb = json.load(f)
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            for line in "".join(cell["source"]).splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return os.path.basename(path)


# ---------------------------------------------------------------------------------------------
# Benchmarks page: the latest speed tables and a plot of the ratios against llama.cpp.

# Newest first: a model's ratios in the plot come from the first file here that ran it.
SPEED_FILES = [
    ("bench_speed_fetched_warm.json", "The three real GGUF files against llama.cpp, every load from a warm page cache"),
    ("bench_speed_fetched_rows.json", "The three real GGUF files against llama.cpp, embedding rows read with pread"),
    ("bench_speed_fetched_pack.json", "The three real GGUF files against llama.cpp, after one-pass packing at load"),
    ("bench_speed_fetched_5bit.json", "Qwen2.5-Coder-0.5B and Gemma 3 270M with their 5-bit layers in 5 bits"),
    ("bench_speed_fetched.json", "Real GGUF files against llama.cpp (before 5-bit layers: the 1.5B row stands)"),
    ("bench_speed_shapes_8b.json", "A random checkpoint of the Llama 3 8B shape as GGUF (bf16 folder, streamed)"),
    ("bench_speed_shapes.json", "Random checkpoints of the Llama 3.2 1B and Qwen2.5 3B shapes as GGUF"),
    ("bench_speed_shapes_q4_0.json", "The Q4_0 shapes, rerun"),
    ("bench_speed.json", "Small models against every peer"),
]
COLUMNS = [("prefill_tok_s", "prompt tok/s"), ("decode_tok_s", "decode tok/s"),
           ("batch16_tok_s", "16 sequences tok/s"), ("peak_rss_mib", "peak RSS MiB"), ("load_s", "load s")]


def _fmt(v):
    if v is None or v != v:
        return ""
    return f"{v:,.0f}" if v >= 100 else f"{v:.3g}"


def speed_table(data):
    cols = [c for c in COLUMNS if any(r.get(c[0]) is not None for r in data["rows"])]
    lines = ["| model | engine | weights | KV cache | " + " | ".join(h for _, h in cols) + " |",
             "|---|---|---|---|" + "---:|" * len(cols)]
    for r in data["rows"]:
        if r.get("error"):
            continue
        cells = [r["model"], r["engine"], r["dtype"], r.get("kv_cache", "")] + [_fmt(r.get(k)) for k, _ in cols]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def llama_cpp_ratios(data):
    """(model, {measure: decodelab / llama.cpp}) for each model with one row of each engine."""
    out = []
    by_model = {}
    for r in data["rows"]:
        if not r.get("error"):
            by_model.setdefault(r["model"], {}).setdefault(r["engine"], []).append(r)
    for model, engines in by_model.items():
        ours, peer = engines.get("decodelab"), engines.get("llama.cpp")
        if not ours or not peer or len(ours) != 1 or len(peer) != 1:
            continue
        out.append((model, {h: ours[0][k] / peer[0][k] for k, h in COLUMNS[:3] if ours[0].get(k) and peer[0].get(k)}))
    return out


def ratio_svg(ratios):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    measures = [h for _, h in COLUMNS[:3]]
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(ratios) + 2))
    h = 0.8 / len(measures)
    for j, m in enumerate(measures):
        ys = [i + j * h for i in range(len(ratios))]
        ax.barh(ys, [r.get(m, 0) for _, r in ratios], height=h, label=m)
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_yticks([i + h for i in range(len(ratios))], [m for m, _ in ratios])
    ax.invert_yaxis()
    ax.set_xlabel("decodelab / llama.cpp (higher is faster for decodelab)")
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=len(measures), frameon=False)
    fig.tight_layout()
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None})
    plt.close(fig)
    return buf.getvalue()


def benchmarks_page():
    intro = ["# Benchmarks", "",
             "The latest runs of `benchmarks/bench_speed.py`, read from `benchmarks/results/` when this",
             "site was built. Each engine ran in its own process on the same host with the same threads;",
             "compare rows only within one table (one run). How to run them: the",
             "[performance guide](guide/performance.md).", ""]
    tables = []
    ratios = {}  # model -> ratios from the newest file that ran it (SPEED_FILES lists the newest first)
    for name, title in SPEED_FILES:
        path = os.path.join(RESULTS, name)
        if not os.path.exists(path):
            continue
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        if name != "bench_speed.json":
            for model, r in llama_cpp_ratios(data):
                ratios.setdefault(model, r)
        host = data.get("host", {})
        tables += [f"## {title}", "",
                   f"`{name}`: {host.get('cpu', 'unknown CPU')}, {host.get('cpus_available', '?')} cores, "
                   f"command `python {' '.join(data.get('argv', []))}`.", "", speed_table(data), ""]
    plot = ["## Ratios against llama.cpp", "",
            "![decodelab against llama.cpp, prompt, decode and 16 sequences](benchmarks-ratios.svg)", ""]
    page = "\n".join(intro + (plot if ratios else []) + tables) + "\n"
    return page, (ratio_svg(list(ratios.items())) if ratios else None)


# ---------------------------------------------------------------------------------------------
# MkDocs events.

_lessons = []
_lessons_dir = None
_api = ({}, [])  # api_pages() of this build: made in on_config, used in on_files


def on_config(config):
    global _lessons, _api
    _lessons = lesson_paths()
    _api = api_pages()
    nav = config["nav"]
    at = next(i for i, e in enumerate(nav) if "Benchmarks" in e)
    lessons = [{"Overview and course path": "lessons/index.md"}]
    lessons += [{lesson_title(p): f"lessons/{os.path.basename(p)}"} for p in _lessons]
    nav[at:at] = [{"Lessons": lessons}, {"API reference": _api[1]}]
    return config


@event_priority(100)  # before mkdocs-jupyter's on_files, which turns .ipynb files into pages
def on_files(files, config):
    global _lessons_dir
    for path, text in _api[0].items():
        files.append(File.generated(config, path, content=text))
    with open(os.path.join(NOTEBOOKS, "README.md"), encoding="utf-8") as f:  # the lessons' index
        files.append(File.generated(config, "lessons/index.md", content=f.read().replace("# Notebooks", "# Lessons", 1)))
    _lessons_dir = lessons_folder()
    for p in _lessons:
        files.append(File(f"lessons/{os.path.basename(p)}", _lessons_dir, config["site_dir"], config["use_directory_urls"]))
    page, svg = benchmarks_page()
    files.append(File.generated(config, "benchmarks.md", content=page))
    if svg:
        files.append(File.generated(config, "benchmarks-ratios.svg", content=svg))
    return files


def on_shutdown():
    if _lessons_dir:
        shutil.rmtree(_lessons_dir, ignore_errors=True)


def on_post_build(config):
    import importlib.util

    # The package's files only: importing it would start loading jupyter_server.
    src = os.path.join(importlib.util.find_spec("jupyter_server_mathjax").submodule_search_locations[0], "static")
    dst = os.path.join(config["site_dir"], "assets", "mathjax")
    shutil.copytree(src, dst, dirs_exist_ok=True)
    # The package holds the STIX-Web fonts only; MathJax would otherwise ask for its TeX fonts.
    os.makedirs(os.path.join(dst, "config", "local"), exist_ok=True)
    with open(os.path.join(dst, "config", "local", "decodelab.js"), "w", encoding="utf-8") as f:
        # MathJax_Blank, its measuring font, is a url('about:blank') that Chromium refuses with a
        # console error; local() names it without a request.
        f.write('MathJax.Hub.Config({"HTML-CSS": {availableFonts: [], preferredFont: null, webFont: "STIX-Web", '
                'imageFont: null, styles: {"@font-face": {"font-family": "MathJax_Blank", '
                'src: "local(\\"MathJax_Blank\\")"}}}});\n'
                'MathJax.Ajax.loadComplete("[MathJax]/config/local/decodelab.js");\n')
