"""Records the corpus of real next-token logits that the pytest plugin's ``decodelab_logits_corpus``
fixture serves: SmolLM2-135M-Instruct (the shared Q4_1 GGUF, loaded as float32) on varied prompts,
at the end of each prompt and after 8 greedy tokens, so peaked and flat distributions both appear.

    python benchmarks/make_logits_corpus.py [--out python/decodelab/data/smollm2_logits.npz]

To keep the file small, each row keeps its 4,096 highest logits (float16, with their ids); the
others read back as -inf, and the probability they held is stored per row (`tail_mass`).
"""
import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MODELS = os.environ.get("DECODELAB_MODELS", os.path.join(ROOT, "..", "shared", "models"))
SMOLLM = os.path.join(MODELS, "smollm2-135m-instruct", "SmolLM2-135M-Instruct.Q4_1.gguf")
KEEP = 4096

PROMPTS = [
    "The capital of France is",
    "Once upon a time, there was a",
    "def fibonacci(n):\n    ",
    "The United States has a population of approximately",
    "My favourite colour is",
    "2 + 2 =",
    "import numpy as np\nx = np.",
    "The best way to learn a new language is",
    "Water boils at",
    "In 1969, Neil Armstrong",
    "Here is a list of fruits: apple, banana,",
    "She opened the door and saw",
]
CHATS = [
    "What is the capital of France? Answer in one word.",
    "Write a haiku about the sea.",
    "Give me three tips for sleeping better.",
    "Translate 'good morning' into Spanish.",
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "python", "decodelab", "data", "smollm2_logits.npz"))
    args = ap.parse_args()
    import decodelab

    m = decodelab.load(SMOLLM, dtype="float32")
    texts = PROMPTS + [m.tokenizer.apply_chat_template([{"role": "user", "content": c}], add_generation_prompt=True)
                       for c in CHATS]
    ids_rows, val_rows, tails, contexts, labels = [], [], [], [], []
    for text in texts:
        prompt = m.tokenizer.encode(text)
        cont = m.generate(prompt, max_new_tokens=8, eos_token_id=[]).token_ids
        for ctx, where in ((prompt, "prompt end"), (prompt + cont, "after 8 greedy tokens")):
            logits = m.forward(ctx)[-1]
            top = np.argsort(-logits, kind="stable")[:KEEP]
            p = np.exp(logits - logits.max())
            p /= p.sum()
            ids_rows.append(np.sort(top).astype(np.uint16))
            val_rows.append(logits[np.sort(top)].astype(np.float16))
            tails.append(float(1.0 - p[top].sum()))
            contexts.append(np.asarray(ctx, dtype=np.int32))
            labels.append(f"{text!r} ({where})")
    lengths = np.array([len(c) for c in contexts], dtype=np.int32)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    np.savez_compressed(args.out, ids=np.stack(ids_rows), values=np.stack(val_rows), tail_mass=np.array(tails),
                        context=np.concatenate(contexts), context_lengths=lengths, labels=np.array(labels),
                        vocab_size=np.int32(m.config.vocab_size), model=np.array("SmolLM2-135M-Instruct Q4_1"))
    print(f"{len(labels)} rows -> {args.out} ({os.path.getsize(args.out) / 1e3:.0f} kB); tail mass at most "
          f"{max(tails):.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
