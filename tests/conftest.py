"""Shared fixtures: the shared real models and deterministic random-initialised checkpoints.

The shared models live in ../shared/models (override with DECODELAB_MODELS). Checkpoints are
written once per session into a temporary folder.
"""
import os

import pytest

import decodelab
from decodelab import testing

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.environ.get("DECODELAB_MODELS", os.path.join(ROOT, "..", "shared", "models"))
STORIES_BIN = os.path.join(MODELS, "stories260K", "stories260K.bin")
STORIES_TOK = os.path.join(MODELS, "stories260K", "tok512.bin")
GPT2_TOKENIZER = os.path.join(MODELS, "gpt2-tokenizer")


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
