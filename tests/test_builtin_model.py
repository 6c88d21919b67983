"""The model inside the package (stories260K), names that are also paths, and Hugging Face repo
ids resolved through huggingface_hub's cache."""
import os
import subprocess
import sys
import textwrap

import pytest

import decodelab
from decodelab import loading, testing


def test_the_builtin_model_loads_by_name_from_the_installed_package(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no "stories260K" here
    path = loading.BUILTIN["stories260K"]
    assert os.path.exists(path) and os.path.dirname(path).startswith(os.path.dirname(decodelab.__file__))
    m = decodelab.load("stories260K")
    assert m.generate("Once upon a time", max_new_tokens=12).text.startswith(", there was a little girl")
    out = subprocess.run([sys.executable, "-m", "decodelab", "generate", "Once upon a time", "--max-new-tokens", "8"],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.startswith("Once upon a time, there was"), out.stderr


def test_a_path_of_the_same_name_means_the_path(tmp_path, monkeypatch):
    testing.write_checkpoint(str(tmp_path / "stories260K"), "llama-tiny", byte_tokenizer=True)
    monkeypatch.chdir(tmp_path)
    m = decodelab.load("stories260K")
    assert m.config.source == "hf" and m.config.n_layers == 2  # the folder, not the built-in llama2.c model


def test_unknown_names_say_what_exists(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"built-in models: stories260K"):
        decodelab.load("stories999")


def test_a_hub_repo_id_is_read_from_the_huggingface_cache(tmp_path):
    """A pre-filled hub cache, offline: load("org/name") finds the snapshot; a repo id that is not
    cached names the repo and says how to pass a local path."""
    pytest.importorskip("huggingface_hub", reason="hub ids resolve through huggingface_hub")
    snap = tmp_path / "hub" / "models--someorg--tiny" / "snapshots" / ("0" * 40)
    testing.write_checkpoint(str(snap), "llama-tiny", byte_tokenizer=True)
    (tmp_path / "hub" / "models--someorg--tiny" / "refs").mkdir()
    (tmp_path / "hub" / "models--someorg--tiny" / "refs" / "main").write_text("0" * 40)
    script = textwrap.dedent("""
        import decodelab
        m = decodelab.load("someorg/tiny")
        print("vocab", m.config.vocab_size)
        try:
            decodelab.load("someorg/absent")
        except FileNotFoundError as e:
            print("absent:", e)
    """)
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(tmp_path / "hub"), HF_HOME=str(tmp_path / "home"))
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert f"vocab {testing.SHAPES['llama-tiny']['vocab_size']}" in out.stdout
    assert "the Hugging Face repo 'someorg/absent' could not be fetched or found in the cache" in out.stdout
    assert "pass the path of a local folder or file instead" in out.stdout
