"""What a new user meets first with a downloaded file: a folder that holds one GGUF file loads it,
other folders and unknown files say what load() reads, the model's repr names its family, and a
misspelt generate() keyword names the closest one."""
import os
import shutil

import pytest

import decodelab
from decodelab.formats.gguf.export import export


@pytest.fixture(scope="module")
def gguf(checkpoint, tmp_path_factory):
    out = tmp_path_factory.mktemp("gguf") / "qwen2-tiny.gguf"
    return str(export(checkpoint("qwen2-tiny"), str(out)))


def test_a_folder_with_one_gguf_file_loads_it(gguf, tmp_path):
    shutil.copy(gguf, tmp_path / "model.gguf")
    (tmp_path / "README.md").write_text("downloaded")
    m = decodelab.load(str(tmp_path))
    assert m.config.family == "qwen2" and m.forward([1, 2, 3]).shape == (3, m.config.vocab_size)


def test_a_folder_without_a_config_names_its_model_files(gguf, tmp_path):
    for name in ("a.gguf", "b.gguf"):
        shutil.copy(gguf, tmp_path / name)
    with pytest.raises(FileNotFoundError, match="has no config.json; pass one of its model files instead: a.gguf, b.gguf"):
        decodelab.load(str(tmp_path))
    empty = tmp_path / "empty"
    os.mkdir(empty)
    with pytest.raises(FileNotFoundError, match="no .gguf or llama2.c .bin file; load.. reads a Hugging Face folder"):
        decodelab.load(str(empty))


def test_an_unknown_file_is_not_a_recognised_model_file(tmp_path):
    junk = tmp_path / "notes.txt"
    junk.write_text("these are notes, not weights " * 20)
    with pytest.raises(ValueError, match="is not a recognised model file: not GGUF, and as a llama2.c checkpoint"):
        decodelab.load(str(junk))


def test_repr_names_the_family(gguf):
    assert repr(decodelab.load(gguf)).startswith("Model(qwen2, layers=2")


def test_a_misspelt_keyword_names_the_closest_one():
    m = decodelab.load("stories260K")
    with pytest.raises(TypeError, match="unexpected keyword argument 'top_pp'; did you mean top_p"):
        m.generate("Once", top_pp=0.9)
    with pytest.raises(TypeError, match="'max_tokens'; did you mean max_new_tokens"):
        m.generate("Once", max_tokens=3)
    with pytest.raises(TypeError, match="'zzz'; it takes prompt, max_new_tokens"):
        m.generate("Once", zzz=1)
