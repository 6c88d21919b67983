"""Coverage-guided fuzzing of load() with atheris (not part of the test run):

    pip install atheris && python tests/fuzz_load_atheris.py -max_total_time=1800

Each input's first byte picks a file (config.json, model.safetensors, generation_config.json, a
llama2.c checkpoint or tokenizer); the rest, or a mutation of the real file seeded by it, replaces
that file. load() must raise ValueError or return a model that generates; any other exception or
a crash stops the run with the input saved by libFuzzer.
"""
import os
import random
import shutil
import sys
import tempfile

import atheris

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

with atheris.instrument_imports():
    import decodelab
    from decodelab import testing
    from mutations import mutate_bytes, mutate_json_text, mutate_safetensors

MODELS = os.environ.get("DECODELAB_MODELS", os.path.join(os.path.dirname(__file__), "..", "..", "shared", "models"))
WORK = tempfile.mkdtemp(prefix="decodelab-fuzz-")
HF = testing.write_checkpoint(os.path.join(WORK, "hf"), "llama-tiny")
with open(os.path.join(HF, "generation_config.json"), "w") as f:
    f.write('{"eos_token_id": 2}')
L2C = os.path.join(WORK, "l2c")
os.makedirs(L2C)
for name in ("stories260K.bin", "tok512.bin"):
    shutil.copy(os.path.join(MODELS, "stories260K", name), L2C)

TARGETS = [(HF, "config.json", mutate_json_text), (HF, "model.safetensors", mutate_safetensors),
           (HF, "generation_config.json", mutate_json_text), (L2C, "stories260K.bin", mutate_bytes),
           (L2C, "tok512.bin", mutate_bytes)]
ORIGINAL = {(d, n): open(os.path.join(d, n), "rb").read() for d, n, _ in TARGETS}


def one_input(data: bytes) -> None:
    if len(data) < 2:
        return
    folder, name, mutate = TARGETS[data[0] % len(TARGETS)]
    original = ORIGINAL[(folder, name)]
    # Half the inputs are raw bytes; half seed a structured mutation of the real file.
    body = data[2:] if data[1] & 1 else mutate(original, random.Random(data[2:]))
    path = os.path.join(folder, name)
    with open(path, "wb") as f:
        f.write(body)
    try:
        m = decodelab.load(folder if folder == HF else os.path.join(L2C, "stories260K.bin"), threads=1)
        m.generate([1, 2], max_new_tokens=2)
    except ValueError:
        pass
    finally:
        with open(path, "wb") as f:
            f.write(original)


if __name__ == "__main__":
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()
