"""The pytest plugin and decodelab.testing's assertions: fixtures served through the installed
entry point, the model marker and option, the logits corpus, and assertions that fail on a
deliberately wrong sampler."""
import subprocess
import sys

import numpy as np
import pytest

import decodelab.samplers as S
from decodelab.testing import (assert_distribution_close, assert_same_kept_set, assert_samples_follow, logits_corpus,
                               parametrize_orders, parametrize_presets, total_variation)

FOUR = np.log([0.5, 0.2, 0.2, 0.1]).astype(np.float32)


def test_the_corpus_holds_real_distributions():
    rows = logits_corpus()
    assert len(rows) == 32
    for row in rows:
        assert row.logits.shape == (49152,) and row.logits.dtype == np.float32
        assert np.isfinite(row.logits).sum() == 4096 and 0 <= row.tail_mass < 0.05
        assert row.context and max(row.context) < 49152
    assert rows[0].label.startswith("'The capital of France is'")
    entropies = [-(p[p > 0] * np.log(p[p > 0])).sum() for p in (S.softmax(r.logits) for r in rows)]
    assert min(entropies) < 0.5 and max(entropies) > 3  # peaked and flat rows both


def test_kept_set_assertion_names_the_difference():
    x = logits_corpus()[3].logits
    assert_same_kept_set(S.TopP(0.9).apply(x), S.TopP(0.9).apply(x))
    # A deliberately wrong top-p: one that drops the token crossing p (TopP at a lower p stands in).
    with pytest.raises(AssertionError, match="kept sets differ: .* expected but removed: \\["):
        assert_same_kept_set(S.TopP(0.8).apply(x), S.TopP(0.9).apply(x))


def test_distribution_assertion_bounds_total_variation():
    assert total_variation([0.5, 0.5], [0.25, 0.75]) == pytest.approx(0.25)
    assert_distribution_close(S.Temperature(1.0).apply(FOUR), FOUR, max_tv=1e-7)
    with pytest.raises(AssertionError, match="total variation 0.0.* exceeds 0.01"):
        assert_distribution_close(S.Temperature(1.3).apply(FOUR), FOUR, max_tv=0.01)


@pytest.mark.slow
def test_samples_assertion_passes_a_right_sampler_and_fails_a_wrong_one():
    x = logits_corpus()[1].logits
    assert_samples_follow(S.Chain([S.TopK(20), S.Dist(3)]), x, n=2000)
    assert_samples_follow(S.TopK(20), x, n=2000)  # Dist(0) added
    # Draws at temperature 1.3 claimed to follow the untempered distribution.
    with pytest.raises(AssertionError, match="draws do not follow the distribution: chi-square"):
        assert_samples_follow(S.Chain([S.TopK(20), S.Temperature(1.3), S.Dist(0)]), x, n=2000,
                              expected=S.TopK(20))
    # Draws outside the claimed support.
    with pytest.raises(AssertionError, match="gives probability 0"):
        assert_samples_follow(S.Chain([S.TopK(20), S.Dist(0)]), x, n=200, expected=S.TopK(2))
    with pytest.raises(ValueError, match="n must be at least 50"):
        assert_samples_follow(S.TopK(2), x, n=10)


@parametrize_orders()
def test_parametrize_orders_covers_each_order(order):
    assert order in S.ORDERS


@parametrize_presets("p")
def test_parametrize_presets_covers_each_preset(p):
    assert p in S.PRESETS


def test_parametrize_refuses_unknown_names():
    with pytest.raises(ValueError, match="unknown order 'tgi'"):
        parametrize_orders(orders=["hf", "tgi"])


@pytest.mark.slow
def test_fixtures_through_the_entry_point(tmp_path, stories_bin):
    (tmp_path / "test_fixtures.py").write_text(f"""
import pytest

def test_default(decodelab_model):
    assert decodelab_model.config.vocab_size == 512

@pytest.mark.decodelab_model({stories_bin!r}, dtype="int8")
def test_marker(decodelab_model):
    assert decodelab_model.path.endswith("stories260K.bin") and "int8" in repr(decodelab_model.dtype)

def test_corpus(decodelab_logits_corpus):
    assert len(decodelab_logits_corpus) == 32
""", encoding="utf-8")
    run = lambda *a: subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *a, str(tmp_path)],
                                    cwd=tmp_path, capture_output=True, text=True, timeout=300)
    r = run()
    assert r.returncode == 0 and "3 passed" in r.stdout, r.stdout[-3000:]
    r = run("--decodelab-model", str(tmp_path / "missing.bin"), "-k", "default")
    assert r.returncode != 0 and "missing.bin" in r.stdout, r.stdout[-3000:]
    r = run("--fixtures")
    assert "decodelab_model" in r.stdout and "decodelab_logits_corpus" in r.stdout
