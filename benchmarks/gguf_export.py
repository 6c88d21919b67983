"""Write a Hugging Face GPT-2 or Llama folder as a GGUF file that llama.cpp runs, so the speed
benchmark can put llama.cpp beside decodelab on the same weights.

    python benchmarks/gguf_export.py FOLDER OUT.gguf [--check]

--check compares llama.cpp's logits on the file with decodelab's on the folder (needs
llama-cpp-python): 2.6e-3 at most on the Llama 110M and GPT-2 124M shapes, llama.cpp keeping its
KV cache in f16 by default.

The file holds fp32 tensors and no tokenizer (llama.cpp's "none" vocabulary: the benchmark feeds
token ids); llama.cpp's own quantizer makes the f16 / q8_0 variants from it. Tensor names and
layouts follow llama.cpp's converter: GGUF matrices are (out, in), so GPT-2's Conv1D weights are
transposed, and Llama's q/k rows go back to the interleaved RoPE order llama.cpp's "llama"
architecture uses (the inverse of the Meta-to-HF permutation).
"""
import json
import os
import sys

import numpy as np
from safetensors.numpy import load_file


def _unpermute(w, n_heads):
    """HF rotate_half row order -> interleaved pairs, per head."""
    out, dim = w.shape
    hd = out // n_heads
    return w.reshape(n_heads, 2, hd // 2, dim).transpose(0, 2, 1, 3).reshape(out, dim)


def _tensors(folder):
    files = sorted(f for f in os.listdir(folder) if f.endswith(".safetensors"))
    t = {}
    for f in files:
        t.update(load_file(os.path.join(folder, f)))
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in t.items()}


def export(folder, out):
    import gguf

    cfg = json.load(open(os.path.join(folder, "config.json")))
    t = _tensors(folder)
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
    elif cfg["model_type"] == "llama":
        arch = "llama"
        D, L = cfg["hidden_size"], cfg["num_hidden_layers"]
        nh, nkv = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
        hd = cfg.get("head_dim") or D // nh
        w = gguf.GGUFWriter(out, arch)
        w.add_context_length(cfg["max_position_embeddings"])
        w.add_embedding_length(D)
        w.add_feed_forward_length(cfg["intermediate_size"])
        w.add_block_count(L)
        w.add_head_count(nh)
        w.add_head_count_kv(nkv)
        w.add_key_length(hd)
        w.add_value_length(hd)
        w.add_rope_dimension_count(hd)
        w.add_rope_freq_base(float(cfg.get("rope_theta", 10000.0)))
        w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
        names = {"token_embd.weight": t["model.embed_tokens.weight"], "output_norm.weight": t["model.norm.weight"]}
        if not cfg.get("tie_word_embeddings", False):
            names["output.weight"] = t["lm_head.weight"]
        for i in range(L):
            h = f"model.layers.{i}."
            names[f"blk.{i}.attn_norm.weight"] = t[h + "input_layernorm.weight"]
            names[f"blk.{i}.ffn_norm.weight"] = t[h + "post_attention_layernorm.weight"]
            names[f"blk.{i}.attn_q.weight"] = _unpermute(t[h + "self_attn.q_proj.weight"], nh)
            names[f"blk.{i}.attn_k.weight"] = _unpermute(t[h + "self_attn.k_proj.weight"], nkv)
            names[f"blk.{i}.attn_v.weight"] = t[h + "self_attn.v_proj.weight"]
            names[f"blk.{i}.attn_output.weight"] = t[h + "self_attn.o_proj.weight"]
            names[f"blk.{i}.ffn_gate.weight"] = t[h + "mlp.gate_proj.weight"]
            names[f"blk.{i}.ffn_up.weight"] = t[h + "mlp.up_proj.weight"]
            names[f"blk.{i}.ffn_down.weight"] = t[h + "mlp.down_proj.weight"]
    else:
        raise ValueError(f"model_type {cfg['model_type']!r}: only gpt2 and llama are exported")
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("none")
    w.add_vocab_size(cfg["vocab_size"])
    for name, arr in names.items():
        w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out




def check(folder, gguf_path, n_tokens=24):
    """Max |logit difference| between llama.cpp on `gguf_path` and decodelab on `folder`, over a
    prompt of pseudo-random tokens: evidence that the export is the same model."""
    import llama_cpp as lc

    import decodelab

    m = decodelab.load(folder)
    V = m.config.vocab_size
    toks = np.random.default_rng(1).integers(3, V, size=n_tokens).tolist()
    ours = m.forward(toks)
    lc.llama_backend_init()
    model = lc.llama_model_load_from_file(gguf_path.encode(), lc.llama_model_default_params())
    cp = lc.llama_context_default_params()
    cp.n_ctx = cp.n_batch = cp.n_ubatch = 64
    ctx = lc.llama_init_from_model(model, cp)
    batch = lc.llama_batch_init(n_tokens, 0, 1)
    for j, t in enumerate(toks):
        batch.token[j], batch.pos[j], batch.n_seq_id[j], batch.logits[j] = t, j, 1, 1
        batch.seq_id[j][0] = 0
    batch.n_tokens = n_tokens
    assert lc.llama_decode(ctx, batch) == 0
    theirs = np.stack([np.ctypeslib.as_array(lc.llama_get_logits_ith(ctx, j), shape=(V,)) for j in range(n_tokens)])
    lc.llama_batch_free(batch)
    lc.llama_free(ctx)
    lc.llama_model_free(model)
    return float(np.abs(theirs - ours).max())


if __name__ == "__main__":
    export(sys.argv[1], sys.argv[2])
    if "--check" in sys.argv[3:]:
        print(f"max |logit difference| llama.cpp vs decodelab: {check(sys.argv[1], sys.argv[2]):.3g}")

