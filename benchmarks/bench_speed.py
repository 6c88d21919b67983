"""Speed, side by side: decodelab against transformers (torch CPU), CTranslate2, llama.cpp and a
plain-C baseline on the same checkpoints, thread count and precision, with the memory-bandwidth
bound of decoding.

    python benchmarks/bench_speed.py [--models gpt2-124m llama-110m stories260K smollm2-q4_1] [--rounds 2] [--json bench_speed.json]
    python benchmarks/bench_speed.py --models qwen2.5-coder-0.5b gemma-3-270m qwen2.5-coder-1.5b --engines decodelab llama.cpp

Each (engine, model, weight precision, KV-cache precision) runs in its own process so that peak
RSS is its own; the KV column says what each engine keeps its cache in. Per row:
prefill tokens/s (one prompt of --prompt tokens), decode tokens/s (batch 1, --decode tokens, EOS
off), time to first token, peak RSS, and batched decode throughput (greedy, batch 1 / 4 / 16,
--batch-steps tokens each). The bound column is the bandwidth probe (GB/s, measured in the same
run, the larger of probes just before and after the row, as this shared host's bandwidth drifts)
divided by the bytes of weights one decode step reads; bound+KV adds the cache a step reads at
the mean decode position. Where those bytes fit in the last-level cache (sysfs), the bound columns
say "in cache" and no share of the bound is given: such a model can run above it. decode@1 (decodelab rows) is the same decode after a one-token prompt,
llama-bench's "tg" setting, where a step reads little besides the weights: the ratio lines hold
it against the bound too. The probe reads 256 MiB, past what a process gets of a shared last-level
cache here (read rates: 55 GB/s over 16-32 MiB, 44 over 64, 32 from 96 up, on a host with 260 MiB
of L3); a model of about 100 MB whose weights partly stay in that cache between steps can run
above the bound (Llama 110M w8a8 at 106 % after a one-token prompt in one run). With --rounds N
every row runs N times, the rounds interleaved over all rows, and each figure is the row's best
round (the probe its largest), so a slow spell of this shared host does not land on one engine
only; the JSON keeps every round. Each row first reads the model's files once, so every load
starts from a warm page cache. llama.cpp rows need
llama-cpp-python (PyPI has only its source: `pip install llama-cpp-python gguf` builds llama.cpp,
about 11 minutes on 2 cores); the GGUF files come from decodelab/gguf_export.py and llama.cpp's
own quantizer. smollm2-q4_1 is the shared SmolLM2-135M-Instruct Q4_1 GGUF file itself, run by
decodelab (its default for the file: int4, the file's own 4-bit values) and by llama.cpp (the
file as it is, "q4_1"); the other engines do not read GGUF and are left out for it. A GGUF
file's bound counts the bytes of the file's matrices that one step reads (layers and head), for
every engine: a layout that reads more bytes than the file holds does not make it easier to reach. qwen2.5-coder-0.5b, gemma-3-270m and
qwen2.5-coder-1.5b are the Q4_K_M files ../shared/models/fetch downloads (--large for the 1.5B),
run the same way (llama.cpp's row "q4_k_m": the file as it is). SHAPE:TYPE names a random
checkpoint of a decodelab.testing shape as a GGUF file (llama-3.2-1b:q4_0, qwen2.5-3b:q8_0,
llama-3.2-1b:q4_k_m): written and exported one tensor at a time into --tmp (keep it with --tmp
DIR to reuse the files), Q4_K_M by llama.cpp's quantizer.
"""
import argparse
import hashlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.environ.get("DECODELAB_MODELS", os.path.join(ROOT, "..", "shared", "models"))


# --- checkpoints -------------------------------------------------------------------------------------

GGUF_MODELS = {"smollm2-q4_1": os.path.join(MODELS, "smollm2-135m-instruct", "SmolLM2-135M-Instruct.Q4_1.gguf")}
# The real files ../shared/models/fetch downloads (decodelab.testing.FETCHED), each Q4_K_M.
FETCHED_MODELS = ("qwen2.5-coder-0.5b", "gemma-3-270m", "qwen2.5-coder-1.5b")


# Random checkpoints of real shapes as GGUF files, named SHAPE:TYPE (llama-3.2-1b:q4_k_m): the
# fp32 folder written and exported one tensor at a time, Q4_0 and Q8_0 by decodelab's exporter and
# Q4_K_M by llama.cpp's own quantizer (from an fp32 GGUF, removed afterwards).
SYNTHETIC_TYPES = {"q4_0": "Q4_0", "q8_0": "Q8_0", "q4_k_m": None}


def gguf_label(name):
    """The llama.cpp row's dtype for a GGUF model: the file's own quantization, run as it is."""
    if ":" in name:
        return name.split(":", 1)[1]
    return "q4_1" if name == "smollm2-q4_1" else "q4_k_m"


def synthetic_gguf(name, tmp):
    """The GGUF file of SHAPE:TYPE (see SYNTHETIC_TYPES), written into tmp unless it is there."""
    from decodelab import testing
    from decodelab.formats.gguf import export as gguf_export

    shape, kind = name.split(":", 1)
    if shape not in testing.SHAPES or kind not in SYNTHETIC_TYPES:
        raise SystemExit(f"{name}: expected SHAPE:TYPE with SHAPE from decodelab.testing.SHAPES and TYPE one of "
                         f"{', '.join(SYNTHETIC_TYPES)}")
    path = os.path.join(tmp, f"{shape}.{kind}.gguf")
    if os.path.exists(path):
        return path
    folder = os.path.join(tmp, shape)
    if not os.path.exists(os.path.join(folder, "model.safetensors")):
        testing.write_checkpoint(folder, shape, progress=True)
    if SYNTHETIC_TYPES[kind]:
        return gguf_export.export(folder, path, SYNTHETIC_TYPES[kind])
    import ctypes

    import llama_cpp as lc

    f32 = gguf_export.export(folder, os.path.join(tmp, f"{shape}.f32.gguf"))
    qp = lc.llama_model_quantize_default_params()
    qp.nthread = len(os.sched_getaffinity(0))
    qp.ftype = lc.LLAMA_FTYPE_MOSTLY_Q4_K_M
    try:
        if lc.llama_model_quantize(f32.encode(), path.encode(), ctypes.byref(qp)) != 0:
            raise RuntimeError(f"llama_model_quantize failed on {f32}")
    finally:
        os.unlink(f32)
    return path


def model_cfg(folder):
    """The model's Hugging Face config: config.json, or for a GGUF file the fields read here."""
    if folder.endswith(".gguf"):
        from decodelab.formats.gguf.reader import GGUFFile
        from decodelab.formats.gguf.model import config_from_gguf

        with GGUFFile(folder) as g:
            c = config_from_gguf(g)
        return {"model_type": c.arch, "hidden_size": c.hidden_size, "num_hidden_layers": c.n_layers,
                "num_attention_heads": c.n_heads, "num_key_value_heads": c.n_kv_heads, "head_dim": c.head_dim,
                "intermediate_size": c.intermediate_size, "vocab_size": c.vocab_size}
    return json.load(open(os.path.join(folder, "config.json")))


def gguf_step_bytes(path):
    """Bytes of a GGUF file's matrices one decode step reads: each layer's and the head's blocks."""
    from decodelab.formats.gguf.reader import GGUFFile

    with GGUFFile(path) as g:
        head = "output.weight" if "output.weight" in g.tensors else "token_embd.weight"
        return sum(t.nbytes for n, t in g.tensors.items() if len(t.shape) == 2 and (n.startswith("blk.") or n == head))


def prepare(name, tmp):
    """A Hugging Face folder with a tokenizer.json (CTranslate2 needs token strings), or a shared
    GGUF file as it is."""
    from decodelab import testing

    if name in GGUF_MODELS:
        return GGUF_MODELS[name]
    if ":" in name:
        return synthetic_gguf(name, tmp)
    if name in FETCHED_MODELS:
        path = testing.fetched_model(name)
        if path is None:
            raise SystemExit(f"{name} is not fetched: run ../shared/models/fetch"
                             + (" --large" if name.endswith("1.5b") else ""))
        return path
    from tokenizers import Tokenizer, models, pre_tokenizers

    out = os.path.join(tmp, name)
    if os.path.exists(out):
        return out
    if name == "stories260K":
        testing.convert_llama2c(os.path.join(MODELS, "stories260K", "stories260K.bin"), out)
    else:
        testing.write_checkpoint(out, name)
    cfg = json.load(open(os.path.join(out, "config.json")))
    # A word-level vocabulary "t0" .. "tN" so that engines which speak in token strings can run
    # the model; speed does not depend on the strings.
    tok = Tokenizer(models.WordLevel({f"t{i}": i for i in range(cfg["vocab_size"])}, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(os.path.join(out, "tokenizer.json"))
    json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "t0", "bos_token": "t1",
               "eos_token": "t2"}, open(os.path.join(out, "tokenizer_config.json"), "w"))
    return out


def weight_bytes_per_step(folder, dtype):
    """Bytes of weights one batch-1 decode step reads: every linear layer and the head, once. The
    other engines' bound; decodelab rows use the bytes its own profile counts (weight_bytes_per_step
    from the worker). A GGUF file: the file's own matrices, for every engine (see main)."""
    if folder.endswith(".gguf"):
        return gguf_step_bytes(folder)
    cfg = model_cfg(folder)
    # q8_0 stores a 2-byte scale per 32 weights, q4_1 two.
    per = {"float32": 4, "bfloat16": 2, "float16": 2, "int8": 1, "q8_0": 34 / 32, "q4_1": 20 / 32}[dtype]
    head_per = {"q4_1": 34 / 32}.get(dtype, per)
    if cfg["model_type"] == "gpt2":
        D, L, V = cfg["n_embd"], cfg["n_layer"], cfg["vocab_size"]
        return (L * (D * 3 * D + D * D + 2 * D * 4 * D)) * per + V * D * head_per
    else:
        D, L, V, H = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"], cfg["intermediate_size"]
        hd = cfg.get("head_dim", D // cfg["num_attention_heads"])
        q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
        return L * (D * q + 2 * D * kv + q * D + 3 * D * H) * per + V * D * head_per


def head_dim(cfg):
    """Values per attention head of a Hugging Face GPT-2 or Llama config."""
    if cfg["model_type"] == "gpt2":
        return cfg["n_embd"] // cfg["n_head"]
    return cfg.get("head_dim", cfg["hidden_size"] // cfg["num_attention_heads"])


def kv_bytes_per_step(folder, kv_dtype, context):
    """Bytes of keys and values one decode step reads at `context` cached positions."""
    cfg = model_cfg(folder)
    hd = head_dim(cfg)
    if cfg["model_type"] == "gpt2":
        L, width = cfg["n_layer"], cfg["n_embd"]
    else:
        L, width = cfg["num_hidden_layers"], cfg["num_key_value_heads"] * hd
    if kv_dtype == "q8_0":  # llama.cpp: 32 values in 34 bytes
        return 2 * L * width * context * 34 // 32
    if kv_dtype == "int8":  # one byte a value and an fp32 scale per head_dim values
        return 2 * L * context * (width + 4 * width // hd)
    return 2 * L * width * context * (4 if kv_dtype == "float32" else 2)


# --- workers: one engine, one model, one precision -----------------------------------------------------

def engine_files(folder, engine, dtype):
    """The model files a row's worker opens: the folder (or GGUF file) for decodelab and
    transformers, and beside it the conversions the other engines read (made by earlier rows)."""
    if folder.endswith(".gguf") or engine in ("decodelab", "transformers"):
        return [folder]
    if engine == "llama.cpp":
        return [folder + (".f32.gguf" if dtype == "float32" else f".{dtype}.gguf")]
    if engine == "ctranslate2":
        return [folder, folder + f".ct2-{dtype}"]
    if engine == "plain-C":
        return [folder + ".llama2c.bin"]
    return [folder]


def warm_page_cache(paths):
    """Reads each file (a folder's files) once, so that every row loads from a warm page cache:
    another row's engine, holding gigabytes, may have pushed part of a large file out."""
    for path in paths:
        names = [os.path.join(path, f) for f in sorted(os.listdir(path))] if os.path.isdir(path) else [path]
        for name in names:
            if os.path.isfile(name):
                with open(name, "rb") as f:
                    while f.read(64 << 20):
                        pass


def timed(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def work_decodelab(folder, dtype, a):
    import decodelab

    t0 = time.perf_counter()
    m = decodelab.load(folder, dtype=dtype, threads=a.threads)
    load_s = time.perf_counter() - t0
    V = m.config.vocab_size
    rng = np.random.default_rng(0)
    prompt = rng.integers(3, V, size=a.prompt).tolist()
    m.generate(prompt[:8], max_new_tokens=4, eos_token_id=[], cache=m.new_cache(dtype=a.kv))  # warm-up
    g = m.generate(prompt, max_new_tokens=a.decode, eos_token_id=[], cache=m.new_cache(dtype=a.kv))
    res = {"prefill_tok_s": a.prompt / g.prefill_seconds, "decode_tok_s": g.decode_tokens_per_second,
           "ttft_s": g.time_to_first_token, "load_s": load_s}
    # The same decode after a one-token prompt (llama-bench's "tg" setting): nearly all of a step's
    # bytes are then weights, so this is the figure to hold against the weight-read bound.
    g = m.generate(prompt[:1], max_new_tokens=a.decode, eos_token_id=[], cache=m.new_cache(dtype=a.kv))
    res["decode_short_tok_s"] = g.decode_tokens_per_second
    for B in (1, 4, 16):
        caches = []
        for b in range(B):
            c = m.new_cache(dtype=a.kv)
            m.prefill(rng.integers(3, V, size=32).tolist(), c)
            caches.append(c)
        toks = [5] * B
        t0 = time.perf_counter()
        for _ in range(a.batch_steps):
            logits = m.decode_batch(toks, caches)
            toks = [int(x) for x in logits.argmax(1)]
        res[f"batch{B}_tok_s"] = B * a.batch_steps / (time.perf_counter() - t0)
    # The bytes of weights a decode step reads, as the engine counts them (a file's head kept in
    # its own blocks, say), for the bound.
    c = m.new_cache(dtype=a.kv)
    m.prefill(prompt[:1], c)
    with m.profile() as p:
        m.decode(5, c)
    res["weight_bytes_per_step"] = sum(r.weight_bytes for r in p.ops("decode"))
    return res


def work_transformers(folder, dtype, a):
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(a.threads)
    tdt = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype]
    m = AutoModelForCausalLM.from_pretrained(folder, dtype=tdt).eval()
    V = m.config.vocab_size
    rng = np.random.default_rng(0)
    prompt = torch.tensor([rng.integers(3, V, size=a.prompt).tolist()])

    def gen(ids, n):
        with torch.no_grad():
            m.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=n, min_new_tokens=n,
                       eos_token_id=None, pad_token_id=0)

    gen(prompt[:, :8], 4)
    t1 = timed(lambda: gen(prompt, 1))
    tn = timed(lambda: gen(prompt, a.decode))
    res = {"prefill_tok_s": a.prompt / t1, "decode_tok_s": (a.decode - 1) / (tn - t1), "ttft_s": t1}
    for B in (1, 4, 16):
        ids = torch.tensor(rng.integers(3, V, size=(B, 32)))
        t = timed(lambda: gen(ids, a.batch_steps)) - timed(lambda: gen(ids, 1))
        res[f"batch{B}_tok_s"] = B * (a.batch_steps - 1) / t
    return res


def work_ctranslate2(folder, dtype, a):
    import ctranslate2
    from tokenizers import Tokenizer

    ct = folder + f".ct2-{dtype}"
    if not os.path.exists(ct):
        ctranslate2.converters.TransformersConverter(folder).convert(ct, quantization=None, force=True)
    g = ctranslate2.Generator(ct, device="cpu", compute_type=dtype, intra_threads=a.threads)
    tok = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    V = tok.get_vocab_size()
    rng = np.random.default_rng(0)

    def strings(ids):
        return [tok.id_to_token(int(i)) for i in ids]

    prompt = strings(rng.integers(3, V, size=a.prompt))

    def gen(batch, n):
        g.generate_batch(batch, max_length=n, min_length=n, sampling_topk=1, include_prompt_in_result=False,
                         end_token=[])

    gen([prompt[:8]], 4)
    t1 = timed(lambda: gen([prompt], 1))
    tn = timed(lambda: gen([prompt], a.decode))
    res = {"prefill_tok_s": a.prompt / t1, "decode_tok_s": (a.decode - 1) / (tn - t1), "ttft_s": t1}
    for B in (1, 4, 16):
        batch = [strings(rng.integers(3, V, size=32)) for _ in range(B)]
        t = timed(lambda: gen(batch, a.batch_steps)) - timed(lambda: gen(batch, 1))
        res[f"batch{B}_tok_s"] = B * (a.batch_steps - 1) / t
    return res


def work_llamacpp(folder, dtype, a):
    """llama.cpp through llama-cpp-python's C API (no tokenizer: token ids in, logits out)."""
    import ctypes

    import llama_cpp as lc

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from decodelab.formats.gguf import export as gguf_export

    lc.llama_backend_init()
    if folder.endswith(".gguf"):  # a shared file, run as it is
        path = folder
    else:
        path = folder + ".f32.gguf"
        if not os.path.exists(path):
            gguf_export.export(folder, path)
    f32 = path
    if dtype != "float32" and not folder.endswith(".gguf"):
        path = folder + f".{dtype}.gguf"
        if not os.path.exists(path):
            qp = lc.llama_model_quantize_default_params()
            qp.nthread = a.threads
            qp.ftype = {"float16": lc.LLAMA_FTYPE_MOSTLY_F16, "bfloat16": lc.LLAMA_FTYPE_MOSTLY_BF16,
                        "q8_0": lc.LLAMA_FTYPE_MOSTLY_Q8_0, "q4_1": lc.LLAMA_FTYPE_MOSTLY_Q4_1}[dtype]
            if lc.llama_model_quantize(f32.encode(), path.encode(), ctypes.byref(qp)) != 0:
                raise RuntimeError("llama_model_quantize failed")
    mp = lc.llama_model_default_params()
    # On a machine with AMX, llama.cpp repacks q8_0 weights for its AMX kernels (an "extra buffer
    # type"); in llama-cpp-python 0.3.36 that path segfaults at the first llama_decode here, at any
    # prompt length, so q8_0 runs on llama.cpp's ordinary CPU kernels. Other types keep the default.
    mp.use_extra_bufts = dtype != "q8_0"
    t0 = time.perf_counter()
    model = lc.llama_model_load_from_file(path.encode(), mp)  # weights and vocabulary
    load_s = time.perf_counter() - t0
    if not model:
        raise RuntimeError("llama.cpp could not load " + path)
    cfg = model_cfg(folder)
    V = cfg["vocab_size"]
    rng = np.random.default_rng(0)
    max_seq = 16
    if a.kv == "q8_0" and head_dim(cfg) % 32:
        raise RuntimeError("llama.cpp's q8_0 cache stores blocks of 32 values; this model's head size is "
                           f"{head_dim(cfg)}")

    def context(n_ctx, n_seq):
        cp = lc.llama_context_default_params()
        cp.n_ctx = n_ctx
        cp.n_batch = cp.n_ubatch = max(a.prompt, 512)
        cp.n_seq_max = n_seq
        cp.n_threads = cp.n_threads_batch = a.threads
        if a.kv == "q8_0":  # llama.cpp's 8-bit cache (blocks of 32 values, one f16 scale each); a
            # quantized V cache needs its flash-attention path
            cp.type_k = cp.type_v = lc.GGML_TYPE_Q8_0
            cp.flash_attn_type = lc.LLAMA_FLASH_ATTN_TYPE_ENABLED
        ctx = lc.llama_init_from_model(model, cp)
        if not ctx:
            raise RuntimeError("llama_init_from_model failed")
        return ctx

    batch = lc.llama_batch_init(max(a.prompt, 512), 0, max_seq)

    def submit(ctx, seqs):
        """seqs: list of (seq_id, tokens, first position); logits for each sequence's last token."""
        n, last = 0, []
        for sid, toks, pos in seqs:
            for j, tok in enumerate(toks):
                batch.token[n] = tok
                batch.pos[n] = pos + j
                batch.n_seq_id[n] = 1
                batch.seq_id[n][0] = sid
                batch.logits[n] = j == len(toks) - 1
                n += 1
            last.append(n - 1)  # logits are asked for by batch index
        batch.n_tokens = n
        if lc.llama_decode(ctx, batch) != 0:
            raise RuntimeError("llama_decode failed")
        return [int(np.argmax(np.ctypeslib.as_array(lc.llama_get_logits_ith(ctx, i), shape=(V,))))
                for i in last]

    ctx = context(a.prompt + a.decode + 16, 1)
    mem = lc.llama_get_memory(ctx)
    prompt = rng.integers(3, V, size=a.prompt).tolist()
    submit(ctx, [(0, prompt[:8], 0)])  # warm-up
    lc.llama_memory_clear(mem, True)
    t0 = time.perf_counter()
    tok = submit(ctx, [(0, prompt, 0)])[0]
    t1 = time.perf_counter()
    for k in range(a.decode - 1):
        tok = submit(ctx, [(0, [tok], a.prompt + k)])[0]
    tn = time.perf_counter()
    res = {"prefill_tok_s": a.prompt / (t1 - t0), "decode_tok_s": (a.decode - 1) / (tn - t1), "ttft_s": t1 - t0,
           "load_s": load_s}
    # The same decode after a one-token prompt, as decodelab's decode@1.
    lc.llama_memory_clear(mem, True)
    tok = submit(ctx, [(0, prompt[:1], 0)])[0]
    t1 = time.perf_counter()
    for k in range(a.decode - 1):
        tok = submit(ctx, [(0, [tok], 1 + k)])[0]
    res["decode_short_tok_s"] = (a.decode - 1) / (time.perf_counter() - t1)
    lc.llama_free(ctx)
    for B in (1, 4, 16):
        ctx = context(B * (32 + a.batch_steps + 16), B)
        toks = submit(ctx, [(b, rng.integers(3, V, size=32).tolist(), 0) for b in range(B)])
        t0 = time.perf_counter()
        for k in range(a.batch_steps):
            toks = submit(ctx, [(b, [toks[b]], 32 + k) for b in range(B)])
        res[f"batch{B}_tok_s"] = B * a.batch_steps / (time.perf_counter() - t0)
        lc.llama_free(ctx)
    lc.llama_batch_free(batch)
    lc.llama_model_free(model)
    return res


def llama2c_export(folder, out):
    """A Hugging Face Llama folder as a llama2.c "v0" checkpoint (interleaved RoPE rows)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from decodelab.formats.gguf.export import _Folder, _unpermute

    cfg = model_cfg(folder)
    t = _Folder(folder)
    D, L, V = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    tied = cfg.get("tie_word_embeddings", False)
    layer = lambda name: np.stack([t[f"model.layers.{i}.{name}"] for i in range(L)])
    with open(out, "wb") as f:
        np.array([D, cfg["intermediate_size"], L, nh, nkv, V if tied else -V, cfg["max_position_embeddings"]],
                 dtype=np.int32).tofile(f)
        for a in (t["model.embed_tokens.weight"], layer("input_layernorm.weight"),
                  np.stack([_unpermute(t[f"model.layers.{i}.self_attn.q_proj.weight"], nh) for i in range(L)]),
                  np.stack([_unpermute(t[f"model.layers.{i}.self_attn.k_proj.weight"], nkv) for i in range(L)]),
                  layer("self_attn.v_proj.weight"), layer("self_attn.o_proj.weight"),
                  layer("post_attention_layernorm.weight"), layer("mlp.gate_proj.weight"),
                  layer("mlp.down_proj.weight"), layer("mlp.up_proj.weight"), t["model.norm.weight"],
                  np.zeros((cfg["max_position_embeddings"], D // nh), np.float32)):  # unused RoPE tables
            np.ascontiguousarray(a, dtype=np.float32).tofile(f)
        if not tied:
            t["lm_head.weight"].astype(np.float32).tofile(f)
    return out


def work_plainc(folder, dtype, a):
    """benchmarks/baseline/plainc.c: token-at-a-time fp32 decoding in the llama2.c style."""
    cfg = model_cfg(folder)
    if cfg["model_type"] != "llama":
        raise RuntimeError("the plain-C baseline runs Llama checkpoints only")
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "baseline", "plainc.c")
    with open(src, "rb") as f:  # one build per version of the source
        exe = os.path.join(os.path.dirname(folder), "plainc-" + hashlib.sha1(f.read()).hexdigest()[:12])
    if not os.path.exists(exe):
        subprocess.run(["gcc", "-O3", "-ffast-math", "-march=native", "-fopenmp", src, "-lm", "-o", exe], check=True)
    ckpt = folder + ".llama2c.bin"
    if not os.path.exists(ckpt):
        llama2c_export(folder, ckpt)
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), OMP_PROC_BIND="true")
    p = subprocess.run([exe, ckpt, str(a.prompt), str(a.decode)], capture_output=True, text=True, env=env, check=True)
    res = json.loads(p.stdout.strip().splitlines()[-1])
    res.pop("last_token", None)
    kib = res.pop("peak_rss_kib")
    res["child_rss_mib"] = kib / 1024 if kib > 0 else None
    return res


def host_info():
    """What the figures depend on: the CPU, its vector and matrix extensions, the threads."""
    from decodelab import _core
    model, flags = "", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and not model:
                    model = line.split(":", 1)[1].strip()
                elif line.startswith("flags"):
                    flags |= {x for x in line.split(":", 1)[1].split() if x.startswith(("avx512", "amx"))}
    except OSError:
        pass
    return {"cpu": model, "extensions": sorted(flags), "cpus_available": len(os.sched_getaffinity(0)),
            "bf16_matmul_native": _core.bf16_matmul_native(), "last_level_cache_bytes": last_level_cache_bytes()}


def last_level_cache_bytes():
    """The largest CPU cache's size (Linux sysfs), or 0 when it cannot be read."""
    best = 0
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for index in os.listdir(base):
            if not index.startswith("index"):
                continue
            with open(os.path.join(base, index, "size")) as f:
                text = f.read().strip()
            unit = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
            best = max(best, int(text.rstrip("KMG")) * unit)
    except (OSError, ValueError):
        return 0
    return best


def peak_rss_mib():
    """This process's peak resident set. Linux's VmHWM belongs to the process's own memory map, made
    new at exec; ru_maxrss does not start again at exec, so a worker started by a parent that had
    written the checkpoints would report the parent's peak (every decodelab row read 643 MiB so).
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


WORKERS = {"decodelab": work_decodelab, "transformers": work_transformers, "ctranslate2": work_ctranslate2,
           "llama.cpp": work_llamacpp, "plain-C": work_plainc}
# (engine, weights, KV cache). Our reduced-precision weights run with each cache dtype, and fp32
# weights also with a bf16 cache: the 16-bit cache llama.cpp's fp32 row reads (an f16 cache at every
# weight type, its default; with q8_0 weights also its q8_0 cache, against our int8 one). CTranslate2
# keeps an fp32 cache on CPU, transformers one in the model's dtype.
CONFIGS = [("decodelab", "float32", "float32"), ("decodelab", "float32", "bfloat16"),
           ("decodelab", "bfloat16", "float32"), ("decodelab", "bfloat16", "bfloat16"),
           ("decodelab", "int8", "float32"), ("decodelab", "int8", "bfloat16"),
           ("decodelab", "int8", "int8"), ("decodelab", "w8a8", "float32"), ("decodelab", "int4", "float32"),
           ("transformers", "float32", "float32"), ("transformers", "bfloat16", "bfloat16"),
           ("ctranslate2", "float32", "float32"), ("ctranslate2", "int8", "float32"),
           ("llama.cpp", "float32", "float16"), ("llama.cpp", "float16", "float16"), ("llama.cpp", "q8_0", "float16"),
           ("llama.cpp", "q8_0", "q8_0"), ("llama.cpp", "q4_0", "float16"), ("llama.cpp", "q4_1", "float16"),
           ("llama.cpp", "q4_k_m", "float16"),
           ("plain-C", "float32", "float32")]
# Precision classes for the ratios: each of ours against every peer format of the same width.
# w8a8 (int8 weights, 7-bit activations) is set against the same 8-bit peers; CTranslate2's int8
# also rounds activations (to 8 bits, one scale per row).
CLASSES = {"float32": ["float32"], "bfloat16": ["bfloat16", "float16"], "int8": ["int8", "q8_0"],
           "w8a8": ["int8", "q8_0"], "int4": ["q4_0", "q4_1", "q4_k_m"]}
# What runs on a GGUF file: decodelab at the file's native dtype (int4, or int8 for Q8_0) with an
# fp32 cache, and llama.cpp on the file itself with its default f16 cache.
GGUF_ROWS = {("decodelab", "int4", "float32"), ("decodelab", "int8", "float32")} | {
    ("llama.cpp", d, "float16") for d in ("q4_0", "q4_1", "q4_k_m", "q8_0")}


def gguf_native(path):
    """decodelab's dtype for a GGUF file when load() is given none."""
    from decodelab.formats.gguf.model import native_dtype
    from decodelab.formats.gguf.reader import GGUFFile

    with GGUFFile(path) as g:
        return native_dtype(g)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="+", default=["gpt2-124m", "llama-110m", "stories260K"])
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--decode", type=int, default=256)
    ap.add_argument("--batch-steps", type=int, default=32)
    ap.add_argument("--engines", nargs="+", default=sorted({c[0] for c in CONFIGS}),
                    help="engines to run (default: all; llama.cpp rows need llama-cpp-python)")
    ap.add_argument("--json", default="bench_speed.json")
    ap.add_argument("--tmp", default=None, help="folder for the checkpoints (default: a temporary one)")
    ap.add_argument("--kv", default="float32", help="KV-cache dtype of a decodelab worker")
    ap.add_argument("--rounds", type=int, default=1,
                    help="passes over all rows, interleaved; each row reports its best pass (default 1)")
    ap.add_argument("--skip", nargs="+", default=[], metavar="ENGINE:DTYPE",
                    help="rows to leave out, e.g. transformers:bfloat16 on a CPU without native bf16, where "
                         "torch emulates bf16 products and one 512-token GPT-2 row ran past 10 minutes")
    ap.add_argument("--row-timeout", type=float, default=900,
                    help="seconds one row may run before it is stopped and reported as an error (default 900)")
    ap.add_argument("--worker", nargs=3, metavar=("ENGINE", "FOLDER", "DTYPE"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.rounds < 1:
        ap.error(f"--rounds must be at least 1, got {a.rounds}")
    known = {f"{e}:{d}" for e, d, _ in CONFIGS}
    for s in a.skip:
        if s not in known:
            ap.error(f"--skip takes ENGINE:DTYPE from {sorted(known)}, got {s!r}")
    if a.row_timeout <= 0:
        ap.error(f"--row-timeout must be above 0 seconds, got {a.row_timeout}")
    if a.worker:
        engine, folder, dtype = a.worker
        res = WORKERS[engine](folder, dtype, a)
        res["peak_rss_mib"] = res.pop("child_rss_mib") if "child_rss_mib" in res else peak_rss_mib()
        print(json.dumps(res))
        return

    from decodelab import _core

    bw = _core.read_bandwidth(256 << 20, a.threads, 5)
    llc = last_level_cache_bytes()
    rows = []
    tmp_ctx = tempfile.TemporaryDirectory() if a.tmp is None else None
    tmp = a.tmp or tmp_ctx.name
    os.makedirs(tmp, exist_ok=True)
    plan = []
    for name in a.models:
        folder = prepare(name, tmp)
        prompt = min(a.prompt, 256) if name == "stories260K" else a.prompt
        arch = model_cfg(folder)["model_type"]
        for engine, dtype, kv in [c for c in CONFIGS if c[0] in a.engines and f"{c[0]}:{c[1]}" not in a.skip]:
            if engine == "plain-C" and arch != "llama":
                continue
            if folder.endswith(".gguf") and ((engine, dtype, kv) not in GGUF_ROWS or
                                             (engine == "llama.cpp" and dtype != gguf_label(name)) or
                                             (engine == "decodelab" and dtype != gguf_native(folder))):
                continue
            if not folder.endswith(".gguf") and dtype in ("q4_k_m", "q4_0"):
                continue
            plan.append((name, folder, prompt, engine, dtype, kv))
    # Rounds go over every row in turn, so a slow spell of this shared host lands on all engines
    # rather than on whichever rows ran during it; each row then keeps its best round.
    raw = [[] for _ in plan]
    for rnd in range(a.rounds):
        for i, (name, folder, prompt, engine, dtype, kv) in enumerate(plan):
            cmd = [sys.executable, __file__, "--worker", engine, folder, dtype, "--threads", str(a.threads),
                   "--prompt", str(prompt), "--decode", str(a.decode), "--batch-steps", str(a.batch_steps),
                   "--kv", kv]
            # This host's bandwidth drifts by a quarter over minutes (shared machine), so each row's
            # bound comes from probes taken just before and after it, the larger of the two.
            warm_page_cache(engine_files(folder, engine, dtype))
            bw_before = _core.read_bandwidth(256 << 20, a.threads, 5)
            try:
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=a.row_timeout)
            except subprocess.TimeoutExpired:
                p = None
            res = {"read_bandwidth_bytes_s": max(bw_before, _core.read_bandwidth(256 << 20, a.threads, 5))}
            if p is None:
                res["error"] = f"stopped after --row-timeout {a.row_timeout:g} s"
            elif p.returncode != 0:
                res["error"] = (p.stderr.strip().splitlines() or ["failed"])[-1][:200]
            else:
                res.update(json.loads(p.stdout.strip().splitlines()[-1]))
            raw[i].append(res)
            print(f"  round {rnd + 1}/{a.rounds} {name} {engine} {dtype} kv {kv}: "
                  + (res.get("error") or f"decode {res['decode_tok_s']:.1f} tok/s"), file=sys.stderr, flush=True)
    rows = []
    for (name, folder, prompt, engine, dtype, kv), runs in zip(plan, raw):
        row = {"model": name, "engine": engine, "dtype": dtype, "kv_cache": kv, "threads": a.threads,
               "prompt": prompt, "rounds": runs}
        ok = [r for r in runs if "error" not in r]
        if not ok:
            row["error"] = runs[-1]["error"]
            row["read_bandwidth_bytes_s"] = max(r["read_bandwidth_bytes_s"] for r in runs)
            rows.append(row)
            continue
        # Best of the rounds per figure: throughputs their maximum, time to first token and load their minimum;
        # peak memory and the bandwidth probe their maximum (the larger probe is the stricter bound).
        for key in ok[0]:
            vals = [r[key] for r in ok if r.get(key) is not None]
            if not vals or not isinstance(vals[0], (int, float)):
                row[key] = ok[0][key]
            else:
                row[key] = min(vals) if key in ("ttft_s", "load_s") else max(vals)
        bw_row = row["read_bandwidth_bytes_s"]
        # A GGUF file's bound counts the file's bytes for every engine: a layout that reads more
        # than the file holds must not make the bound easier to reach.
        wb = (weight_bytes_per_step(folder, dtype) if folder.endswith(".gguf")
              else row.get("weight_bytes_per_step") or weight_bytes_per_step(folder, dtype))
        if folder.endswith(".gguf"):
            row["file_bytes_per_step"] = wb
        kv_long, kv_short = kv_bytes_per_step(folder, kv, prompt + a.decode // 2), kv_bytes_per_step(
            folder, kv, 1 + a.decode // 2)
        # A step that reads less than the last-level cache holds can run from the cache: the DRAM
        # bound says nothing there, so it is not reported.
        row["fits_in_cache"] = bool(llc) and wb + kv_long <= llc
        row["decode_bound_tok_s"] = bw_row / wb
        # The same with the cache a step reads at the mean decode position added.
        row["decode_bound_with_kv_tok_s"] = bw_row / (wb + kv_long)
        # Each round's decode against that round's own probe (the host's bandwidth drifts between
        # rounds): the best round's share of the bound counting every byte a step reads.
        row["decode_bound_share"] = max(r["decode_tok_s"] * (wb + kv_long) / r["read_bandwidth_bytes_s"] for r in ok)
        if row.get("decode_short_tok_s") is not None:
            row["decode_short_bound_with_kv_tok_s"] = bw_row / (wb + kv_short)
            row["decode_short_bound_share"] = max(
                r["decode_short_tok_s"] * (wb + kv_short) / r["read_bandwidth_bytes_s"]
                for r in ok if r.get("decode_short_tok_s"))
        rows.append(row)
    cols = [("prefill tok/s", "prefill_tok_s", "{:.0f}"), ("decode tok/s", "decode_tok_s", "{:.1f}"),
            ("bound", "decode_bound_tok_s", "{:.1f}"), ("bound+KV", "decode_bound_with_kv_tok_s", "{:.1f}"),
            ("decode@1", "decode_short_tok_s", "{:.1f}"),
            ("probe GB/s", "read_bandwidth_bytes_s", "{:.1f}"),
            ("ttft ms", "ttft_s", "{:.1f}"),
            ("RSS MiB", "peak_rss_mib", "{:.0f}"), ("load s", "load_s", "{:.2f}"), ("b1 tok/s", "batch1_tok_s", "{:.1f}"),
            ("b4 tok/s", "batch4_tok_s", "{:.1f}"), ("b16 tok/s", "batch16_tok_s", "{:.1f}")]
    print(f"read bandwidth probe: {bw / 1e9:.1f} GB/s at the start ({a.threads} threads, 256 MiB); each row's bound "
          "uses the largest of the probes taken just before and after it (probe column)")
    if a.rounds > 1:
        print(f"each row: best of {a.rounds} interleaved rounds (throughput maximum, TTFT minimum)")
    head = f"{'model':<12} {'engine':<13} {'dtype':<9} {'KV':<9}" + "".join(f"{c[0]:>14}" for c in cols)
    print(head)
    print("-" * len(head))
    for r in rows:
        line = f"{r['model']:<12} {r['engine']:<13} {r['dtype']:<9} {r['kv_cache']:<9}"
        if "error" in r:
            print(line + "  error: " + r["error"])
            continue
        for _, key, fmt in cols:
            if r.get(key) is None:  # the plain-C baseline has no batched decode
                line += f"{'-':>14}"
                continue
            if r.get("fits_in_cache") and key.startswith("decode_bound"):
                line += f"{'in cache':>14}"
                continue
            v = r[key] * 1e3 if key == "ttft_s" else r[key] / 1e9 if key == "read_bandwidth_bytes_s" else r[key]
            line += f"{fmt.format(v):>14}"
        print(line)
    # Ratios: decodelab against the best peer at the same precision class.
    print("\nratios (decodelab / best peer at the same weight precision; >1 means decodelab is faster; "
          "'own fp32': decode against our fp32 row)")
    for name in a.models:
        own = next((r for r in rows if r["model"] == name and r["engine"] == "decodelab" and r["dtype"] == "float32"
                    and r["kv_cache"] == "float32" and "error" not in r), None)
        for ours in [r for r in rows if r["model"] == name and r["engine"] == "decodelab" and "error" not in r]:
            peers = [r for r in rows if r["model"] == name and r["engine"] != "decodelab"
                     and r["dtype"] in CLASSES[ours["dtype"]] and "error" not in r]
            if not peers:
                continue
            parts = []
            for key, label in (("prefill_tok_s", "prefill"), ("decode_tok_s", "decode"),
                               ("decode_short_tok_s", "decode@1"), ("batch16_tok_s", "b16")):
                have = [r for r in peers if r.get(key) is not None]
                if not have or ours.get(key) is None:
                    continue
                best = max(have, key=lambda r: r[key])
                parts.append(f"{label} {ours[key] / best[key]:.2f}x vs {best['engine']}")
            frac = ours["decode_tok_s"] / ours["decode_bound_tok_s"]
            frac_kv = ours["decode_tok_s"] / ours["decode_bound_with_kv_tok_s"]
            rss_peers = [r["peak_rss_mib"] for r in peers if r.get("peak_rss_mib")]
            if rss_peers and ours.get("peak_rss_mib"):
                parts.append(f"peak RSS {ours['peak_rss_mib']:.0f} MiB vs {min(rss_peers):.0f}")
            if ours.get("file_bytes_per_step") and ours.get("weight_bytes_per_step"):
                parts.append(f"reads {ours['weight_bytes_per_step'] / 2**20:.0f} MiB of weights a token against the "
                             f"file's {ours['file_bytes_per_step'] / 2**20:.0f}")
            load_peers = [r["load_s"] for r in peers if r.get("load_s")]
            if load_peers and ours.get("load_s"):
                parts.append(f"load {ours['load_s']:.2f} s vs {min(load_peers):.2f}")
            if own and ours is not own:
                parts.append(f"own fp32 {ours['decode_tok_s'] / own['decode_tok_s']:.2f}x")
            if ours.get("fits_in_cache"):
                print(f"  {name:<12} {ours['dtype']:<9} KV {ours['kv_cache']:<9} " + ", ".join(parts)
                      + f"; a step reads less than the {llc >> 20} MiB last-level cache holds: no DRAM bound")
                continue
            short = ""
            if ours.get("decode_short_bound_share") is not None:
                short = (f"; after a 1-token prompt {ours['decode_short_tok_s'] / ours['decode_bound_tok_s']:.0%}, "
                         f"best round {ours['decode_short_bound_share']:.0%} counting the cache")
            print(f"  {name:<12} {ours['dtype']:<9} KV {ours['kv_cache']:<9} " + ", ".join(parts)
                  + f", decode at {frac:.0%} of the bound ({frac_kv:.0%} counting the cache, best round "
                  f"{ours['decode_bound_share']:.0%})" + short)
    with open(a.json, "w") as f:
        json.dump({"argv": sys.argv, "host": host_info(), "read_bandwidth_bytes_s": bw, "rows": rows}, f, indent=2)
    print(f"wrote {a.json}")
    if tmp_ctx:
        tmp_ctx.cleanup()


if __name__ == "__main__":
    main()
