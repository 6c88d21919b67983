"""decodelab's pytest plugin (registered through the ``pytest11`` entry point): fixtures for tests
that compare decoding strategies, all named ``decodelab_*`` so that none shadows a project's own.

- ``decodelab_model``: a loaded model, the packaged stories260K unless ``--decodelab-model PATH``
  or ``@pytest.mark.decodelab_model("PATH", dtype=...)`` names another; loaded once per session
  for each path and options.
- ``decodelab_logits_corpus``: real next-token logits (``decodelab.testing.logits_corpus()``).

Assertions and parametrize helpers live in ``decodelab.testing``.
"""
from __future__ import annotations

import pytest

_MARK = "decodelab_model"


def pytest_addoption(parser):
    group = parser.getgroup("decodelab")
    group.addoption("--decodelab-model", default=None, metavar="PATH",
                    help="model for the decodelab_model fixture (default: the packaged stories260K)")


def pytest_configure(config):
    config.addinivalue_line("markers", f"{_MARK}(path, **load_options): the model decodelab_model loads for this test")


@pytest.fixture(scope="session")
def _decodelab_models():
    return {}


@pytest.fixture
def decodelab_model(request, _decodelab_models):
    """A decodelab Model: the marker's path and load options, else --decodelab-model, else stories260K."""
    import decodelab

    mark = request.node.get_closest_marker(_MARK)
    if mark is not None:
        if len(mark.args) != 1:
            raise pytest.UsageError(f"@pytest.mark.{_MARK} takes one path, got {mark.args!r}")
        path, opts = mark.args[0], dict(mark.kwargs)
    else:
        path, opts = request.config.getoption("--decodelab-model") or "stories260K", {}
    key = (path, tuple(sorted(opts.items())))
    if key not in _decodelab_models:
        _decodelab_models[key] = decodelab.load(path, **opts)
    return _decodelab_models[key]


@pytest.fixture(scope="session")
def decodelab_logits_corpus():
    """The packaged corpus of real SmolLM2 next-token logits: a list of decodelab.testing.LogitsRow."""
    from decodelab.testing import logits_corpus

    return logits_corpus()
