"""GGUF files, llama.cpp's format: ``reader`` (header, metadata and tensor table, checked whole),
``model`` (the config and weight table the engine runs), ``tokenizer`` (the vocabulary as a
tokenizers object), ``blocks`` (dequantizers for the block formats), ``quantize`` (Q4_K) and
``export`` (a Hugging Face folder written as a GGUF file)."""
from .blocks import dequantize, dequantize_tensor
from .model import config_from_gguf
from .reader import GGUFFile, is_gguf
from .tokenizer import tokenizer_from_gguf

__all__ = ["GGUFFile", "is_gguf", "config_from_gguf", "tokenizer_from_gguf", "dequantize", "dequantize_tensor"]
