"""The lessons' exercise checks: right answers pass, wrong ones raise saying what differs, an
unanswered one waits (or fails while the solutions are checked); and the lesson format's parser
rejects an exercise without its check or solution."""
import numpy as np
import pytest

from conftest import docs_hooks
from decodelab.testing.exercises import check

nbformat = pytest.importorskip("nbformat", reason="the lesson format is read with nbformat (in the test extra)")
hooks = docs_hooks()


def test_right_answers_pass(capsys):
    assert check("E", 0.5000001, 0.5)
    assert check("E", [1, 2.0], np.array([1.0, 2.0]))
    assert check("E", ["a", 2], ("a", 2.0))
    assert check("E", {"x": 1.0}, {"x": 1})
    assert check("E", "Paris", "Paris")
    assert check("E", True, np.bool_(True))
    assert check("E", 12, lambda a: None if a % 3 == 0 else "not a multiple of 3")
    assert capsys.readouterr().out.count("E: correct.") == 7


@pytest.mark.parametrize("answer, expected, says", [
    (0.6, 0.5, "got 0.6, expected about 0.5"),
    ("0.5", 0.5, "expected a number"),
    (True, 1, "expected a number"),
    ([1.0, 2.5], np.array([1.0, 2.0]), "1 of 2 entries differ; at index (1,)"),
    ([1.0], np.array([1.0, 2.0]), "expected shape (2,)"),
    ({1, 3}, {1, 2}, "missing [2]; should not contain [3]"),
    ([1, 2], [1, 2, 3], "expected 3 items"),
    ({"x": 2}, {"x": 1}, "['x']: got 2"),
    ("paris", "Paris", "got 'paris', expected 'Paris'"),
    (5, lambda a: "odd" if a % 2 else None, "odd"),
])
def test_wrong_answers_say_what_differs(answer, expected, says):
    with pytest.raises(AssertionError, match="E: not yet right: ") as e:
        check("E", answer, expected, hint="look again")
    assert says in str(e.value) and str(e.value).endswith("Hint: look again")


def test_unanswered_waits_unless_the_solutions_are_checked(capsys, monkeypatch):
    monkeypatch.delenv("DECODELAB_EXERCISES", raising=False)
    assert check("E", ..., 1) is False
    assert check("E", (1.0, ...), (1.0, 2.0)) is False and check("E", {"x": ...}, {"x": 1}) is False
    assert capsys.readouterr().out.count("not answered yet") == 3
    monkeypatch.setenv("DECODELAB_EXERCISES", "solutions")
    with pytest.raises(AssertionError, match="not answered"):
        check("E", ..., 1)


def _lesson(*cells):
    nb = nbformat.v4.new_notebook()
    nb.cells = list(cells)
    return nb


EXERCISE = nbformat.v4.new_code_cell("x = ...", metadata={"tags": ["exercise"]})
CHECK = nbformat.v4.new_code_cell("check('E', x, 2)", metadata={"tags": ["check"]})
SOLUTION = nbformat.v4.new_markdown_cell("<details>\n<summary>Solution</summary>\n\n```python\nx = 1 + 1\n```\n\n</details>",
                                         metadata={"tags": ["solution"]})


def test_the_lesson_format():
    nb = _lesson(nbformat.v4.new_markdown_cell("# 1. T"), EXERCISE, CHECK, SOLUTION)
    assert hooks.lesson_exercises(nb) == [(1, 2, "x = 1 + 1\n")]
    solved = hooks.with_solutions(nb)
    assert solved.cells[1].source == "x = 1 + 1" and nb.cells[1].source == "x = ..."
    solved.cells[1].outputs = solved.cells[2].outputs = [nbformat.v4.new_output("stream", text="E: correct.\n")]
    readers = hooks.for_readers(solved)
    assert readers.cells[1].source == "x = ..." and not readers.cells[1].outputs and not readers.cells[2].outputs
    for bad in [(EXERCISE, SOLUTION, CHECK), (EXERCISE, CHECK), (CHECK, SOLUTION),
                (nbformat.v4.new_code_cell("x = 2", metadata={"tags": ["exercise"]}), CHECK, SOLUTION)]:
        with pytest.raises(ValueError, match="cell "):
            hooks.lesson_exercises(_lesson(*bad))


def test_words_of_explanation_leave_out_code_math_and_solutions():
    nb = _lesson(nbformat.v4.new_markdown_cell("One two, three's well-known [link](http://x.y/z).\n\n"
                                               "```python\nnot counted\n```\n$p_i = e^{z}$ and `code` <b>bold</b>\n"
                                               "$$\\frac{a}{b}$$ 42"), SOLUTION)
    assert hooks.explanation_words(nb) == 7  # One, two, three's, well-known, link, and, bold
