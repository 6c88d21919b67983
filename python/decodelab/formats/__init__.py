"""Model file formats: each reader lists every tensor's file, dtype, shape, offset and length.

Nothing here reads tensor data: the C++ core memory-maps the files and checks every range again
before it touches a byte. A model file is untrusted input: malformed content is a ValueError that
names the file and the tensor or metadata key at fault, and a missing file is a FileNotFoundError.
``hf`` reads Hugging Face folders (safetensors), ``llama2c`` llama2.c checkpoints, and ``gguf``
GGUF files (reader, config, tokenizer, block formats, quantizer, exporter).

Each entry of a tensor table is a TensorEntry, ``(name, dtype, shape, file index, byte offset,
byte length)``, with the shape outermost first and the offset absolute in its file.

Examples:
    >>> import os
    >>> from decodelab.formats import read_llama2c
    >>> path = os.path.join(os.path.dirname(decodelab.__file__), "models", "stories260K", "stories260K.bin")
    >>> config, tensors = read_llama2c(path)
    >>> tensors[0]
    ('model.embed_tokens.weight', 'F32', [512, 64], 0, 28, 131072)
"""
from ..config import load_json
from .hf import TensorEntry, read_hf_weights, read_safetensors_header, split_fused
from .llama2c import read_llama2c

__all__ = ["TensorEntry", "load_json", "read_hf_weights", "read_llama2c", "read_safetensors_header", "split_fused"]
