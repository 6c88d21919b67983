"""decodelab's pytest plugin (registered through the ``pytest11`` entry point): fixtures for tests
that compare decoding strategies, all named ``decodelab_*`` so that none shadows a project's own.

- ``decodelab_model``: a loaded model, the packaged stories260K unless ``--decodelab-model PATH``
  or ``@pytest.mark.decodelab_model("PATH", dtype=...)`` names another; loaded once per session
  for each path and options.
- ``decodelab_logits_corpus``: real next-token logits (``decodelab.testing.logits_corpus()``).

Assertions and parametrize helpers live in ``decodelab.testing``.

Examples:
    A test asks for the fixtures by name; pytest passes what they return:

    >>> def test_greedy_is_repeatable(decodelab_model):
    ...     a = decodelab_model.generate("Once upon a time", max_new_tokens=5)
    ...     b = decodelab_model.generate("Once upon a time", max_new_tokens=5)
    ...     assert a.token_ids == b.token_ids
    >>> test_greedy_is_repeatable(decodelab.load("stories260K"))  # what the fixture gives by default
"""
from __future__ import annotations

import pytest

__all__ = ["decodelab_model", "decodelab_logits_corpus"]

_MARK = "decodelab_model"


def pytest_addoption(parser):
    """pytest hook: add the ``--decodelab-model PATH`` option (in the "decodelab" group of --help).

    Args:
        parser: pytest's option parser.
    """
    group = parser.getgroup("decodelab")
    group.addoption("--decodelab-model", default=None, metavar="PATH",
                    help="model for the decodelab_model fixture (default: the packaged stories260K)")


def pytest_configure(config):
    """pytest hook: register the ``decodelab_model`` marker, so ``--strict-markers`` accepts it.

    Args:
        config: pytest's Config.
    """
    config.addinivalue_line("markers", f"{_MARK}(path, **load_options): the model decodelab_model loads for this test")


@pytest.fixture(scope="session")
def _decodelab_models():
    """The session's loaded models by (path, load options), so each loads once."""
    return {}


@pytest.fixture
def decodelab_model(request, _decodelab_models):
    """A decodelab Model: the marker's path and load options, else --decodelab-model, else stories260K.

    ``@pytest.mark.decodelab_model("PATH", dtype="int8")`` on a test (or its class or module)
    chooses the model and the keywords for ``decodelab.load``. Each (path, options) loads once per
    session and is shared by the tests that ask for it, so a test must not change the model.

    Args:
        request: pytest's FixtureRequest (its closest ``decodelab_model`` marker and options).
        _decodelab_models: the session's cache of loaded models.

    Returns:
        The loaded decodelab Model.

    Raises:
        pytest.UsageError: the marker does not give exactly one path.

    Examples:
        >>> import pytest
        >>> @pytest.mark.decodelab_model("stories260K", dtype="bfloat16")
        ... def test_bfloat16_weights(decodelab_model):
        ...     assert decodelab_model.dtype == "bfloat16"
        >>> test_bfloat16_weights(decodelab.load("stories260K", dtype="bfloat16"))  # as the fixture loads it
    """
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
    """The packaged corpus of real SmolLM2 next-token logits: a list of decodelab.testing.LogitsRow.

    Session-scoped; the same list as ``decodelab.testing.logits_corpus()``.

    Returns:
        The 32 LogitsRows of the corpus.

    Examples:
        >>> import decodelab.testing
        >>> from decodelab.samplers import TopP
        >>> def test_top_p_keeps_at_least_one(decodelab_logits_corpus):
        ...     for row in decodelab_logits_corpus:
        ...         assert np.isfinite(TopP(0.01).apply(row.logits, row.context)).sum() >= 1
        >>> test_top_p_keeps_at_least_one(decodelab.testing.logits_corpus())
    """
    from decodelab.testing import logits_corpus

    return logits_corpus()
