"""Hugging Face folders: safetensors headers (single or sharded) read into the engine's tensor table,
with fused projections split and GPT-2's bare tensor names mapped.

Only the headers are read; the C++ core memory-maps the files for the data. Each header is checked
as untrusted input (dtypes, shapes, offsets, the tensors tiling the data exactly) and any problem is
a ValueError naming the file and the tensor.

Examples:
    >>> import os
    >>> from decodelab.testing import write_checkpoint
    >>> from decodelab.config import from_hf_dict, load_json
    >>> folder = write_checkpoint("ckpt", "llama-tiny")
    >>> files, tensors = read_hf_weights(folder, from_hf_dict(load_json(os.path.join(folder, "config.json"))))
    >>> [os.path.basename(f) for f in files], len(tensors)
    (['model.safetensors'], 21)
"""
from __future__ import annotations

import json
import os
import struct
from typing import List, Tuple

from ..config import ModelConfig

__all__ = ["TensorEntry", "read_safetensors_header", "read_hf_weights", "split_fused"]

# (name, dtype, shape, file index, byte offset, byte length): the C++ core's tensor table.
TensorEntry = Tuple[str, str, List[int], int, int, int]

SAFETENSORS_ITEMSIZE = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4,
    "I64": 8, "U64": 8, "F64": 8,
}
MAX_HEADER_BYTES = 100 * 1024 * 1024


def read_safetensors_header(path: str, file_index: int) -> List[TensorEntry]:
    """Parse and check one safetensors file's header.

    Checks the header length against the file's size (and a 100 MiB limit), the header as a JSON
    object, each tensor's dtype, shape and data_offsets, that the tensors cover the data section
    contiguously in offset order with no gap, overlap or tail, and finally that the safetensors
    library opens the file. No tensor data is read.

    Args:
        path: the .safetensors file.
        file_index: the index of this file in the model's file list, stored in each entry (0 for a
            single-file model; the shard's position for a sharded one).

    Returns:
        One TensorEntry per tensor, ``(name, dtype, shape, file_index, offset, nbytes)``, in the
        header's order: dtype as safetensors names it (``"F32"``, ``"BF16"``, ...), shape as a list
        (outermost first), offset as an absolute byte offset in the file. ``__metadata__`` is skipped.

    Raises:
        ValueError: the file is too short, the header length runs past the file, the header is not
            a JSON object, a tensor has an unknown dtype, a bad shape or data_offsets, a size that
            does not match its shape, or the tensors do not tile the data exactly, or the
            safetensors library rejects the file; the message names the file and the tensor.
        OSError: the file does not exist or cannot be read.

    Examples:
        >>> import os
        >>> from decodelab.testing import write_checkpoint
        >>> folder = write_checkpoint("ckpt", "llama-tiny")
        >>> entries = read_safetensors_header(os.path.join(folder, "model.safetensors"), 0)
        >>> len(entries)
        21
        >>> emb = {e[0]: e for e in entries}["model.embed_tokens.weight"]
        >>> emb[1], emb[2], emb[3], emb[5]     # dtype, shape, file index, bytes (512 x 64 float32)
        ('F32', [512, 64], 0, 131072)
        >>> with open("bad.safetensors", "wb") as f:
        ...     _ = f.write(b"{}")
        >>> read_safetensors_header("bad.safetensors", 0)
        Traceback (most recent call last):
        ...
        ValueError: bad.safetensors: 2 bytes is too short for a safetensors file (header length needs 8)
    """
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise ValueError(f"{path}: {size} bytes is too short for a safetensors file (header length needs 8)")
        (n,) = struct.unpack("<Q", head)
        if n > size - 8 or n > MAX_HEADER_BYTES:
            raise ValueError(f"{path}: header length {n} exceeds the file's {size - 8} remaining bytes "
                             f"(limit {MAX_HEADER_BYTES}); truncated or not a safetensors file")
        raw = f.read(n)
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: safetensors header is not valid JSON ({e})") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path}: safetensors header must be a JSON object")
    data_start = 8 + n
    data_len = size - data_start
    out = []
    for name, e in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(e, dict):
            raise ValueError(f"{path}: tensor {name!r} has a malformed header entry")
        dtype, shape, offs = e.get("dtype"), e.get("shape"), e.get("data_offsets")
        if dtype not in SAFETENSORS_ITEMSIZE:
            raise ValueError(f"{path}: tensor {name!r} has unknown dtype {dtype!r}")
        if (not isinstance(shape, list) or any(not isinstance(d, int) or isinstance(d, bool) or d < 0 for d in shape)):
            raise ValueError(f"{path}: tensor {name!r} has invalid shape {shape!r}")
        if (not isinstance(offs, list) or len(offs) != 2
                or any(not isinstance(o, int) or isinstance(o, bool) for o in offs)):
            raise ValueError(f"{path}: tensor {name!r} has invalid data_offsets {offs!r}")
        begin, end = offs
        if not 0 <= begin <= end:
            raise ValueError(f"{path}: tensor {name!r} has data_offsets [{begin}, {end}] out of order")
        if end > data_len:
            raise ValueError(f"{path}: tensor {name!r} data_offsets [{begin}, {end}] run past the end of the data "
                             f"({data_len} bytes); the file is truncated or corrupt")
        numel = 1
        for d in shape:
            numel *= d
        if numel * SAFETENSORS_ITEMSIZE[dtype] != end - begin:
            raise ValueError(f"{path}: tensor {name!r} with shape {shape} and dtype {dtype} needs "
                             f"{numel * SAFETENSORS_ITEMSIZE[dtype]} bytes, but data_offsets give {end - begin}")
        out.append((name, dtype, list(shape), file_index, data_start + begin, end - begin))
    _check_layout(path, out, data_start, data_len)
    return out


def _check_layout(path: str, entries: List[TensorEntry], data_start: int, data_len: int) -> None:
    """safetensors' own rules: the tensors tile the data exactly, in offset order, with no gap,
    overlap or tail; the library itself then reads the header as it would."""
    at = 0
    for name, _, _, _, offset, nbytes in sorted(entries, key=lambda e: (e[4], e[4] + e[5])):
        begin = offset - data_start
        if begin != at:
            kind = "overlaps the tensor before it" if begin < at else f"leaves a gap of {begin - at} bytes before it"
            raise ValueError(f"{path}: tensor {name!r} at data offset {begin} {kind} (safetensors requires the "
                             "tensors to cover the data contiguously)")
        at = begin + nbytes
    if at != data_len:
        raise ValueError(f"{path}: the tensors cover {at} of the {data_len} data bytes (safetensors requires "
                         "them to cover the data exactly)")
    from safetensors import safe_open

    try:
        with safe_open(path, framework="numpy"):
            pass
    except Exception as e:  # safetensors raises its own SafetensorError (and others) for a bad file
        raise ValueError(f"{path}: the safetensors library rejects this file ({e})") from None


def _gpt2_name(name: str) -> str:
    # The original GPT-2 checkpoints name tensors without the "transformer." prefix.
    if name.startswith(("wte.", "wpe.", "h.", "ln_f.")):
        return "transformer." + name
    return name


def read_hf_weights(folder: str, config: ModelConfig) -> Tuple[List[str], List[TensorEntry]]:
    """The safetensors files of a Hugging Face folder, single or sharded, and their tensor table.

    Reads ``model.safetensors`` if it exists, else the shards that ``model.safetensors.index.json``
    lists (each must be a plain file name inside the folder), checking every header with
    read_safetensors_header. GPT-2 tensors stored without the ``transformer.`` prefix get it, and
    Phi-3's fused ``qkv_proj`` and ``gate_up_proj`` matrices are split with split_fused.

    Args:
        folder: the Hugging Face model folder.
        config: the model's ModelConfig (from its config.json); its ``arch`` and ``family`` decide
            the GPT-2 renaming and the Phi-3 split.

    Returns:
        ``(files, tensors)``: the safetensors paths, in the order the entries' file indices refer
        to (shards sorted by name), and one TensorEntry per tensor under the engine's names.

    Raises:
        FileNotFoundError: the folder has neither model.safetensors nor an index, or a shard the
            index lists is missing.
        ValueError: the index is not valid JSON with a ``weight_map``, a shard name is not a file
            name inside the folder, a header fails read_safetensors_header's checks (the message
            names the file and tensor), or a Phi-3 fused matrix does not have the rows the config
            implies (the message names the folder and the tensor).

    Examples:
        >>> import os
        >>> from decodelab.testing import write_checkpoint
        >>> from decodelab.config import from_hf_dict, load_json
        >>> folder = write_checkpoint("phi", "phi3-tiny")
        >>> config = from_hf_dict(load_json(os.path.join(folder, "config.json")))
        >>> files, tensors = read_hf_weights(folder, config)
        >>> sorted(t[0].split(".")[-2] for t in tensors if t[0].startswith("model.layers.0.self_attn."))
        ['k_proj', 'o_proj', 'q_proj', 'v_proj']
        >>> read_hf_weights("no-such-folder", config)
        Traceback (most recent call last):
        ...
        FileNotFoundError: no-such-folder has neither model.safetensors nor model.safetensors.index.json
    """
    single = os.path.join(folder, "model.safetensors")
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.exists(single):
        files = [single]
    elif os.path.exists(index):
        try:
            with open(index, encoding="utf-8") as f:
                weight_map = json.load(f)["weight_map"]
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise ValueError(f"{index}: not a valid safetensors index ({e})") from None
        names = sorted(set(weight_map.values()))
        for n in names:
            if not isinstance(n, str) or os.path.basename(n) != n or n in ("", ".", ".."):
                raise ValueError(f"{index}: shard name {n!r} must be a file name inside the model folder")
        files = [os.path.join(folder, n) for n in names]
        for p in files:
            if not os.path.exists(p):
                raise FileNotFoundError(f"shard {p} listed in {index} is missing")
    else:
        raise FileNotFoundError(f"{folder} has neither model.safetensors nor model.safetensors.index.json")
    tensors: List[TensorEntry] = []
    for i, p in enumerate(files):
        tensors.extend(read_safetensors_header(p, i))
    if config.arch == "gpt2":
        tensors = [(_gpt2_name(t[0]),) + tuple(t[1:]) for t in tensors]
    if config.family == "phi3":
        try:
            tensors = split_fused(tensors, config)
        except ValueError as e:
            raise ValueError(f"{folder}: {e}") from None
    return files, tensors


_ELEM_BYTES = {"F32": 4, "F16": 2, "BF16": 2}


def split_fused(tensors: List[TensorEntry], config: ModelConfig) -> List[TensorEntry]:
    """Phi-3's fused matrices as the engine's separate ones, each a range of rows in place.

    Each part is a range of rows of the fused tensor in place in its file (a safetensors folder or
    a GGUF file, whose block formats quantize along rows): qkv_proj's [q | k | v] rows and
    gate_up_proj's [gate | up]. Other entries pass through unchanged; no data is read or copied.

    Args:
        tensors: the tensor table, TensorEntry tuples ``(name, dtype, shape, file, offset,
            nbytes)`` with shapes outermost first.
        config: the ModelConfig whose ``n_heads``, ``n_kv_heads``, ``head_dim`` and
            ``intermediate_size`` give the row count of each part.

    Returns:
        The table with each ``*.self_attn.qkv_proj.weight`` replaced by ``q_proj``, ``k_proj`` and
        ``v_proj`` entries and each ``*.mlp.gate_up_proj.weight`` by ``gate_proj`` and ``up_proj``.

    Raises:
        ValueError: a fused tensor is not 2-D, does not have the rows the config implies, or its
            byte length does not divide into those rows (or, for F32, F16 and BF16, does not match
            its shape); the message names the tensor.

    Examples:
        >>> import os
        >>> from decodelab.testing import write_checkpoint
        >>> from decodelab.config import from_hf_dict, load_json
        >>> folder = write_checkpoint("phi", "phi3-tiny")
        >>> config = from_hf_dict(load_json(os.path.join(folder, "config.json")))
        >>> fused = [e for e in read_safetensors_header(os.path.join(folder, "model.safetensors"), 0)
        ...          if e[0] == "model.layers.0.self_attn.qkv_proj.weight"]
        >>> fused[0][2]                          # 64 q rows + 32 k rows + 32 v rows
        [128, 64]
        >>> [(e[0].split(".")[-2], e[2]) for e in split_fused(fused, config)]
        [('q_proj', [64, 64]), ('k_proj', [32, 64]), ('v_proj', [32, 64])]
    """
    q = config.n_heads * config.head_dim
    kv = config.n_kv_heads * config.head_dim
    parts = {"self_attn.qkv_proj.weight": [("self_attn.q_proj.weight", q), ("self_attn.k_proj.weight", kv),
                                           ("self_attn.v_proj.weight", kv)],
             "mlp.gate_up_proj.weight": [("mlp.gate_proj.weight", config.intermediate_size),
                                         ("mlp.up_proj.weight", config.intermediate_size)]}
    out = []
    for name, dtype, shape, file, offset, nbytes in tensors:
        suffix = next((s for s in parts if name.endswith("." + s)), None)
        if suffix is None:
            out.append((name, dtype, shape, file, offset, nbytes))
            continue
        rows = sum(n for _, n in parts[suffix])
        # GGUF block formats quantize along rows, so a row range of blocks is a matrix of its own.
        if len(shape) != 2 or shape[0] != rows or nbytes % rows or \
                (dtype in _ELEM_BYTES and nbytes != shape[0] * shape[1] * _ELEM_BYTES[dtype]):
            raise ValueError(f"tensor {name!r} ({dtype} {list(shape)}) is not the fused matrix of {rows} rows "
                             "the config implies")
        row_bytes = nbytes // rows
        prefix = name[:-len(suffix)]
        for part, n in parts[suffix]:
            out.append((prefix + part, dtype, [n, shape[1]], file, offset, n * row_bytes))
            offset += n * row_bytes
    return out
