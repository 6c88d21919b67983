"""Shared fixtures: the shared real models and deterministic random-initialised checkpoints.

The shared models live in ../shared/models (override with DECODELAB_MODELS). Checkpoints are
written once per session into a temporary folder.
"""
import functools
import os
import signal
import time

import pytest

import decodelab
from decodelab import testing

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.environ.get("DECODELAB_MODELS", os.path.join(ROOT, "..", "shared", "models"))
STORIES_BIN = os.path.join(MODELS, "stories260K", "stories260K.bin")
STORIES_TOK = os.path.join(MODELS, "stories260K", "tok512.bin")
GPT2_TOKENIZER = os.path.join(MODELS, "gpt2-tokenizer")


# Packages a test may skip for when absent: benchmark peers with long builds, not declared in the
# test extra. A skip for any other missing package fails, naming it: every package the tests
# import is declared in pyproject.toml's test extra, so a fresh machine runs every test.
MAY_BE_ABSENT = {"llama_cpp"}
_importorskip = pytest.importorskip


def _importorskip_declared(modname, *args, **kwargs):
    __tracebackhide__ = True  # report the skip or failure at the test's own line
    try:
        return _importorskip(modname, *args, **kwargs)
    except pytest.skip.Exception as skip:
        missing = getattr(skip.__context__, "name", None) or modname
        if missing.split(".")[0] in MAY_BE_ABSENT:
            raise
        pytest.fail(f"{missing!r} is not installed: declare it in pyproject.toml's test extra "
                    f"(the test would have skipped: {skip})", pytrace=False)


pytest.importorskip = _importorskip_declared


# The atheris fuzz drivers are run by hand, not collected (pytest-markdown-docs would import them).
collect_ignore_glob = ["fuzz_*_atheris.py"]

# Markers that keep a test out of the fast loop (`pytest -m "not slow"`) by themselves.
SLOW_KINDS = ("notebook", "fuzz", "browser", "docs")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if any(item.get_closest_marker(kind) for kind in SLOW_KINDS) and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow)


def pytest_report_header(config):
    """Which kernel variant the run tests (the CPU's best, or DECODELAB_ISA's cap), and where from."""
    info = decodelab.cpu_info()
    return [f"decodelab {decodelab.__file__}",
            f"kernels: {info['chosen']} chosen of {', '.join(info['supported'])} supported "
            f"(detected: {', '.join(info['detected']) or 'none'}; cap: {info['cap']})"]


def _need(path):
    if not os.path.exists(path):
        pytest.skip(f"shared model file {path} is absent (set DECODELAB_MODELS to the models folder)")
    return path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_cli(*args, wait_s: float = 60.0):
    """`python -m decodelab serve ARGS --port P` in a process of its own, once /health answers 200:
    (the Popen, with stdout and stderr piped as text, and its base URL http://127.0.0.1:P)."""
    import subprocess
    import sys

    import httpx

    port = free_port()
    p = subprocess.Popen([sys.executable, "-m", "decodelab", "serve", *map(str, args), "--port", str(port)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and p.poll() is None:
        try:
            if httpx.get(base + "/health", timeout=1).status_code == 200:
                return p, base
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    p.kill()
    _, err = p.communicate(timeout=30)
    raise AssertionError(f"decodelab serve {' '.join(map(str, args))} did not answer /health: {err[-2000:]}")


@pytest.fixture(scope="module")
def one_gguf_parse():
    """Within a module, gguf's reader parses each file once. transformers parses a GGUF file for the
    config, again for the weights and again for the tokenizer, and one parse of a 262,144-token
    vocabulary takes gguf's reader tens of seconds; the reader is only read from, so one serves all."""
    gguf = pytest.importorskip("gguf", reason="the gguf package (a test extra) reads GGUF for transformers")
    real, readers = gguf.GGUFReader, {}

    def reader(path, mode="r"):
        key = (os.path.realpath(path), mode)
        if key not in readers:
            readers[key] = real(path, mode)
        return readers[key]

    gguf.GGUFReader = reader
    yield
    gguf.GGUFReader = real
    readers.clear()


@pytest.fixture(scope="session")
def stories_bin():
    _need(STORIES_TOK)
    return _need(STORIES_BIN)


@pytest.fixture(scope="session")
def stories(stories_bin):
    return decodelab.load(stories_bin)


@pytest.fixture(scope="session")
def stories_hf(stories_bin, tmp_path_factory):
    """stories260K converted to a Hugging Face folder by our own converter."""
    return testing.convert_llama2c(stories_bin, str(tmp_path_factory.mktemp("stories_hf")))


@pytest.fixture(scope="session")
def gpt2_tokenizer_dir():
    _need(os.path.join(GPT2_TOKENIZER, "vocab.json"))
    return GPT2_TOKENIZER


@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory):
    """checkpoint(shape, **kw) -> folder, written once per (shape, kw) per session."""
    made = {}

    def make(shape, **kw):
        key = (shape if isinstance(shape, str) else repr(sorted(shape.items())), tuple(sorted(kw.items())))
        if key not in made:
            out = str(tmp_path_factory.mktemp("ckpt"))
            made[key] = testing.write_checkpoint(out, shape, **kw)
        return made[key]

    return make


@pytest.fixture
def sigint():
    """Ctrl-C raises KeyboardInterrupt here and in the processes the test starts, however the suite
    was started: a shell starts a background job with SIGINT ignored, and Python then neither raises
    KeyboardInterrupt nor lets a child it starts install its own handler."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


@functools.lru_cache(maxsize=None)
def docs_hooks():
    """docs/hooks.py as a module (it is not a package module): the lesson format, the lessons' run
    and the site's generated pages, loaded once."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("decodelab_docs_hooks", os.path.join(ROOT, "docs", "hooks.py"))
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    return hooks


@pytest.fixture(scope="session")
def executed_lessons(tmp_path_factory):
    """executed_lessons(path) -> the lesson notebook run top to bottom, once per session, shared by
    the notebook tests and the site build (docs/hooks.py's execute_lesson, as `mkdocs build` runs
    them); executed_lessons() runs every lesson and returns the folder holding them all."""
    import nbformat

    hooks = docs_hooks()
    folder = tmp_path_factory.mktemp("lessons")
    done = {}

    def run(path=None):
        if path is None:
            for p in hooks.lesson_paths():
                run(p)
            return str(folder)
        missing = hooks.lesson_missing_models(path)
        if missing:
            pytest.skip(f"{os.path.basename(path)} loads {', '.join(missing)}: run ../shared/models/fetch "
                        "(.ci/run does) or set DECODELAB_MODEL_CACHE")
        if path not in done:
            t0 = time.perf_counter()
            done[path] = hooks.execute_lesson(path)
            run.seconds[path] = time.perf_counter() - t0
            nbformat.write(done[path], str(folder / os.path.basename(path)))
        return done[path]

    run.seconds = {}  # each lesson's execution time
    return run
