"""Bad input: every malformed file or argument raises a clear Python exception naming the value
and the limit; nothing crashes the process."""
import json
import os
import shutil
import struct

import numpy as np
import pytest
from safetensors.numpy import save_file

import decodelab
from decodelab import _core, testing


def _copy(folder, tmp_path):
    dst = tmp_path / "model"
    shutil.copytree(folder, dst)
    return dst


def _header(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return n, json.loads(f.read(n)), f.read()


def _write(path, header, data):
    raw = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw + data)


def test_missing_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        decodelab.load(tmp_path / "nope")


def test_missing_config(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json"):
        decodelab.load(tmp_path)


def test_missing_weights(checkpoint, tmp_path):
    d = _copy(checkpoint("llama-tiny"), tmp_path)
    os.remove(d / "model.safetensors")
    with pytest.raises(FileNotFoundError, match="model.safetensors"):
        decodelab.load(d)


def test_missing_shard(checkpoint, tmp_path):
    d = _copy(checkpoint("llama-tiny", shards=2), tmp_path)
    os.remove(d / "model-00002-of-00002.safetensors")
    with pytest.raises(FileNotFoundError, match="00002"):
        decodelab.load(d)


def test_shard_name_outside_folder(checkpoint, tmp_path):
    d = _copy(checkpoint("llama-tiny", shards=2), tmp_path)
    idx = json.loads((d / "model.safetensors.index.json").read_text())
    first = next(iter(idx["weight_map"]))
    idx["weight_map"][first] = "../../etc/passwd"
    (d / "model.safetensors.index.json").write_text(json.dumps(idx))
    with pytest.raises(ValueError, match="must be a file name inside the model folder"):
        decodelab.load(d)


def test_missing_tensor(checkpoint, tmp_path):
    d = _copy(checkpoint("llama-tiny"), tmp_path)
    from safetensors.numpy import load_file

    tensors = load_file(d / "model.safetensors")
    del tensors["model.layers.1.mlp.up_proj.weight"]
    save_file(tensors, d / "model.safetensors")
    with pytest.raises(ValueError, match=r"'model.layers.1.mlp.up_proj.weight' is missing"):
        decodelab.load(d)


def test_truncated_safetensors(checkpoint, tmp_path):
    d = _copy(checkpoint("llama-tiny"), tmp_path)
    p = d / "model.safetensors"
    size = os.path.getsize(p)
    with open(p, "r+b") as f:
        f.truncate(size - 1000)
    with pytest.raises(ValueError, match=r"tensor '.+' data_offsets .* run past the end"):
        decodelab.load(d)


def test_truncated_inside_header(checkpoint, tmp_path):
    d = _copy(checkpoint("llama-tiny"), tmp_path)
    p = d / "model.safetensors"
    with open(p, "r+b") as f:
        f.truncate(20)
    with pytest.raises(ValueError, match="header length"):
        decodelab.load(d)


def test_header_offsets_past_end(checkpoint, tmp_path):
    d = _copy(checkpoint("llama-tiny"), tmp_path)
    n, header, data = _header(d / "model.safetensors")
    e = header["model.norm.weight"]
    e["data_offsets"] = [len(data) + 4096, len(data) + 4096 + 256]
    _write(d / "model.safetensors", header, data)
    with pytest.raises(ValueError, match=r"tensor 'model.norm.weight' data_offsets"):
        decodelab.load(d)


def _layout_case(d, how):
    n, header, data = _header(d / "model.safetensors")
    names = sorted((k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"][0])
    a, b = header[names[0]], header[names[1]]
    if how == "overlap":  # the second tensor starts inside the first
        size = b["data_offsets"][1] - b["data_offsets"][0]
        b["data_offsets"] = [a["data_offsets"][0], a["data_offsets"][0] + size]
    elif how == "tail":  # bytes after the last tensor
        data += b"\0" * 64
    else:  # a gap: the first tensor's bytes belong to nobody
        del header[names[0]]
    _write(d / "model.safetensors", header, data)


@pytest.mark.parametrize("how", ["overlap", "tail", "gap"])
def test_safetensors_layout_rules(checkpoint, tmp_path, how):
    # safetensors itself refuses tensors that overlap, leave gaps, or leave bytes at the end.
    from safetensors import safe_open

    d = _copy(checkpoint("llama-tiny"), tmp_path)
    _layout_case(d, how)
    with pytest.raises(Exception):
        with safe_open(d / "model.safetensors", framework="numpy"):
            pass
    with pytest.raises(ValueError, match="safetensors requires"):
        decodelab.load(d)


def test_header_not_json(checkpoint, tmp_path):
    d = _copy(checkpoint("llama-tiny"), tmp_path)
    p = d / "model.safetensors"
    with open(p, "r+b") as f:
        f.seek(8)
        f.write(b"\xff\xfe not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        decodelab.load(d)


def test_header_length_absurd(tmp_path, checkpoint):
    d = _copy(checkpoint("llama-tiny"), tmp_path)
    p = d / "model.safetensors"
    with open(p, "r+b") as f:
        f.write(struct.pack("<Q", 2**63))
    with pytest.raises(ValueError, match="header length"):
        decodelab.load(d)


@pytest.mark.parametrize("np_dtype, name", [(np.int64, "I64"), (np.float64, "F64")])
def test_wrong_dtype(checkpoint, tmp_path, np_dtype, name):
    d = _copy(checkpoint("llama-tiny"), tmp_path)
    cfg, tensors = testing.random_weights("llama-tiny")
    tensors["model.layers.0.self_attn.k_proj.weight"] = tensors["model.layers.0.self_attn.k_proj.weight"].astype(np_dtype)
    save_file(tensors, str(d / "model.safetensors"))
    with pytest.raises(ValueError, match=rf"'model.layers.0.self_attn.k_proj.weight' has dtype {name}"):
        decodelab.load(d)


def test_shape_mismatch(checkpoint, tmp_path):
    d = _copy(checkpoint("llama-tiny"), tmp_path)
    cfg = json.loads((d / "config.json").read_text())
    cfg["intermediate_size"] = 192
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=r"'model.layers.0.mlp.gate_proj.weight' has shape \[160, 64\] but the "
                                         r"config implies \[192, 64\]"):
        decodelab.load(d)


def test_unknown_architecture(checkpoint, tmp_path):
    d = _copy(checkpoint("llama-tiny"), tmp_path)
    cfg = json.loads((d / "config.json").read_text())
    cfg["architectures"] = ["MambaForCausalLM"]
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="unknown architecture 'MambaForCausalLM'"):
        decodelab.load(d)


def test_config_out_of_range(checkpoint, tmp_path):
    d = _copy(checkpoint("llama-tiny"), tmp_path)
    cfg = json.loads((d / "config.json").read_text())
    cfg["num_key_value_heads"] = 3
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="n_kv_heads must divide n_heads = 4, got 3"):
        decodelab.load(d)


def test_unsupported_rope_scaling(checkpoint, tmp_path):
    d = _copy(checkpoint("llama-tiny"), tmp_path)
    cfg = json.loads((d / "config.json").read_text())
    cfg["rope_scaling"] = {"rope_type": "longrope", "factor": 4.0}
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="'longrope' needs 'short_factor': 8 numbers > 0"):
        decodelab.load(d)


def test_core_rechecks_ranges(tmp_path):
    # The C++ core does not trust the tensor table it is given either.
    p = tmp_path / "w.bin"
    p.write_bytes(b"\0" * 64)
    cfg = decodelab.ModelConfig(arch="llama", n_layers=1, hidden_size=4, n_heads=1, n_kv_heads=1, head_dim=4,
                                intermediate_size=4, vocab_size=4, max_position_embeddings=8, norm_eps=1e-5)
    with pytest.raises(ValueError, match=r"tensor 'model.embed_tokens.weight' spans bytes \[48, 112\)"):
        _core.Engine(cfg.to_core(), [str(p)], [("model.embed_tokens.weight", "F32", [4, 4], 0, 48, 64)], 1)
    with pytest.raises(ValueError, match="needs 64 bytes, but its data holds 60"):
        _core.Engine(cfg.to_core(), [str(p)], [("model.embed_tokens.weight", "F32", [4, 4], 0, 0, 60)], 1)
    with pytest.raises(ValueError, match="file index 3"):
        _core.Engine(cfg.to_core(), [str(p)], [("model.embed_tokens.weight", "F32", [4, 4], 3, 0, 64)], 1)


def test_truncated_llama2c(stories_bin, tmp_path):
    p = tmp_path / "short.bin"
    with open(stories_bin, "rb") as f:
        p.write_bytes(f.read(300_000))
    with pytest.raises(ValueError, match=r"tensor 'model.layers.\d.* needs bytes .* truncated"):
        decodelab.load(p)


def test_malicious_llama2c_header(tmp_path):
    p = tmp_path / "evil.bin"
    p.write_bytes(struct.pack("<7i", 64, 172, 5, 8, 4, 512, 2**30) + b"\0" * 1024)
    with pytest.raises(ValueError, match=r"seq_len=1073741824 is outside \[1, 4194304\]"):
        decodelab.load(p)
    p.write_bytes(struct.pack("<7i", 64, 172, 5, 8, 3, 512, 512) + b"\0" * 1024)
    with pytest.raises(ValueError, match="n_kv_heads=3"):
        decodelab.load(p)


def test_prompt_longer_than_context(checkpoint):
    m = decodelab.load(checkpoint("llama-tiny"))
    with pytest.raises(ValueError, match="129 tokens, more than the context window of 128"):
        m.generate([5] * 129, max_new_tokens=1)
    with pytest.raises(ValueError, match="exceeds the context window of 128"):
        m.generate([5] * 100, max_new_tokens=40)
    with pytest.raises(ValueError, match="context window"):
        m.forward([5] * 129)


def test_bad_generate_arguments(checkpoint):
    m = decodelab.load(checkpoint("llama-tiny"))
    with pytest.raises(ValueError, match=r"token id 512 at index 1 is outside the vocabulary \[0, 512\)"):
        m.generate([1, 512])
    with pytest.raises(ValueError, match="token id -1"):
        m.forward([-1])
    with pytest.raises(ValueError, match="max_new_tokens must be an integer >= 0, got -1"):
        m.generate([1], max_new_tokens=-1)
    with pytest.raises(ValueError, match=r"temperature must be 0 \(greedy\) or a finite number >= 1e-06 .*, got -1"):
        m.generate([1], temperature=-1)
    with pytest.raises(ValueError, match="prompt is empty"):
        m.generate([])
    with pytest.raises(ValueError, match="no tokenizer"):
        m.generate("text without a tokenizer")


def test_bad_load_arguments(checkpoint):
    with pytest.raises(ValueError, match="threads must be in"):
        decodelab.load(checkpoint("llama-tiny"), threads=0)
    with pytest.raises(ValueError, match="dtype must be 'float32', 'bfloat16', 'int8', 'w8a8' or 'int4', got 'int3'"):
        decodelab.load(checkpoint("llama-tiny"), dtype="int3")


def test_cache_capacity_and_layers(checkpoint):
    m = decodelab.load(checkpoint("llama-tiny"))
    cache = m.new_cache(capacity=4)
    m.prefill([1, 2, 3], cache)
    with pytest.raises(ValueError, match="exceed the cache capacity of 4 "):
        m.prefill([4, 5], cache)
    assert len(cache) == 3  # the refused call left the cache as it was
    with pytest.raises(IndexError, match=r"layer 2 is out of range \[0, 2\)"):
        cache.keys(2)
    with pytest.raises(ValueError, match=r"capacity must be in \[1, 128\]"):
        m.new_cache(capacity=129)
    other = decodelab.load(checkpoint("llama-tiny-tied"))
    with pytest.raises(ValueError, match="belongs to another model"):
        other.decode(1, cache)


# Inputs that once passed silently and gave a wrong result; each is now refused by name.
SILENT = [
    (dict(temperature=1e-45), r"temperature must be 0 \(greedy\) or a finite number >= 1e-06"),
    (dict(temperature=1.0, repetition_penalty=1e-300), r"repetition_penalty must be in \[0.001, 1000\]"),
    (dict(logit_bias={5: 1e300}), r"logit_bias value must be finite in float32"),
    (dict(eos_token_id="12"), r"eos_token_id must be a list of token ids \(int\), got str '12'"),
    (dict(eos_token_id=[1.5]), r"eos_token_id\[0\] must be a token id \(int\), got 1.5"),
    (dict(eos_token_id=[10**6]), r"token id 1000000 at index 0 is outside the vocabulary \[0, 512\) \(eos_token_id\)"),
    (dict(max_new_tokens=2**40), r"max_new_tokens must be an integer <= 2147483647"),
    (dict(num_beams=2, length_penalty=-1e300), r"length_penalty must be finite in float32"),
    (dict(num_beams=2, length_penalty=1e3), r"length_penalty must be <= 100.0"),
    (dict(logit_bias=[1, 2]), r"logit_bias must be a dict of token id -> bias, got list"),
    (dict(cache="x"), r"cache must be a KV cache from Model.new_cache\(\), got str"),
    (dict(temperature=1.0, top_k=1.5), r"top_k must be an integer, got 1.5"),
    (dict(stop=b"x"), r"stop must be a str or a list of str"),
    (dict(include_stop_str_in_output="yes"), r"include_stop_str_in_output must be True or False"),
]


@pytest.mark.parametrize("kw,message", SILENT, ids=[next(iter(k)) + "-" + str(i) for i, (k, _) in enumerate(SILENT)])
def test_silently_wrong_options_are_refused(stories, kw, message):
    with pytest.raises(ValueError, match=message):
        stories.generate("Once upon a time", **kw)


def test_prompt_and_id_types_are_checked(stories):
    with pytest.raises(ValueError, match="the prompt must be text .* got bytes .decode bytes to str first"):
        stories.generate(b"Once upon a time")
    with pytest.raises(ValueError, match="the prompt must be text .* got NoneType"):
        stories.generate(None)
    with pytest.raises(ValueError, match=r"prompt\[0\] must be a token id \(int\), got 1.5"):
        stories.forward([1.5, 2.7])
    with pytest.raises(ValueError, match="encode takes text .str., got NoneType"):
        stories.tokenizer.encode(None)
    with pytest.raises(ValueError, match=r"capacity must be in \[1, 512\], got 1099511627776"):
        stories.new_cache(capacity=2**40)
    with pytest.raises(ValueError, match=r"threads must be in \[1, 1024\], got 1099511627776"):
        stories.threads = 2**40
    with pytest.raises(ValueError, match=r"token id 1099511627776 at index 0 is outside the vocabulary"):
        stories.decode(2**40, stories.new_cache())


@pytest.mark.parametrize("text", [b"\xff\xfe{}", b"[" * 100000 + b"]" * 100000, b"[1, 2]", b'{"architectures": 5}',
                                  b'{"architectures": [["LlamaForCausalLM"]]}', b'{"model_type": {"a": 1}}'])
def test_config_json_errors_are_value_errors(checkpoint, tmp_path, text):
    d = _copy(checkpoint("llama-tiny"), tmp_path)
    (d / "config.json").write_bytes(text)
    with pytest.raises(ValueError):
        decodelab.load(d)


def test_config_values_of_the_wrong_type_are_value_errors(checkpoint, tmp_path):
    d = _copy(checkpoint("llama-tiny"), tmp_path)
    base = json.loads((d / "config.json").read_text())
    for key, value in [("rms_norm_eps", "x"), ("rope_scaling", 5), ("hidden_size", 2**40), ("eos_token_id", 2**31),
                       ("eos_token_id", "2"), ("rope_theta", [1]), ("num_attention_heads", 1.5)]:
        (d / "config.json").write_text(json.dumps(dict(base, **{key: value})))
        with pytest.raises(ValueError):
            decodelab.load(d)


def test_an_unknown_checkpoint_shape_is_a_value_error(tmp_path):
    for make in (lambda: testing.random_weights("llama-huge"), lambda: testing.write_checkpoint(str(tmp_path), "x")):
        with pytest.raises(ValueError, match="unknown shape 'llama-huge'|unknown shape 'x'"):
            make()


def test_a_shape_dict_without_a_needed_key_is_a_value_error(tmp_path):
    shape = {"arch": "llama", "hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4,
             "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 64}
    with pytest.raises(ValueError, match="the 'llama' shape lacks 'intermediate_size'"):
        testing.write_checkpoint(str(tmp_path), shape)
    with pytest.raises(ValueError, match="needs 'arch'"):
        testing.write_checkpoint(str(tmp_path), {"hidden_size": 64})
    # tie_word_embeddings defaults to False, as transformers' LlamaConfig has it.
    model = decodelab.load(testing.write_checkpoint(str(tmp_path / "ok"), dict(shape, intermediate_size=128)))
    assert model.config.tie_word_embeddings is False


def test_a_phi3_fused_matrix_of_the_wrong_rows_names_the_folder(checkpoint, tmp_path):
    d = _copy(checkpoint("phi3-tiny"), tmp_path)
    cfg, tensors = testing.random_weights("phi3-tiny")
    name = "model.layers.0.self_attn.qkv_proj.weight"
    tensors[name] = np.ascontiguousarray(tensors[name][:-2])
    save_file(tensors, str(d / "model.safetensors"))
    with pytest.raises(ValueError, match=f"^{d}: .*qkv_proj"):
        decodelab.load(str(d))


@pytest.mark.parametrize("beams", [1, 2])
def test_a_chain_that_removes_every_token_is_a_value_error_for_greedy_and_beams(stories, beams):
    """Every token removed (here by SuppressTokens; NaN logits count as removed too): greedy and
    beam search both raise a ValueError that says so, never an IndexError."""
    chain = decodelab.samplers.Chain([decodelab.samplers.SuppressTokens(list(range(stories.config.vocab_size)))])
    with pytest.raises(ValueError, match="no candidate token has a finite logit|every continuation was removed"):
        stories.generate("Once", max_new_tokens=3, num_beams=beams, sampler=chain)
