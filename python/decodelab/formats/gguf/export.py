"""Write a Hugging Face folder (GPT-2, GPT-NeoX, Llama, Mistral, Qwen2/3, Gemma 2/3, Phi-3) as a
GGUF file that llama.cpp runs: for the speed benchmark (llama.cpp beside decodelab on the same
weights) and for tests that need GGUF files of any shape and type. Needs the gguf package (a test
extra). From the command line::

    python -m decodelab.formats.gguf.export FOLDER OUT.gguf [--type TYPE] [--check]

with TYPE one of F32 (the default), F16, Q8_0, Q5_1, Q5_0, Q4_1, Q4_0 and Q4_K.

--check compares (decodelab.testing.llama_cpp.compare_gguf) llama.cpp's logits on the file with
decodelab's on the folder (needs llama-cpp-python): 2.6e-3 at most on the Llama 110M and GPT-2
124M shapes, llama.cpp keeping its KV cache in f16 by default.

The matrices are stored as --type (F32 by default; F16 and Q8_0 to Q4_0 through gguf.quants; Q4_K
through decodelab.formats.gguf.quantize, rows whose width is not a multiple of 256 falling back to
Q5_0 as llama.cpp's quantizer does), 1-D tensors (norms, biases, RoPE factors) as F32. The
folder's tokenizer goes along when it is one GGUF can hold: a llama2.c tokenizer.bin as a `llama`
SentencePiece vocabulary (pieces with "▁" for spaces, scores, byte and control tokens), GPT-2's
vocab.json + merges.txt as a `gpt2` one; otherwise none (llama.cpp's "none" vocabulary: the
benchmark feeds token ids). Tensor names and layouts follow llama.cpp's converter: GGUF matrices
are (out, in), so GPT-2's Conv1D weights are transposed, and Llama's q/k rows go back to the
interleaved RoPE order llama.cpp's "llama" architecture uses (the inverse of the Meta-to-HF
permutation). A model llama.cpp would run differently (a Gemma window pattern, RoPE base or query
scale it fixes otherwise, Mistral's window on a `llama` file) is refused by name; Phi-3's window
is written, though llama.cpp ignores it.

Examples:
    >>> TYPES
    ('F32', 'F16', 'Q8_0', 'Q5_1', 'Q5_0', 'Q4_1', 'Q4_0', 'Q4_K')
"""
import json
import mmap
import os
from collections.abc import Mapping

import numpy as np

from .quantize import quantize_q4_k

__all__ = ["TYPES", "export"]


def _unpermute(w, n_heads):
    """HF rotate_half row order -> interleaved pairs, per head."""
    out, dim = w.shape
    hd = out // n_heads
    return w.reshape(n_heads, 2, hd // 2, dim).transpose(0, 2, 1, 3).reshape(out, dim)


class _Folder(Mapping):
    """A folder's safetensors tensors by name as float32. F32 tensors are views of the files'
    memory maps, read only when written out (an fp32 folder of any size streams through, one
    tensor resident at a time: see release); others are converted on access, or when written
    out where `lazy` names them (a bf16 folder streams through too)."""

    def __init__(self, folder):
        self._maps, self._where = [], {}
        for f in sorted(f for f in os.listdir(folder) if f.endswith(".safetensors")):
            with open(os.path.join(folder, f), "rb") as fh:
                m = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
            n = int.from_bytes(m[:8], "little")
            header = json.loads(m[8:8 + n])
            header.pop("__metadata__", None)
            for name, h in header.items():
                self._where[name] = (m, h["dtype"], tuple(h["shape"]), 8 + n + h["data_offsets"][0],
                                     h["data_offsets"][1] - h["data_offsets"][0])
            self._maps.append(m)

    def __getitem__(self, name):
        m, dtype, shape, at, nbytes = self._where[name]
        kind = self._kind(name, dtype)
        a = np.frombuffer(m, kind, nbytes // np.dtype(kind).itemsize, at).reshape(shape)
        if dtype == "F16":
            return a.astype(np.float32)
        if dtype == "BF16":
            return (a.astype(np.uint32) << 16).view(np.float32)
        return a

    def lazy(self, name):
        """Tensor `name` as __getitem__ gives it, an F32 view at once, any other dtype converted
        only when it is written (_Later): indexing converts at once, and the bf16 matrices of an
        8B folder held as fp32 together took more than 24 GiB."""
        m, dtype, shape, at, nbytes = self._where[name]
        self._kind(name, dtype)  # an unreadable dtype raises now, before any tensor is written
        return self[name] if dtype == "F32" else _Later(self.__getitem__, name, shape=shape)

    @staticmethod
    def _kind(name, dtype):
        kind = {"F32": "<f4", "F16": "<f2", "BF16": "<u2"}.get(dtype)
        if kind is None:
            raise ValueError(f"tensor {name!r} has dtype {dtype}; the exporter reads F32, F16 and BF16")
        return kind

    def __iter__(self):
        return iter(self._where)

    def __len__(self):
        return len(self._where)

    def release(self):
        """Drops the pages read so far from this process's resident set (they stay in the page
        cache): called after each tensor is written."""
        for m in self._maps:
            if hasattr(m, "madvise") and hasattr(mmap, "MADV_DONTNEED"):
                m.madvise(mmap.MADV_DONTNEED)


_tensors = _Folder  # the name benchmarks used before the folder was read lazily


class _Later:
    """A tensor computed when it is written (a permuted copy, a converted bf16 matrix), so that
    the copies of all layers are not held at once. `shape` defaults to the first argument's; an
    argument that is itself a _Later is computed first."""

    def __init__(self, fn, *args, shape=None):
        self.fn, self.args = fn, args
        self.shape = tuple(args[0].shape if shape is None else shape)

    def __call__(self):
        return self.fn(*(a() if isinstance(a, _Later) else a for a in self.args))


# Layer counts llama.cpp takes for the 27B models, whose scores it scales by (hidden / heads)^-0.5.
_GEMMA_27B_LAYERS = {"gemma2": 46, "gemma3": 62}


def _linear_factor(rope, head_dim):
    """Linear RoPE scaling's factor, from the frequencies it divided."""
    base = 1.0 / rope.theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    return float(np.float32(np.median(base / np.asarray(rope.inv_freq, np.float64))))


def _writer(out, arch, model):
    """A GGUF writer with the shape every Llama-like architecture records (llama.cpp's keys)."""
    import gguf

    w = gguf.GGUFWriter(out, arch)
    w.add_context_length(model.max_position_embeddings)
    w.add_embedding_length(model.hidden_size)
    w.add_feed_forward_length(model.intermediate_size)
    w.add_block_count(model.n_layers)
    w.add_head_count(model.n_heads)
    w.add_head_count_kv(model.n_kv_heads)
    return w


TYPES = ("F32", "F16", "Q8_0", "Q5_1", "Q5_0", "Q4_1", "Q4_0", "Q4_K")


def _add_tokenizer(w, folder, vocab_size):
    """Writes the folder's tokenizer as GGUF metadata (llama.cpp's keys), or the "none" model."""
    from ...text.tokenizer import HFTokenizer, Llama2cTokenizer, _BYTE_PIECE

    bin_path = os.path.join(folder, "tokenizer.bin")
    vj, mt = os.path.join(folder, "vocab.json"), os.path.join(folder, "merges.txt")
    if os.path.exists(bin_path):
        tok = Llama2cTokenizer(bin_path, vocab_size)
        # llama2.c's export writes BOS and EOS as "\n<s>\n" and "\n</s>\n" and spaces as " ".
        tokens, types = [], []
        for i, piece in enumerate(tok.pieces):
            text = piece.decode("utf-8")
            if i in (tok.bos_token_id, tok.eos_token_id):
                text, kind = text.strip("\n"), 3
            elif i == 0:
                kind = 2
            elif _BYTE_PIECE.match(piece):
                kind = 6
            else:
                text, kind = text.replace(" ", "\u2581"), 1
            tokens.append(text)
            types.append(kind)
        w.add_tokenizer_model("llama")
        w.add_tokenizer_pre("default")
        w.add_token_list(tokens)
        w.add_token_scores([float(x) for x in tok.scores])
        w.add_token_types(types)
        w.add_unk_token_id(0)
        w.add_bos_token_id(tok.bos_token_id)
        w.add_eos_token_id(tok.eos_token_id)
        w.add_add_bos_token(True)
        w.add_add_eos_token(False)
        w.add_add_space_prefix(True)
    elif os.path.exists(vj) and os.path.exists(mt):
        with open(vj, encoding="utf-8") as f:
            vocab = json.load(f)
        tokens = [None] * len(vocab)
        for t, i in vocab.items():
            tokens[i] = t
        tok = HFTokenizer.from_gpt2_files(vj, mt)
        with open(mt, encoding="utf-8") as f:
            merges = [ln.rstrip("\n") for ln in f if ln.strip() and not ln.startswith("#version")]
        if None in tokens:
            raise ValueError(f"{vj}: token ids are not 0..{len(tokens) - 1}")
        if len(tokens) != vocab_size:
            raise ValueError(f"{vj} has {len(tokens)} tokens but the model's vocabulary is {vocab_size}")
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("gpt-2")  # llama.cpp's name for GPT-2's pre-tokenizer
        w.add_token_list(tokens)
        w.add_token_types([3 if t == "<|endoftext|>" else 1 for t in tokens])
        w.add_token_merges(merges)
        w.add_bos_token_id(tok.bos_token_id)
        w.add_eos_token_id(tok.eos_token_id)
    else:
        w.add_tokenizer_model("none")


def export(folder, out, tensor_type="F32"):
    """Writes a Hugging Face folder's weights (and tokenizer, where GGUF can hold it) as a GGUF file.

    The file is laid out as llama.cpp's converter writes it (see the module's description): the
    matrices as ``tensor_type``, 1-D tensors as F32, and a Llama-family model's q/k rows in
    llama.cpp's interleaved RoPE order. A model llama.cpp would run differently is refused.

    Args:
        folder: the Hugging Face folder: config.json and its .safetensors files (all of them are
            read, as float32), with tokenizer.bin (llama2.c) or vocab.json + merges.txt (GPT-2)
            to carry a vocabulary; without either the file gets llama.cpp's "none" vocabulary.
            model_type must be gpt2, gpt_neox, llama, mistral, qwen2, qwen3, gemma2, gemma3
            (or gemma3_text) or phi3.
        out: the GGUF file to write (overwritten if it exists).
        tensor_type: how the matrices are stored, one of TYPES: "F32" (the default), "F16",
            "Q8_0", "Q5_1", "Q5_0", "Q4_1", "Q4_0" or "Q4_K" (rows whose width is not a multiple
            of 256 fall back to Q5_0).

    Returns:
        ``out``, the path written.

    Raises:
        ValueError: ``tensor_type`` is not one of TYPES; the model_type is not exported; its RoPE
            scaling is not one the file can carry (default or llama3 for the Llama family,
            linear for Gemma 3, longrope for Phi-3, default for GPT-NeoX); a Llama-family model
            has a sliding window; a Gemma model's window pattern, query scale, soft caps or local
            RoPE base differ from those llama.cpp fixes; the config fails decodelab's own checks;
            or a GPT-2 vocab.json does not number its tokens 0..n-1 or has another size than the
            model's vocabulary.
        KeyError: config.json or the weights lack a key or tensor the model type needs.
        FileNotFoundError: the folder has no config.json.
        ImportError: the gguf package is not installed.

    Examples:
        >>> from collections import Counter
        >>> from decodelab.testing import write_checkpoint
        >>> from decodelab.formats.gguf.reader import GGUFFile
        >>> folder = write_checkpoint("ckpt", "llama-tiny")
        >>> export(folder, "m.gguf", "Q8_0")
        'm.gguf'
        >>> with GGUFFile("m.gguf") as g:
        ...     print(sorted(Counter(t.type.name for t in g.tensors.values()).items()))
        [('F32', 5), ('Q8_0', 16)]
        >>> export(folder, "m.gguf", "Q3_K")
        Traceback (most recent call last):
        ...
        ValueError: tensor_type must be one of F32, F16, Q8_0, Q5_1, Q5_0, Q4_1, Q4_0, Q4_K, got 'Q3_K'
    """
    import gguf

    if tensor_type not in TYPES:
        raise ValueError(f"tensor_type must be one of {', '.join(TYPES)}, got {tensor_type!r}")

    with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    t = _Folder(folder)
    if cfg["model_type"] == "gpt2":
        arch = "gpt2"
        D, L = cfg["n_embd"], cfg["n_layer"]
        w = gguf.GGUFWriter(out, arch)
        w.add_context_length(cfg["n_positions"])
        w.add_embedding_length(D)
        w.add_feed_forward_length(cfg.get("n_inner") or 4 * D)
        w.add_block_count(L)
        w.add_head_count(cfg["n_head"])
        w.add_layer_norm_eps(cfg["layer_norm_epsilon"])
        p = "transformer." if "transformer.wte.weight" in t else ""
        names = {"token_embd.weight": t[p + "wte.weight"], "position_embd.weight": t[p + "wpe.weight"],
                 "output_norm.weight": t[p + "ln_f.weight"], "output_norm.bias": t[p + "ln_f.bias"]}
        for i in range(L):
            h = f"{p}h.{i}."
            for src, dst in (("ln_1", "attn_norm"), ("ln_2", "ffn_norm")):
                names[f"blk.{i}.{dst}.weight"] = t[h + src + ".weight"]
                names[f"blk.{i}.{dst}.bias"] = t[h + src + ".bias"]
            for src, dst in (("attn.c_attn", "attn_qkv"), ("attn.c_proj", "attn_output"),
                             ("mlp.c_fc", "ffn_up"), ("mlp.c_proj", "ffn_down")):
                names[f"blk.{i}.{dst}.weight"] = np.ascontiguousarray(t[h + src + ".weight"].T)  # Conv1D (in, out)
                names[f"blk.{i}.{dst}.bias"] = t[h + src + ".bias"]
        if "lm_head.weight" in t and not cfg.get("tie_word_embeddings", True):
            names["output.weight"] = t["lm_head.weight"]
    elif cfg["model_type"] in ("llama", "qwen2", "qwen3", "mistral"):
        from ...config import from_hf_dict

        model = from_hf_dict(cfg)  # checks the config, and its RoPE, as load() would
        if model.sliding_window:
            raise ValueError("llama.cpp reads this family as 'llama', without sliding windows: a model with "
                             "sliding_window set would not be the same model there")
        if model.rope.rope_type not in ("default", "llama3"):
            raise ValueError(f"rope scaling {model.rope.rope_type!r} is not exported (default and llama3 are)")
        # llama.cpp's names: Qwen2 and Qwen3 have their own architectures with rotate_half RoPE;
        # Mistral without a sliding window is a Llama.
        arch = {"qwen2": "qwen2", "qwen3": "qwen3"}.get(cfg["model_type"], "llama")
        L, nh, nkv = model.n_layers, model.n_heads, model.n_kv_heads
        hd = model.head_dim
        permute = (lambda x, n: _Later(_unpermute, x, n)) if arch == "llama" else (lambda x, n: x)
        w = _writer(out, arch, model)
        w.add_key_length(hd)
        w.add_value_length(hd)
        w.add_rope_dimension_count(hd)
        w.add_rope_freq_base(model.rope_theta)
        w.add_layer_norm_rms_eps(model.norm_eps)
        names = {"token_embd.weight": t.lazy("model.embed_tokens.weight"), "output_norm.weight": t["model.norm.weight"]}
        if not model.tie_word_embeddings:
            names["output.weight"] = t.lazy("lm_head.weight")
        if model.rope.rope_type == "llama3":  # llama.cpp divides each frequency by its factor
            base = 1.0 / model.rope_theta ** (np.arange(0, hd, 2, dtype=np.float64) / hd)
            names["rope_freqs.weight"] = (base.astype(np.float32) / np.asarray(model.rope.inv_freq, np.float32))
        for i in range(L):
            h = f"model.layers.{i}."
            names[f"blk.{i}.attn_norm.weight"] = t[h + "input_layernorm.weight"]
            names[f"blk.{i}.ffn_norm.weight"] = t[h + "post_attention_layernorm.weight"]
            names[f"blk.{i}.attn_q.weight"] = permute(t.lazy(h + "self_attn.q_proj.weight"), nh)
            names[f"blk.{i}.attn_k.weight"] = permute(t.lazy(h + "self_attn.k_proj.weight"), nkv)
            names[f"blk.{i}.attn_v.weight"] = t.lazy(h + "self_attn.v_proj.weight")
            names[f"blk.{i}.attn_output.weight"] = t.lazy(h + "self_attn.o_proj.weight")
            for x, n in (("q", nh), ("k", nkv), ("v", 0), ("o", 0)):
                b = t.get(h + f"self_attn.{x}_proj.bias")
                if b is not None:
                    names[f"blk.{i}.attn_{'output' if x == 'o' else x}.bias"] = \
                        (_unpermute(b[:, None], n)[:, 0] if arch == "llama" else b) if n else b
            if model.qk_norm:
                names[f"blk.{i}.attn_q_norm.weight"] = t[h + "self_attn.q_norm.weight"]
                names[f"blk.{i}.attn_k_norm.weight"] = t[h + "self_attn.k_norm.weight"]
            names[f"blk.{i}.ffn_gate.weight"] = t.lazy(h + "mlp.gate_proj.weight")
            names[f"blk.{i}.ffn_up.weight"] = t.lazy(h + "mlp.up_proj.weight")
            names[f"blk.{i}.ffn_down.weight"] = t.lazy(h + "mlp.down_proj.weight")
    elif cfg["model_type"] in ("gemma2", "gemma3", "gemma3_text"):
        from ...config import from_hf_dict

        model = from_hf_dict(cfg)
        arch = model.family
        D, L, hd = model.hidden_size, model.n_layers, model.head_dim
        # llama.cpp scales scores by head_dim^-0.5, and by (hidden / heads)^-0.5 for its 27B types.
        scale = (D // model.n_heads) ** -0.5 if L == _GEMMA_27B_LAYERS[arch] else hd ** -0.5
        if abs(model.gemma["attn_scale"] - scale) > 1e-12:
            raise ValueError(f"llama.cpp scales {arch}'s scores by {scale:.6g} for {L} layers: a "
                             f"query_pre_attn_scalar of {model.gemma['attn_scale'] ** -2:g} would not be the same "
                             "model there")
        window = max(model.sliding_window or (0,))
        every = 2 if arch == "gemma2" else 6  # llama.cpp's fixed patterns: the last of each `every` is global
        if model.sliding_window and model.sliding_window != tuple(
                window if (i + 1) % every else 0 for i in range(L)):
            raise ValueError(f"llama.cpp runs {arch} with a sliding window on all but every {every}th layer; "
                             "these layer_types differ")
        w = _writer(out, arch, model)
        w.add_key_length(hd)
        w.add_value_length(hd)
        w.add_rope_freq_base(model.rope_theta)
        w.add_layer_norm_rms_eps(model.norm_eps)
        w.add_sliding_window(window)
        if arch == "gemma2":
            w.add_attn_logit_softcapping(model.gemma["attn_softcap"])
            w.add_final_logit_softcapping(model.gemma["final_softcap"])
        else:  # llama.cpp's gemma3: no soft caps, local layers at base 10000 unscaled
            if model.gemma["attn_softcap"] or model.gemma["final_softcap"]:
                raise ValueError("llama.cpp's gemma3 has no soft caps: a Gemma 3 config with "
                                 "attn_logit_softcapping or final_logit_softcapping would not be the same model there")
            if model.rope_local.theta != 10000.0:
                raise ValueError(f"llama.cpp runs Gemma 3's sliding layers at RoPE base 10000, not "
                                 f"{model.rope_local.theta:g}")
            if model.rope.rope_type == "linear":
                w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
                w.add_rope_scaling_factor(_linear_factor(model.rope, hd))
            elif model.rope.rope_type != "default":
                raise ValueError(f"rope scaling {model.rope.rope_type!r} is not exported for gemma3 (linear is)")
        # llama.cpp stores Gemma's norm weights as the 1 + w they are applied as.
        names = {"token_embd.weight": t.lazy("model.embed_tokens.weight"),
                 "output_norm.weight": 1 + t["model.norm.weight"]}
        for i in range(L):
            h = f"model.layers.{i}."
            for src, dst in (("input_layernorm", "attn_norm"), ("post_attention_layernorm", "post_attention_norm"),
                             ("pre_feedforward_layernorm", "ffn_norm"), ("post_feedforward_layernorm", "post_ffw_norm"),
                             ("self_attn.q_norm", "attn_q_norm"), ("self_attn.k_norm", "attn_k_norm")):
                if h + src + ".weight" in t:
                    names[f"blk.{i}.{dst}.weight"] = 1 + t[h + src + ".weight"]
            for src, dst in (("self_attn.q_proj", "attn_q"), ("self_attn.k_proj", "attn_k"), ("self_attn.v_proj", "attn_v"),
                             ("self_attn.o_proj", "attn_output"), ("mlp.gate_proj", "ffn_gate"), ("mlp.up_proj", "ffn_up"),
                             ("mlp.down_proj", "ffn_down")):
                names[f"blk.{i}.{dst}.weight"] = t.lazy(h + src + ".weight")
    elif cfg["model_type"] == "phi3":
        from ...config import from_hf_dict

        model = from_hf_dict(cfg)
        arch = "phi3"
        L, hd = model.n_layers, model.head_dim
        w = _writer(out, arch, model)
        w.add_rope_dimension_count(hd)
        w.add_rope_freq_base(model.rope_theta)
        w.add_layer_norm_rms_eps(model.norm_eps)
        if model.sliding_window:  # llama.cpp ignores it (a different model past the window); decodelab reads it
            w.add_sliding_window(model.sliding_window[0])
        names = {"token_embd.weight": t.lazy("model.embed_tokens.weight"), "output_norm.weight": t["model.norm.weight"]}
        if not model.tie_word_embeddings:
            names["output.weight"] = t.lazy("lm_head.weight")
        if model.rope.rope_type == "longrope":  # the factors as tensors, as llama.cpp's converter writes them
            params = dict(cfg.get("rope_parameters") or {}, **(cfg.get("rope_scaling") or {}))
            w.add_rope_scaling_attn_factors(model.rope.attention_factor)
            w.add_rope_scaling_orig_ctx_len(model.rope.original_max)
            names["rope_factors_long.weight"] = np.asarray(params["long_factor"], np.float32)
            names["rope_factors_short.weight"] = np.asarray(params["short_factor"], np.float32)
        elif model.rope.rope_type != "default":
            raise ValueError(f"rope scaling {model.rope.rope_type!r} is not exported for phi3 (longrope is)")
        for i in range(L):
            h = f"model.layers.{i}."
            for src, dst in (("input_layernorm", "attn_norm"), ("post_attention_layernorm", "ffn_norm"),
                             ("self_attn.qkv_proj", "attn_qkv"), ("self_attn.o_proj", "attn_output"),
                             ("mlp.gate_up_proj", "ffn_up"), ("mlp.down_proj", "ffn_down")):
                names[f"blk.{i}.{dst}.weight"] = t.lazy(h + src + ".weight")
    elif cfg["model_type"] == "gpt_neox":
        from ...config import from_hf_dict

        model = from_hf_dict(cfg)
        if model.rope.rope_type != "default":
            raise ValueError(f"rope scaling {model.rope.rope_type!r} is not exported for gpt_neox")
        arch = "gptneox"
        D, L, nh, hd = model.hidden_size, model.n_layers, model.n_heads, model.head_dim
        w = _writer(out, arch, model)  # head_count_kv = head_count, llama.cpp's own default for gptneox
        w.add_rope_dimension_count(model.rotary_dim or hd)
        w.add_rope_freq_base(model.rope_theta)
        w.add_parallel_residual(model.parallel_residual)
        w.add_layer_norm_eps(model.norm_eps)
        names = {"token_embd.weight": t["gpt_neox.embed_in.weight"],
                 "output_norm.weight": t["gpt_neox.final_layer_norm.weight"],
                 "output_norm.bias": t["gpt_neox.final_layer_norm.bias"]}
        if not model.tie_word_embeddings:
            names["output.weight"] = t["embed_out.weight"]
        for i in range(L):
            h = f"gpt_neox.layers.{i}."
            for src, dst in (("input_layernorm", "attn_norm"), ("post_attention_layernorm", "ffn_norm"),
                             ("attention.dense", "attn_output"), ("mlp.dense_h_to_4h", "ffn_up"),
                             ("mlp.dense_4h_to_h", "ffn_down")):
                names[f"blk.{i}.{dst}.weight"] = t[h + src + ".weight"]
                names[f"blk.{i}.{dst}.bias"] = t[h + src + ".bias"]
            # Hugging Face's rows go [q_h | k_h | v_h] per head; llama.cpp's [q | k | v].
            qkv_w, qkv_b = t[h + "attention.query_key_value.weight"], t[h + "attention.query_key_value.bias"]
            names[f"blk.{i}.attn_qkv.weight"] = np.ascontiguousarray(
                qkv_w.reshape(nh, 3, hd, D).transpose(1, 0, 2, 3).reshape(3 * D, D))
            names[f"blk.{i}.attn_qkv.bias"] = np.ascontiguousarray(qkv_b.reshape(nh, 3, hd).transpose(1, 0, 2).reshape(-1))
    else:
        raise ValueError(f"model_type {cfg['model_type']!r}: only gpt2, gpt_neox, gemma2, gemma3, llama, mistral, "
                         "phi3, qwen2 and qwen3 are exported")
    w.add_file_type({"F32": gguf.LlamaFileType.ALL_F32, "F16": gguf.LlamaFileType.MOSTLY_F16,
                     "Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0, "Q5_1": gguf.LlamaFileType.MOSTLY_Q5_1,
                     "Q5_0": gguf.LlamaFileType.MOSTLY_Q5_0, "Q4_1": gguf.LlamaFileType.MOSTLY_Q4_1,
                     "Q4_0": gguf.LlamaFileType.MOSTLY_Q4_0, "Q4_K": gguf.LlamaFileType.MOSTLY_Q4_K_S}[tensor_type])
    _add_tokenizer(w, folder, cfg["vocab_size"])
    w.add_vocab_size(cfg["vocab_size"])
    # Streamed: every tensor's type and size first (the header lists them), then each tensor
    # computed, stored and written in turn, its source pages released.
    def stored_type(shape):
        if len(shape) < 2 or tensor_type == "F32":
            return gguf.GGMLQuantizationType.F32
        if tensor_type == "F16":
            return gguf.GGMLQuantizationType.F16
        # Q4_K rows of another width: Q5_0, as llama.cpp falls back
        return gguf.GGMLQuantizationType["Q5_0" if tensor_type == "Q4_K" and shape[-1] % 256 else tensor_type]

    def shape_of(arr):
        return tuple(arr.shape)

    for name, arr in names.items():
        qtype = stored_type(shape_of(arr))
        raw = gguf.quant_shape_to_byte_shape(shape_of(arr), qtype)  # bytes per row of any type, F32 too
        w.add_tensor_info(name, raw, np.dtype(np.uint8), int(np.prod(raw)), raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for name, arr in names.items():
        qtype = stored_type(shape_of(arr))
        a = np.ascontiguousarray(arr() if isinstance(arr, _Later) else arr, dtype=np.float32)
        if qtype == gguf.GGMLQuantizationType.F32:
            w.write_tensor_data(a)
        elif qtype == gguf.GGMLQuantizationType.F16:
            w.write_tensor_data(a.astype(np.float16))
        elif qtype == gguf.GGMLQuantizationType.Q4_K:
            w.write_tensor_data(quantize_q4_k(a))
        else:
            w.write_tensor_data(gguf.quants.quantize(a, qtype))
        t.release()
    w.close()
    return out


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description="Write a Hugging Face GPT-2 or Llama folder as GGUF.")
    ap.add_argument("folder")
    ap.add_argument("out")
    ap.add_argument("--type", default="F32", choices=TYPES, help="how the matrices are stored")
    ap.add_argument("--check", action="store_true", help="compare with llama.cpp (llama-cpp-python)")
    a = ap.parse_args()
    export(a.folder, a.out, a.type)
    if a.check:
        from decodelab.testing.llama_cpp import compare_gguf

        print(f"max |logit difference| llama.cpp vs decodelab: {compare_gguf(a.folder, a.out):.3g}")


def __getattr__(name):
    # Names that moved elsewhere, with their warning (_compat.MOVED_NAMES).
    from decodelab import _compat  # absolute: import may call this before __spec__ is the module's

    return _compat.moved_name(__name__, name)
