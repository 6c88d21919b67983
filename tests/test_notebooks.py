"""Every teaching notebook runs top to bottom from a clean state and draws its figures; each
exercise's worked solution passes its check cell; an unanswered notebook still runs; and the
lessons table in notebooks/README.md states each lesson's words, figures and exercises as they are.
The run is shared with the documentation site's build (tests/test_docs.py), which shows it."""
import ast
import glob
import os
import re

import pytest

pytestmark = pytest.mark.notebook

nbformat = pytest.importorskip("nbformat", reason="notebook tests need nbformat (in the test extra)")
pytest.importorskip("nbclient", reason="notebook tests need nbclient (in the test extra)")

from conftest import ROOT, docs_hooks  # noqa: E402

NOTEBOOKS = sorted(glob.glob(os.path.join(ROOT, "notebooks", "*.ipynb")))

hooks = docs_hooks()


def lessons_table():
    """{notebook file: {column: cell}} from the table in notebooks/README.md."""
    with open(os.path.join(ROOT, "notebooks", "README.md"), encoding="utf-8") as f:
        text = f.read().splitlines()
    lines = [ln for ln in text if ln.startswith("| `")]
    header = next(ln for ln in text if ln.startswith("| notebook"))
    cols = [c.strip() for c in header.strip("|").split("|")]
    rows = {}
    for ln in lines:
        cells = [c.strip() for c in ln.strip("|").split("|")]
        rows[cells[0].strip("`")] = dict(zip(cols, cells))
    return rows


def test_every_notebook_is_in_the_lessons_table():
    assert sorted(lessons_table()) == [os.path.basename(p) for p in NOTEBOOKS]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_lesson_form(path):
    """Committed without outputs; opens with what the student will be able to do and should know
    first, has a summary and ends with what to try next; at least 1,000 words of explanation and two
    to four well-formed exercises, as the table says; and no cell after an exercise needs its answer
    (so the notebook runs before it is answered)."""
    nb = nbformat.read(path, as_version=4)
    assert all(not c.get("outputs") and c.get("execution_count") is None
               for c in nb.cells if c.cell_type == "code")
    opening = nb.cells[0].source
    assert opening.startswith("# ") and "able to" in opening and "know first" in opening.lower()
    assert any(c.cell_type == "markdown" and "## Summary" in c.source for c in nb.cells)
    assert "What to try next" in nb.cells[-1].source
    exercises = hooks.lesson_exercises(nb)
    words = hooks.explanation_words(nb)
    assert words >= 1000 and 2 <= len(exercises) <= 4, (words, len(exercises))
    row = lessons_table()[os.path.basename(path)]
    assert int(row["words"].replace(",", "")) == words
    assert int(row["exercises"]) == len(exercises)
    answered = set()
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        tags = cell.metadata.get("tags", [])
        tree = ast.parse("\n".join(ln for ln in cell.source.splitlines() if not ln.lstrip().startswith(("%", "!"))))
        if "exercise" in tags:
            answered |= {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        elif "check" not in tags:
            used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
            assert not used & answered, f"cell {i} uses {sorted(used & answered)}, which only an exercise defines"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_notebook_runs_and_draws(path, executed_lessons):
    nb = executed_lessons(path)  # run once per session, solutions in; the site build shows the same run
    images = sum(1 for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
                 if "image/png" in o.get("data", {}))
    assert images >= 1, "the notebook drew no figure"
    for i, cell in enumerate(nb.cells):
        if "check" in cell.metadata.get("tags", []):
            text = "".join(o.get("text", "") for o in cell.outputs if o.get("output_type") == "stream")
            assert re.search(r": correct\.", text) and "not answered" not in text, f"check cell {i} printed {text!r}"
    assert int(lessons_table()[os.path.basename(path)]["figures"]) == images
    committed = nbformat.read(path, as_version=4)
    print(f"{os.path.basename(path)}: {executed_lessons.seconds[path]:.1f} s, {images} figures, "
          f"{hooks.explanation_words(committed)} words, {len(hooks.lesson_exercises(committed))} exercises")
