"""Coverage-guided fuzzing of the GGUF reader, dequantizers, config and tokenizer with atheris
(not part of the test run; tests/test_gguf.py and test_gguf_tokenizer.py run seeded mutators in CI):

    pip install atheris && python tests/fuzz_gguf_atheris.py CORPUS_DIR -max_total_time=1800

Inputs are whole files; CORPUS_DIR holds the seeds: the small valid file of test_gguf.py, its
tokenizer-only BPE files, test_gguf_tokenizer.py's SentencePiece file and stories260K's vocabulary
as GGUF. GGUFFile must raise ValueError or read a file whose every supported tensor then decodes and
whose config and tokenizer then build (or raise ValueError); any other exception or a crash stops
the run with the input saved by libFuzzer.
"""
import os
import sys
import tempfile

import atheris

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

with atheris.instrument_imports():
    from decodelab.formats.gguf import model as gguf_model
    from decodelab.formats.gguf import blocks as gguf_quants
    from decodelab.formats.gguf import tokenizer as gguf_tokenizer
    from decodelab.formats.gguf.reader import GGUFFile

PATH = os.path.join(tempfile.mkdtemp(prefix="decodelab-gguf-fuzz-"), "f.gguf")


def one(data: bytes) -> None:
    with open(PATH, "wb") as f:
        f.write(data)
    try:
        with GGUFFile(PATH) as g:
            for t in g.tensors.values():
                if t.type.name in gguf_quants.DEQUANTIZERS and t.nbytes <= 1 << 20:
                    gguf_quants.dequantize_tensor(g, t)
            try:
                gguf_model.config_from_gguf(g)
            except ValueError:
                pass
            tok = gguf_tokenizer.tokenizer_from_gguf(g)
            if tok is not None:
                tok.decode(tok.encode("Hello <s> world 123 😀"))
    except ValueError:
        pass


if __name__ == "__main__":
    atheris.Setup(sys.argv, one)
    atheris.Fuzz()
