"""load() under a seeded mutation fuzzer over every loader: each damaged file gives ValueError or
a model that runs, never another exception or a crash. The cases run in a child process, which
prints each case before trying it, so a crash names the case that caused it."""
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.fuzz

CHILD = """
import os, random, shutil, sys, traceback
sys.path.insert(0, {tests!r})
import decodelab
from mutations import mutate_bytes, mutate_json_text, mutate_safetensors

hf, l2c, work = {hf!r}, {l2c!r}, {work!r}
targets = [
    ("config.json", hf, "config.json", mutate_json_text, 90),
    ("safetensors", hf, "model.safetensors", mutate_safetensors, 90),
    ("generation_config.json", hf, "generation_config.json", mutate_json_text, 20),
    ("llama2c checkpoint", l2c, "stories260K.bin", mutate_bytes, 50),
    ("llama2c tokenizer", l2c, "tok512.bin", mutate_bytes, 50),
]
bad, loaded = [], 0
for label, src, name, mutate, count in targets:
    for i in range(count):
        rng = random.Random(f"{{label}}-{{i}}")
        case = os.path.join(work, f"case")
        shutil.rmtree(case, ignore_errors=True)
        shutil.copytree(src, case)
        with open(os.path.join(src, name), "rb") as f:
            data = f.read()
        with open(os.path.join(case, name), "wb") as f:
            f.write(mutate(data, rng))
        print(label, i, flush=True)
        path = case if src == hf else os.path.join(case, "stories260K.bin")
        try:
            m = decodelab.load(path, threads=1)
            m.generate([1, 2], max_new_tokens=2)
            if m.tokenizer is not None:
                m.tokenizer.decode(m.tokenizer.encode("Once upon a time"))
            loaded += 1
        except ValueError:
            pass
        except Exception:
            bad.append((label, i, traceback.format_exc(limit=3)))
print("CASES", sum(t[4] for t in targets), "BAD", len(bad), "LOADED", loaded)
for b in bad[:5]:
    print(b)
"""


def test_load_raises_only_value_error_on_mutated_files(checkpoint, stories_bin, tmp_path):
    hf = tmp_path / "hf"
    shutil.copytree(checkpoint("llama-tiny"), hf)
    (hf / "generation_config.json").write_text('{"eos_token_id": 2, "bos_token_id": 1}')
    l2c = tmp_path / "l2c"
    l2c.mkdir()
    for f in ("stories260K.bin", "tok512.bin"):
        shutil.copy(os.path.join(os.path.dirname(stories_bin), f), l2c / f)
    code = CHILD.format(tests=os.path.dirname(__file__), hf=str(hf), l2c=str(l2c), work=str(tmp_path))
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=600)
    last = p.stdout.strip().splitlines()[-1:] or ["(no output)"]
    assert p.returncode == 0, f"the child died (status {p.returncode}) at case {last}:\n{p.stderr[-3000:]}"
    assert "BAD 0" in p.stdout, p.stdout[-5000:]
    assert "CASES 300" in p.stdout
    loaded = int(p.stdout.split("LOADED")[1].split()[0])
    assert 0 < loaded < 200, loaded  # most damage is refused; some (a flipped weight byte) still loads
