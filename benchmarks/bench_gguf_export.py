"""What each GGUF export type costs, on a random Llama whose rows are 256 and 512 wide (so Q4_K
applies to every matrix): logit RMS error against the source folder, and the largest logit
difference between llama.cpp (llama-cpp-python) and decodelab reading the same file.

    python benchmarks/bench_gguf_export.py

Results go to benchmarks/results/bench_gguf_export.json.
"""
import json
import os
import tempfile

import numpy as np

import decodelab
from decodelab import testing
from decodelab.testing.llama_cpp import compare_gguf
from decodelab.formats.gguf import export as gguf_export

HERE = os.path.dirname(os.path.abspath(__file__))
SHAPE = dict(arch="llama", hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=300, max_position_embeddings=128, tie_word_embeddings=False)


def main():
    rows = {}
    with tempfile.TemporaryDirectory() as d:
        cfg, tensors = testing.random_weights(SHAPE, seed=4)
        folder = testing.write_hf_folder(os.path.join(d, "hf"), cfg, tensors)
        ids = list(range(3, 40))
        ref = decodelab.load(folder).forward(ids)
        for t in ("F32", "Q8_0", "Q5_1", "Q5_0", "Q4_1", "Q4_0", "Q4_K"):
            path = gguf_export.export(folder, os.path.join(d, f"{t}.gguf"), t)
            rms = float(np.sqrt(np.mean((decodelab.load(path, dtype="float32").forward(ids) - ref) ** 2)))
            rows[t] = {"logit_rms_vs_source": rms,
                       "llama_cpp_max_diff_same_file": compare_gguf(folder, path, against="file")}
            print(f"{t:5s} logit RMS vs source {rms:.4f}, llama.cpp vs decodelab on the file "
                  f"{rows[t]['llama_cpp_max_diff_same_file']:.4f}", flush=True)
    with open(os.path.join(HERE, "results", "bench_gguf_export.json"), "w") as f:
        json.dump({"shape": SHAPE, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
