"""Model file formats: each reader lists every tensor's file, dtype, shape, offset and length.

Nothing here reads tensor data: the C++ core memory-maps the files and checks every range again
before it touches a byte. A model file is untrusted input; every error is a ValueError that names
the file and tensor. ``hf`` reads Hugging Face folders (safetensors), ``llama2c`` llama2.c
checkpoints, and ``gguf`` GGUF files (reader, config, tokenizer, block formats, quantizer, exporter).
"""
from ..config import load_json
from .hf import TensorEntry, read_hf_weights, read_safetensors_header, split_fused
from .llama2c import read_llama2c

__all__ = ["TensorEntry", "load_json", "read_hf_weights", "read_llama2c", "read_safetensors_header", "split_fused"]
