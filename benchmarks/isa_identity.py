"""How far a model's logits move with the kernel variant (DECODELAB_ISA) and with the path a token
takes (a prompt, decoded one by one, or decoded in a batch beside other sequences), per weight
dtype: the evidence for results that do not depend on the CPU.

    python benchmarks/isa_identity.py [FILE] [--dtypes int4,int8,w8a8,bfloat16,float32] [--out FILE]

Each level the CPU runs is measured in a child process of its own (the variant is chosen at
import). Per dtype and level: the max |logit difference| against the first level (generic) for
the prompt path, and within the level between prompt and one-by-one decoding, and between
one-by-one and batched decoding; and the greedy chat answer to the precision guide's question. FILE
defaults to SmolLM2-135M-Instruct Q4_1 in ../shared/models. Writes
benchmarks/results/isa_identity.json.
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
DEFAULT = HERE.parent.parent / "shared" / "models" / "smollm2-135m-instruct" / "SmolLM2-135M-Instruct.Q4_1.gguf"
TEXT = "The capital of France is Paris. The capital of Italy is Rome. The capital of Spain is"
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]

CHILD = r"""
import json, sys
import numpy as np
import decodelab
path, dtype, out, text, question = sys.argv[1:6]
m = decodelab.load(path, dtype=dtype, threads=2)
ids = list(m.tokenizer.encode(text))
prompt = m.forward(ids)
cache = m.new_cache()
one = [m.prefill(ids[:1], cache)]
one += [m.decode(t, cache) for t in ids[1:]]
# The same tokens decoded beside two other sequences.
seqs = [ids, ids[::-1], ids[5:] + ids[:5]]
caches = [m.new_cache() for _ in seqs]
firsts = [m.prefill(s[:1], c) for s, c in zip(seqs, caches)]
batch = [firsts[0]] + [m.decode_batch([s[j] for s in seqs], caches)[0] for j in range(1, len(ids))]
answer = m.chat(json.loads(question), max_new_tokens=24).text
np.savez(out, prompt=prompt, one=np.stack([np.asarray(x).reshape(-1) for x in one]),
         batch=np.stack([np.asarray(x).reshape(-1) for x in batch]))
print(json.dumps({"chosen": decodelab.cpu_info()["chosen"], "answer": answer}))
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file", nargs="?", default=str(DEFAULT))
    ap.add_argument("--dtypes", default="int4,int8,w8a8,bfloat16,float32")
    ap.add_argument("--out", default=str(HERE / "results" / "isa_identity.json"))
    a = ap.parse_args()
    import decodelab

    levels = decodelab.cpu_info()["supported"]
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for dtype in a.dtypes.split(","):
            got = {}
            for level in levels:
                out = os.path.join(tmp, f"{dtype}_{level}.npz")
                r = subprocess.run([sys.executable, "-c", CHILD, a.file, dtype, out, TEXT, json.dumps(QUESTION)],
                                   env=dict(os.environ, DECODELAB_ISA=level), capture_output=True, text=True,
                                   check=True)
                info = json.loads(r.stdout.strip().splitlines()[-1])
                assert info["chosen"] == level, info
                got[level] = (np.load(out), info["answer"])
            base = got[levels[0]][0]
            rows[dtype] = {level: {
                "vs_" + levels[0]: float(np.abs(z["prompt"] - base["prompt"]).max()),
                "prompt_vs_one_by_one": float(np.abs(z["prompt"] - z["one"]).max()),
                "one_by_one_vs_batch": float(np.abs(z["one"] - z["batch"]).max()),
                "answer": answer} for level, (z, answer) in got.items()}
            for level, row in rows[dtype].items():
                print(f"{dtype:9s} {level:12s} vs {levels[0]} {row['vs_' + levels[0]]:8.3g}  "
                      f"prompt vs one-by-one {row['prompt_vs_one_by_one']:8.3g}  "
                      f"one-by-one vs batch {row['one_by_one_vs_batch']:8.3g}  {row['answer'][:40]!r}")
    result = {"file": os.path.basename(a.file), "text": TEXT, "question": QUESTION[0]["content"],
              "cpu": decodelab.cpu_info()["detected"], "rows": rows}
    with open(a.out, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
