"""The same answer on every CPU and every path: with int4, int8 and w8a8 weights a token's logits
are the same bits whether it is part of a prompt, decoded one by one, decoded a few at a time,
batched beside other sequences, on one thread or two, and at every instruction set the CPU runs
(each level in a child process). float32 and bfloat16 weights keep the greedy tokens across levels
and paths, their logits within a stated tolerance: their prompts run oneDNN's matmul, whose sums
follow the CPU."""
import base64
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import decodelab
import decodelab.testing

QUANTIZED = ["int4", "int8", "w8a8"]
# Tiny random checkpoints of each kind of layer: GQA (llama), q/k norms (qwen3), soft-capped
# scores, sliding windows and tanh GELU (gemma2), local RoPE and one KV head (gemma3), erf GELU and
# one KV head per query head (pythia), LayerNorm and learned positions (gpt2).
SHAPES = ["llama-tiny", "qwen3-tiny", "gemma2-tiny", "gemma3-tiny", "pythia-tiny", "gpt2-tiny"]
# Past one 256-position chunk of attention, so that the partials of two chunks are merged.
N_TOKENS = 300

info = decodelab.cpu_info()
MODELS = os.environ.get("DECODELAB_MODELS", os.path.join(os.path.dirname(__file__), "..", "..", "shared", "models"))
SMOLLM = os.path.join(MODELS, "smollm2-135m-instruct", "SmolLM2-135M-Instruct.Q4_1.gguf")


def _long(checkpoint, name):
    """The tiny checkpoint `name` with a context of 512 positions."""
    shape = dict(decodelab.testing.SHAPES[name])
    shape["n_positions" if "n_positions" in shape else "max_position_embeddings"] = 512
    return str(checkpoint(shape))


def _ids(vocab, n=N_TOKENS, seed=0):
    return [int(t) for t in np.random.default_rng(seed).integers(1, vocab, n)]


def _paths(m, ids, kv):
    """Each path's logits for ids with a cache of dtype kv: {name: (positions, logits rows there)},
    the first one by one at every position; the whole prompt (forward) with the default fp32 cache."""
    cache = m.new_cache(dtype=kv)
    out = {"one by one": (list(range(len(ids))), np.stack([m.decode(t, cache) for t in ids]))}
    if kv == "float32":
        out["prompt"] = (list(range(len(ids))), m.forward(ids))
    # A prompt continued in pieces: 100 tokens, then 3 (the few-query decode path), then the rest.
    cache = m.new_cache(dtype=kv)
    cuts = [100, 103, len(ids)]
    rows, lo = [], 0
    for hi in cuts:
        rows.append(m.prefill(ids[lo:hi], cache))
        lo = hi
    out["in pieces"] = ([c - 1 for c in cuts], np.stack(rows))
    # The last 40 tokens decoded in a batch beside two sequences of other lengths and tokens.
    k = len(ids) - 40
    others = [_ids(m.config.vocab_size, n=k + 37, seed=1), _ids(m.config.vocab_size, n=k - 61, seed=2)]
    caches = [m.new_cache(dtype=kv) for _ in range(3)]
    m.prefill(ids[:k], caches[0])
    for seq, c in zip(others, caches[1:]):
        m.prefill(seq, c)
    rows = [m.decode_batch([ids[j], 5 + j % 7, 9 + j % 5], caches)[0] for j in range(k, len(ids))]
    out["batched"] = (list(range(k, len(ids))), np.stack(rows))
    return out


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", QUANTIZED)
def test_quantized_logits_are_the_same_bits_on_every_path(checkpoint, shape, dtype):
    m = decodelab.load(_long(checkpoint, shape), dtype=dtype)
    ids = _ids(m.config.vocab_size)
    for kv in ["float32", "bfloat16", "int8"]:
        paths = _paths(m, ids, kv)
        _, full = paths["one by one"]
        for name, (pos, rows) in paths.items():
            same = [np.array_equal(full[p], r) for p, r in zip(pos, rows)]
            assert all(same), (kv, name, pos[same.index(False)], np.abs(full[pos] - rows).max())


@pytest.mark.parametrize("dtype", QUANTIZED)
def test_quantized_logits_do_not_depend_on_the_thread_count(checkpoint, dtype):
    ids = _ids(512)
    one, two = (decodelab.load(_long(checkpoint, "llama-tiny"), dtype=dtype, threads=n).forward(ids) for n in (1, 2))
    assert np.array_equal(one, two)


@pytest.mark.parametrize("dtype", ["int4", "float32"])
def test_logits_do_not_depend_on_the_kv_block_size(checkpoint, dtype):
    """Attention's chunks are spans of positions, not of cache blocks: any block size, even one
    that 256 is not a multiple of, gives the same bits."""
    ids = _ids(512)
    path = _long(checkpoint, "gemma2-tiny")
    runs = [decodelab.load(path, dtype=dtype, kv_block_size=b).forward(ids) for b in (5, 16, 64)]
    assert all(np.array_equal(runs[0], r) for r in runs[1:])


@pytest.mark.parametrize("dtype,bf16_matmul", [("float32", None), ("bfloat16", False), ("bfloat16", None)])
def test_float_weights_keep_their_tokens_on_every_path(checkpoint, dtype, bf16_matmul):
    """fp32 and bf16 layers take oneDNN's matmul for long prompts, whose sums are its own: the
    logits stay within 1e-4 of the largest (fp32 rounding over a few thousand products) and the
    greedy token is the same. bf16 layers with bf16_matmul (the default for bfloat16) on a CPU with
    native bf16 products also round a long prompt's inputs to bf16 (2^-9 relative each), which
    decoding does not: within 2 % of the largest logit, and a near tie can then change the token."""
    from decodelab import _core

    m = decodelab.load(_long(checkpoint, "llama-tiny"), dtype=dtype, bf16_matmul=bf16_matmul)
    paths = _paths(m, _ids(m.config.vocab_size), "float32")
    _, full = paths["one by one"]
    rounds_prompts = m.bf16_matmul and _core.bf16_matmul_native()
    for name, (pos, rows) in paths.items():
        err = np.abs(full[pos] - rows).max() / np.abs(full).max()
        if rounds_prompts:
            assert err <= 2e-2, (name, err)
        else:
            assert err <= 1e-4, (name, err)
            assert (full[pos].argmax(-1) == rows.argmax(-1)).all(), name


# A child process at one level: logits (as bytes, hex) and greedy tokens of each model and dtype,
# and the precision guide's example answers.
CHILD = r"""
import base64, json, sys
import numpy as np
import decodelab
out = {"info": decodelab.cpu_info(), "runs": {}}
shapes, smollm = json.loads(sys.argv[1]), sys.argv[2]
def b64(a):  # logits as base64 of their float32 bytes: exact, and far cheaper than JSON numbers
    return base64.b64encode(a.astype(np.float32).tobytes()).decode()
def run(key, path, dtype, ids):
    m = decodelab.load(path, dtype=dtype)
    full = m.forward(ids)
    cache = m.new_cache()
    one = np.stack([m.decode(t, cache) for t in ids])
    out["runs"][key] = {"shape": list(full.shape), "prompt": b64(full), "one": b64(one),
                        "tokens": m.generate(ids, max_new_tokens=16, eos_token_id=[]).token_ids}
for name, path in shapes.items():
    for dtype in ["int4", "int8", "w8a8", "float32", "bfloat16"]:
        run(f"{name} {dtype}", path, dtype, [int(t) for t in np.random.default_rng(0).integers(1, 512, 40)])
if smollm:
    text = "The capital of France is Paris. The capital of Italy is Rome. The capital of Spain is"
    for dtype in ["int4", "int8", "w8a8", "float32"]:  # bfloat16: the tiny checkpoints
        m = decodelab.load(smollm, dtype=dtype)
        run(f"smollm2 {dtype}", smollm, dtype, list(m.tokenizer.encode(text)))
    m = decodelab.load(smollm)
    q = "What is the capital of France?"
    out["readme"] = {
        "generate": m.generate(f"<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n").text,
        "chat": m.chat([{"role": "user", "content": q}], max_new_tokens=32).text}
print(json.dumps(out))
"""


def _levels(shapes, smollm):
    """Each supported level's child output."""
    runs = {}
    for level in info["supported"]:
        r = subprocess.run([sys.executable, "-c", CHILD, json.dumps(shapes), smollm], capture_output=True, text=True,
                           timeout=600, env=dict(os.environ, DECODELAB_ISA=level))
        assert r.returncode == 0, r.stderr[-3000:]
        runs[level] = json.loads(r.stdout.strip().splitlines()[-1])
        assert runs[level]["info"]["chosen"] == level
    return runs


def _logits(run, name):
    """A child's logits array `name` ("prompt" or "one") from its base64 float32 bytes."""
    return np.frombuffer(base64.b64decode(run[name]), np.float32).reshape(run["shape"])


def _assert_same(runs):
    first = runs[info["supported"][0]]
    for level, got in runs.items():
        for key, run in got["runs"].items():
            ref = first["runs"][key]
            assert run["tokens"] == ref["tokens"], (level, key)
            a, b = _logits(run, "prompt"), _logits(ref, "prompt")
            one = _logits(run, "one")
            if key.split()[-1] in QUANTIZED:
                assert np.array_equal(a, b), (level, key, np.abs(a - b).max())
                assert np.array_equal(a, one), (level, key, np.abs(a - one).max())
            else:  # the fp32 sums of fp32 and bf16 layers differ with the vector width and FMA
                assert np.abs(a - b).max() <= 1e-4 * np.abs(b).max(), (level, key, np.abs(a - b).max())
                assert np.abs(a - one).max() <= 1e-4 * np.abs(b).max(), (level, key, np.abs(a - one).max())


portable = pytest.mark.skipif(not info["portable"], reason="a DECODELAB_NATIVE_ARCH build holds one variant only")


@pytest.mark.slow
@portable
def test_every_level_gives_the_same_bits(checkpoint):
    _assert_same(_levels({s: _long(checkpoint, s) for s in ["llama-tiny", "gemma2-tiny", "pythia-tiny"]}, ""))


@pytest.mark.slow
@portable
def test_every_level_gives_smollm2_the_same_bits_and_answers():
    if not os.path.exists(SMOLLM):
        pytest.skip(f"shared model file {SMOLLM} is absent (set DECODELAB_MODELS to the models folder)")
    runs = _levels({}, SMOLLM)
    _assert_same(runs)
    readme = {level: got["readme"] for level, got in runs.items()}
    assert all(r == readme["generic"] for r in readme.values()), readme
    # ... and they are the answers the precision guide shows under its example.
    with open(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "guide",
                           "precision.md"), encoding="utf-8") as f:
        lines = f.read().split("SmolLM2-135M-Instruct.Q4_1.gguf\")", 1)[1].split("```", 1)[0].splitlines()
    shown = [line.strip()[2:] for line in lines if line.strip().startswith("# ")]
    assert shown[0] == repr(readme["generic"]["generate"])
    said = shown[1].split(" (until")[0]
    assert said.endswith(', ..."') and readme["generic"]["chat"].startswith(said[1:-len(', ..."')]), said


# The real GGUF files ../shared/models/fetch downloads (.ci/run fetches them first): each level's
# logits of a short code prompt at the file's default dtype (int4 from its Q4_K blocks, its 5- to
# 8-bit blocks as int8 codes), whole and one token at a time, as bytes.
FETCHED_CHILD = r"""
import hashlib, json, sys
import numpy as np
import decodelab
out = {"info": decodelab.cpu_info(), "runs": {}}
for path in sys.argv[1:]:
    m = decodelab.load(path)
    ids = list(m.tokenizer.encode("def add(a, b):\n    return a + b\n"))[:12]
    full = m.forward(ids)
    cache = m.new_cache()
    one = np.stack([m.decode(t, cache) for t in ids])
    out["runs"][path] = {"prompt": hashlib.sha256(full.tobytes()).hexdigest(), "same": bool(np.array_equal(full, one)),
                         "dtype": m.dtype}
print(json.dumps(out))
"""


def _fetched(*names):
    paths = [decodelab.testing.fetched_model(n) for n in names]
    if None in paths:
        pytest.skip(f"{', '.join(decodelab.testing.FETCHED[n] for n in names)} not in "
                    f"{decodelab.testing.model_cache()}: run ../shared/models/fetch (.ci/run does)")
    return paths


@pytest.mark.slow
@portable
def test_every_level_gives_the_fetched_models_the_same_bits():
    paths = _fetched("qwen2.5-coder-0.5b", "gemma-3-270m")
    runs = {}
    for level in info["supported"]:
        r = subprocess.run([sys.executable, "-c", FETCHED_CHILD, *paths], capture_output=True, text=True, timeout=600,
                           env=dict(os.environ, DECODELAB_ISA=level))
        assert r.returncode == 0, r.stderr[-3000:]
        runs[level] = json.loads(r.stdout.strip().splitlines()[-1])
        assert runs[level]["info"]["chosen"] == level
    first = runs[info["supported"][0]]["runs"]
    for level, got in runs.items():
        for path, run in got["runs"].items():
            assert run["dtype"] == "int4" and run["same"], (level, path)
            assert run["prompt"] == first[path]["prompt"], (level, path)


def test_fetched_models_give_the_same_bits_batched():
    """Qwen's Q/K/V biases and untied head, Gemma 3's window and 262,144-token vocabulary: a token
    decoded beside another sequence gives the bits of the same token in a prompt."""
    for path in _fetched("qwen2.5-coder-0.5b", "gemma-3-270m"):
        m = decodelab.load(path)
        ids = list(m.tokenizer.encode("import numpy as np\nx = np.arange(10)\n"))[:16]
        full = m.forward(ids)
        caches = [m.new_cache(), m.new_cache()]
        m.prefill(ids[:8], caches[0])
        m.prefill(ids[::-1], caches[1])
        rows = [m.decode_batch([ids[j], ids[0]], caches)[0] for j in range(8, len(ids))]
        assert np.array_equal(full[8:], np.stack(rows)), path

