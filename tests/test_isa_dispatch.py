"""One build, every instruction set: a portable build holds the kernels for generic x86-64, AVX2,
AVX-512 and AVX-512 VNNI and runs the best one the CPU has; DECODELAB_ISA caps the choice. At each
level this machine runs, greedy tokens are the same and logits agree within fp32 rounding."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import decodelab

LEVELS = ["generic", "avx2", "avx512", "avx512_vnni"]
info = decodelab.cpu_info()
portable = pytest.mark.skipif(not info["portable"], reason="a DECODELAB_NATIVE_ARCH build holds one variant only")

# A child process at one level: greedy tokens and logits of stories260K (fp32 and int8) and of a
# random Qwen2 checkpoint (q/k/v biases, GQA) written by the parent.
CHILD = r"""
import json, sys
import numpy as np
import decodelab
out = {"info": decodelab.cpu_info()}
ids = [1, 403, 407, 261, 378, 434, 1009 % 512, 290]
for name, path, dtype in [("stories", "stories260K", "float32"), ("stories_int8", "stories260K", "int8"),
                          ("qwen", sys.argv[1], "float32"), ("qwen_int4", sys.argv[1], "int4")]:
    m = decodelab.load(path, dtype=dtype)
    out[name] = {"tokens": m.generate(ids, max_new_tokens=24, eos_token_id=[]).token_ids,
                 "logits": m.forward(ids).tolist()}
print(json.dumps(out))
"""


def _run(level, folder):
    env = {"DECODELAB_ISA": level} if level else {}
    r = subprocess.run([sys.executable, "-c", CHILD, folder], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, **env))
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_cpu_info_says_what_runs():
    assert info["chosen"] in info["compiled"] and info["chosen"] in info["supported"]
    assert info["supported"][0] == "generic" and all(s in LEVELS for s in info["supported"])
    if info["portable"]:
        assert info["compiled"] == LEVELS
        # the best variant the CPU runs, unless capped
        if info["cap"] is None:
            assert info["chosen"] == info["supported"][-1]


@pytest.mark.slow
@portable
def test_each_level_gives_the_same_tokens(checkpoint):
    folder = str(checkpoint("qwen2-tiny"))
    runs = {level: _run(level, folder) for level in info["supported"]}
    top = runs[info["supported"][-1]]
    for level, r in runs.items():
        assert r["info"]["chosen"] == level and r["info"]["cap"] == level
        for name in ("stories", "stories_int8", "qwen", "qwen_int4"):
            assert r[name]["tokens"] == top[name]["tokens"], (level, name)
            a, b = np.asarray(r[name]["logits"]), np.asarray(top[name]["logits"])
            # fp32: FMA against separate multiply and add; int8/int4: the same integers, scaled
            tol = 1e-4 if name in ("stories", "qwen") else 2e-3
            assert np.abs(a - b).max() <= tol * max(1.0, np.abs(b).max()), (level, name, np.abs(a - b).max())


@pytest.mark.slow
@portable
def test_a_cap_above_the_cpu_takes_the_best_it_has(checkpoint):
    r = _run("avx512_vnni", str(checkpoint("qwen2-tiny")))
    assert r["info"]["chosen"] == info["supported"][-1] and r["info"]["cap"] == "avx512_vnni"


def test_an_unknown_level_is_refused_by_name():
    r = subprocess.run([sys.executable, "-c", "import decodelab"], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, DECODELAB_ISA="sse9"))
    assert r.returncode != 0
    assert "DECODELAB_ISA must be one of generic, avx2, avx512, avx512_vnni; got 'sse9'" in r.stderr


@pytest.mark.slow
@portable
@pytest.mark.parametrize("level", info["supported"][:info["supported"].index(info["chosen"])])
def test_the_kernel_tests_pass_at_each_lower_level(level):
    """The kernel tests (each kernel against its numpy emulation or fp32 reference) again, in a
    process capped at a lower instruction set: the plain C++ fallback, and AVX2 on AVX-512."""
    import os

    here = os.path.dirname(os.path.abspath(__file__))
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_kernels.py",
                        "test_gguf_blocks.py"], cwd=here, capture_output=True, text=True, timeout=900,
                       env=dict(os.environ, DECODELAB_ISA=level))
    assert r.returncode == 0, r.stdout[-3000:]
    assert " passed" in r.stdout.splitlines()[-1]
