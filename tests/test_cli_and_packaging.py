"""The CLI, the console script and the process's OpenMP runtime."""
import os
import shutil
import subprocess
import sys

import pytest

import decodelab


def test_python_m_generate(stories_bin):
    out = subprocess.run([sys.executable, "-m", "decodelab", "generate", "--model", stories_bin,
                          "--max-new-tokens", "20", "Once upon a time"], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("Once upon a time, there was a little girl")
    assert "20 generated" in out.stderr


def test_python_m_generate_with_reduced_precision(stories_bin):
    """--dtype and --cache-dtype reach load() and new_cache(): the same greedy text as the API with
    int8 weights and an int8 cache."""
    out = subprocess.run([sys.executable, "-m", "decodelab", "generate", "--model", stories_bin, "--dtype", "int8",
                          "--cache-dtype", "int8", "--max-new-tokens", "40", "Once upon a time"],
                         capture_output=True, text=True, check=True)
    m = decodelab.load(stories_bin, dtype="int8")
    g = m.generate("Once upon a time", max_new_tokens=40, cache=m.new_cache(dtype="int8"))
    assert out.stdout == "Once upon a time" + g.text + "\n"
    assert "weights int8, cache int8" in out.stderr
    bad = subprocess.run([sys.executable, "-m", "decodelab", "generate", "--model", stories_bin, "--cache-dtype", "int4",
                          "hi"], capture_output=True, text=True)
    assert bad.returncode == 2 and "invalid choice: 'int4'" in bad.stderr


def test_console_script_reports_errors_cleanly(tmp_path):
    exe = shutil.which("decodelab")
    assert exe is not None, "the decodelab console script is not on PATH"
    out = subprocess.run([exe, "generate", "--model", str(tmp_path / "missing"), "hi"], capture_output=True, text=True)
    assert out.returncode == 2
    assert "decodelab: error:" in out.stderr and "does not exist" in out.stderr


def test_cli_make_checkpoint_and_convert(tmp_path, stories_bin):
    subprocess.run([sys.executable, "-m", "decodelab", "make-checkpoint", "llama-tiny", str(tmp_path / "a")], check=True,
                   capture_output=True)
    assert decodelab.load(tmp_path / "a").config.n_layers == 2
    subprocess.run([sys.executable, "-m", "decodelab", "convert-llama2c", stories_bin, str(tmp_path / "b")], check=True,
                   capture_output=True)
    m = decodelab.load(tmp_path / "b")
    assert m.generate("Once upon a time", max_new_tokens=8).text.startswith(", there was")


def test_one_openmp_runtime_with_torch_loaded():
    # torch ships its own libgomp.so.1; with the same soname, the dynamic linker must load only
    # one, whichever package is imported first.
    code = (
        "import decodelab, torch, sys\n"
        "maps = open('/proc/self/maps').read().split('\\n')\n"
        "libs = {l.split()[-1] for l in maps if len(l.split()) >= 6 and 'omp' in l.split()[-1].rsplit('/', 1)[-1]}\n"
        "print('\\n'.join(sorted(libs)))\n"
    )
    for order in (code, code.replace("import decodelab, torch", "import torch, decodelab")):
        out = subprocess.run([sys.executable, "-c", order], capture_output=True, text=True, check=True)
        libs = [l for l in out.stdout.splitlines() if l.strip()]
        assert len(libs) == 1, f"more than one OpenMP runtime mapped: {libs}"


def test_build_flags():
    assert decodelab._core.built_with_cuda() in (True, False)
    if not decodelab._core.built_with_cuda():
        with pytest.raises(RuntimeError, match="built without CUDA"):
            decodelab._core.cuda_device_count()


def _cuda_devices():
    if not decodelab._core.built_with_cuda():
        return 0
    try:
        return decodelab._core.cuda_device_count()
    except RuntimeError:
        return 0


requires_cuda = pytest.mark.skipif(_cuda_devices() == 0, reason="needs a CUDA build (DECODELAB_WITH_CUDA=ON) "
                                   "and a visible CUDA device; the CPU path is tested everywhere")


@requires_cuda
def test_cuda_device_visible():
    assert decodelab._core.cuda_device_count() >= 1


def test_package_layout():
    pkg = os.path.dirname(decodelab.__file__)
    assert os.path.exists(os.path.join(pkg, "py.typed"))
