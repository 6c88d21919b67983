"""README.md's set-up commands stay true: CI runs exactly the second one."""
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


@pytest.mark.slow
def test_the_pytest_example_in_readme_passes(tmp_path):
    """The README's example test file runs through the installed plugin (its fixtures), in a fresh
    pytest process."""
    import subprocess
    import sys

    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    section = text.split("## Comparing samplers in pytest", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    assert code.startswith("# test_my_samplers.py")
    (tmp_path / "test_my_samplers.py").write_text(code, encoding="utf-8")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "6 passed" in r.stdout, r.stdout[-2000:]
