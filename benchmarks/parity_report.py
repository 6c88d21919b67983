"""Measured logit error against transformers (fp32), for the record rather than as a test.

    python benchmarks/parity_report.py

For GPT-2 124M and Llama 110M random-initialised checkpoints and stories260K converted by
decodelab's converter: max |logit difference| of the full forward and of prefill + cached
decode, over 32 random tokens. The tests assert <= 1e-4; this prints the actual figures.
"""
import os
import tempfile

import numpy as np
import torch
from transformers import AutoModelForCausalLM

import decodelab
from decodelab import testing

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.environ.get("DECODELAB_MODELS", os.path.join(ROOT, "..", "shared", "models"))


def main():
    with tempfile.TemporaryDirectory() as tmp:
        for name in ["gpt2-124m", "llama-110m", "stories260K"]:
            out = os.path.join(tmp, name)
            if name == "stories260K":
                folder = testing.convert_llama2c(os.path.join(MODELS, "stories260K", "stories260K.bin"), out)
            else:
                folder = testing.write_checkpoint(out, name)
            ours = decodelab.load(folder)
            ref = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager").eval()
            ids = np.random.default_rng(0).integers(0, ours.config.vocab_size, 32).tolist()
            with torch.no_grad():
                want = ref(torch.tensor([ids])).logits[0].double().numpy()
            full = np.abs(ours.forward(ids) - want).max()
            cache = ours.new_cache()
            rows = [ours.prefill(ids[:16], cache)] + [ours.decode(t, cache) for t in ids[16:]]
            cached = np.abs(np.stack(rows) - want[15:]).max()
            print(f"{name:<12} forward max|diff| {full:.2e}   prefill+decode max|diff| {cached:.2e}   "
                  f"max|logit| {np.abs(want).max():.2f}")


if __name__ == "__main__":
    main()
