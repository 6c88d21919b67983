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


@pytest.mark.slow
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


def _cli(*args, **kw):
    return subprocess.run([sys.executable, "-m", "decodelab", *args], capture_output=True, text=True, **kw)


def test_cli_version_and_positional_model(stories_bin):
    out = _cli("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"decodelab {decodelab.__version__}"
    a = _cli("generate", stories_bin, "Once upon a time", "--max-new-tokens", "12")
    b = _cli("generate", "--model", stories_bin, "Once upon a time", "--max-new-tokens", "12")
    assert a.returncode == 0 and a.stdout == b.stdout
    assert _cli("generate", stories_bin).stderr.startswith("decodelab: error: give a model and a prompt")


def test_cli_prints_the_seed_of_an_unseeded_sample(stories_bin):
    out = _cli("generate", stories_bin, "Once upon a time", "--temperature", "0.9", "--max-new-tokens", "30")
    assert out.returncode == 0
    seed = int(out.stderr.split("seed ")[1].split(";")[0])
    again = _cli("generate", stories_bin, "Once upon a time", "--temperature", "0.9", "--max-new-tokens", "30",
                 "--seed", str(seed))
    assert again.stdout == out.stdout and f"seed {seed}" in again.stderr


def test_cli_errors_name_the_cli_option(checkpoint, tmp_path):
    out = _cli("generate", checkpoint("llama-tiny"), "hi")
    assert out.returncode == 2 and "pass --tokenizer PATH" in out.stderr and "Traceback" not in out.stderr
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "x").write_text("keep me")
    out = _cli("make-checkpoint", "llama-tiny", str(tmp_path / "taken"))
    assert out.returncode == 2 and "--force" in out.stderr
    assert (tmp_path / "taken" / "x").read_text() == "keep me"
    out = _cli("make-checkpoint", "llama-tiny", str(tmp_path / "taken"), "--force")
    assert out.returncode == 0 and "random weights" in out.stderr  # the progress bar
    gen = _cli("generate", str(tmp_path / "taken"), "any text", "--max-new-tokens", "3")
    assert gen.returncode == 0 and gen.stdout.startswith("any text")  # make-checkpoint wrote a tokenizer


def test_cli_ctrl_c_keeps_the_text_and_exits_130(tmp_path, sigint):
    # A model slow enough that the stream is still running when SIGINT arrives.
    import signal
    import time

    from decodelab import testing

    shape = dict(arch="llama", hidden_size=256, intermediate_size=768, num_hidden_layers=6, num_attention_heads=8,
                 num_key_value_heads=4, vocab_size=512, max_position_embeddings=4096, tie_word_embeddings=False)
    d = testing.write_checkpoint(str(tmp_path / "m"), shape, byte_tokenizer=True)
    p = subprocess.Popen([sys.executable, "-m", "decodelab", "generate", d, "Hello", "--max-new-tokens", "4000",
                          "--threads", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = p.stdout.read(5)  # the prompt arrives first, then the stream: generation is under way
    assert first == b"Hello"
    time.sleep(0.5)
    p.send_signal(signal.SIGINT)
    rest, err = p.communicate(timeout=60)
    assert p.returncode == 130, err.decode()
    assert b"Traceback" not in err and b"stopped by Ctrl-C" in err
    assert len(rest) > 10  # streamed pieces were printed before the interrupt
