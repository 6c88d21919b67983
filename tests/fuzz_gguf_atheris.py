"""Coverage-guided fuzzing of the GGUF reader and dequantizers with atheris (not part of the test
run; tests/test_gguf.py runs a seeded mutator in CI):

    pip install atheris && python tests/fuzz_gguf_atheris.py -max_total_time=1800

Inputs are whole files, seeded with the small valid file of test_gguf.py and the header of the
shared SmolLM2 file. GGUFFile must raise ValueError or read a file whose every supported tensor
then decodes; any other exception or a crash stops the run with the input saved by libFuzzer.
"""
import os
import sys
import tempfile

import atheris

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

with atheris.instrument_imports():
    from decodelab import gguf_quants
    from decodelab.gguf_file import GGUFFile

PATH = os.path.join(tempfile.mkdtemp(prefix="decodelab-gguf-fuzz-"), "f.gguf")


def one(data: bytes) -> None:
    with open(PATH, "wb") as f:
        f.write(data)
    try:
        with GGUFFile(PATH) as g:
            for t in g.tensors.values():
                if t.type.name in gguf_quants.DEQUANTIZERS and t.nbytes <= 1 << 20:
                    gguf_quants.dequantize_tensor(g, t)
    except ValueError:
        pass


if __name__ == "__main__":
    atheris.Setup(sys.argv, one)
    atheris.Fuzz()
