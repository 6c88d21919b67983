"""GGUF files, llama.cpp's format: ``reader`` (header, metadata and tensor table, checked whole),
``model`` (the config and weight table the engine runs), ``tokenizer`` (the vocabulary as a
tokenizers object), ``blocks`` (dequantizers for the block formats), ``quantize`` (Q4_K) and
``export`` (a Hugging Face folder written as a GGUF file).

decodelab.load() reads a GGUF file with these; use them directly to look inside one.

Examples:
    >>> from decodelab.testing import write_checkpoint
    >>> from decodelab.formats.gguf.export import export
    >>> with GGUFFile(export(write_checkpoint("ckpt", "llama-tiny"), "m.gguf", "Q8_0")) as g:
    ...     config = config_from_gguf(g)
    ...     w = dequantize_tensor(g, g.tensors["token_embd.weight"])
    ...     tok = tokenizer_from_gguf(g)
    >>> config.vocab_size, w.shape, tok                  # a folder without tokenizer.bin or vocab.json: no vocabulary
    (512, (512, 64), None)
"""
from .blocks import dequantize, dequantize_tensor
from .model import config_from_gguf
from .reader import GGUFFile, is_gguf
from .tokenizer import tokenizer_from_gguf

__all__ = ["GGUFFile", "is_gguf", "config_from_gguf", "tokenizer_from_gguf", "dequantize", "dequantize_tensor"]
