"""The figures behind the sampler-fidelity choices, measured: how often torch's default sort orders
ties differently from a stable sort (why transformers' tie order is not a target), how far float32
softmax sums drift from 1 over 50,257 near-uniform logits (why near-uniform top-p cuts move), and
the watermark's z-scores on SmolLM2, marked and plain, per seed and precision.

    python benchmarks/fidelity_figures.py
"""
import os

import numpy as np
import torch

import decodelab
import decodelab.samplers as S
from decodelab.samplers.watermark import WatermarkDetector

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.environ.get("DECODELAB_MODELS", os.path.join(HERE, "..", "..", "shared", "models"))
SMOLLM = os.path.join(MODELS, "smollm2-135m-instruct", "SmolLM2-135M-Instruct.Q4_1.gguf")


def main():
    x = torch.tensor(np.round(np.random.default_rng(0).standard_normal(300) * 2) / 2, dtype=torch.float32)
    moved = int((torch.sort(x).indices != torch.sort(x, stable=True).indices).sum())
    print(f"torch.sort vs a stable sort, 300 tied-heavy values: {moved} positions differ")

    rng = np.random.default_rng(0)
    flat = (np.round(rng.standard_normal(50257) * 2) * 0.0005).astype(np.float32)
    theirs = torch.sort(torch.from_numpy(flat)).values.softmax(-1).double().sum().item()
    ours = S.softmax(flat).astype(np.float64).sum()
    print(f"float32 softmax sum over 50,257 near-uniform logits: torch 1 - {1 - theirs:.1e}, "
          f"decodelab 1 - {1 - ours:.1e}")

    for dtype, seeds in (("int8", (1, 2, 3)), ("float32", (1, 2, 3, 4, 5))):
        m = decodelab.load(SMOLLM, dtype=dtype)
        vocab = m.config.vocab_size
        det = WatermarkDetector(vocab)
        prompt = m.tokenizer.apply_chat_template(
            [{"role": "user", "content": "Write a short story about a lighthouse keeper."}], add_generation_prompt=True)
        for seed in seeds:
            z = [det(m.generate(prompt, sampler=S.Chain(stages + [S.Dist(seed)]), max_new_tokens=200,
                                eos_token_id=[]).token_ids).z_score for stages in ([S.Watermark(vocab)], [])]
            print(f"watermark {dtype:7s} seed {seed}: z marked {z[0]:6.2f}, plain {z[1]:6.2f}")


if __name__ == "__main__":
    main()
