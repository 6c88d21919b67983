"""Every teaching notebook runs top to bottom from a clean state and draws its figures. The run is
shared with the documentation site's build (tests/test_docs.py), which shows these outputs."""
import glob
import os

import pytest

pytestmark = pytest.mark.notebook

nbformat = pytest.importorskip("nbformat", reason="notebook tests need nbformat (in the test extra)")
pytest.importorskip("nbclient", reason="notebook tests need nbclient (in the test extra)")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = sorted(glob.glob(os.path.join(ROOT, "notebooks", "*.ipynb")))


def test_there_are_notebooks():
    assert len(NOTEBOOKS) == 15


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_notebook_runs_and_draws(path, executed_lessons):
    committed = nbformat.read(path, as_version=4)
    # Committed notebooks carry no outputs.
    assert all(not c.get("outputs") and c.get("execution_count") is None
               for c in committed.cells if c.cell_type == "code")
    assert "What to try next" in committed.cells[-1].source
    nb = executed_lessons(path)  # run once per session; the site build shows the same run
    images = sum(1 for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
                 if "image/png" in o.get("data", {}))
    assert images >= 1, "the notebook drew no figure"
    print(f"{os.path.basename(path)}: {executed_lessons.seconds[path]:.1f} s, {images} figures")
