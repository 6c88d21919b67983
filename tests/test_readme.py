"""README.md's set-up commands stay true (CI runs exactly the second one), and its example prints what
it shows."""
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _commands():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    block = text.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


def test_readme_starts_with_two_commands_and_ci_runs_the_test_one():
    cmds = _commands()
    assert len(cmds) == 2
    assert "generate" in cmds[0] and "../shared" not in cmds[0]  # the built-in model: no files needed
    assert "pytest" in cmds[1]
    with open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8") as f:
        ci = f.read()
    assert cmds[1] in ci.splitlines()


def test_the_example_prints_what_readme_shows(capsys):
    """The README's example prints exactly the output block under it (int8 weights: the same
    tokens on every CPU). pytest-markdown-docs runs the block too; this compares what it prints."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    code = text.split("```python\n", 1)[1].split("```", 1)[0]
    shown = text.split("```python\n", 1)[1].split("```text\n", 1)[1].split("```", 1)[0]
    exec(compile(code, "README.md", "exec"), {})
    assert capsys.readouterr().out == shown
