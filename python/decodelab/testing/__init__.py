"""Tools for tests: checkpoints of any shape (``checkpoints``), assertions that compare samplers
(``assertions``), the corpus of real next-token logits (``corpus``), real text built offline
(``texts``), the real GGUF files ``../shared/models/fetch`` downloads (``fetched``), helpers to
parametrize a test over sampler orders and presets (``parametrize``), the check the lessons'
exercises call (``exercises``, imported by name), and llama.cpp beside decodelab on a GGUF file
(``llama_cpp``, imported by name). The pytest plugin (``decodelab.pytest_plugin``) serves a model
and the logits corpus as ``decodelab_*`` fixtures.

Examples:
    >>> import decodelab.testing
    >>> model = decodelab.load(decodelab.testing.write_checkpoint("tiny", "qwen3-tiny", byte_tokenizer=True))
    >>> model.config.family, model.forward("Hi").shape  # logits at each of the 2 byte tokens
    ('qwen3', (2, 512))
"""
from .assertions import assert_distribution_close, assert_same_kept_set, assert_samples_follow, total_variation
from .checkpoints import (SHAPES, byte_level_tokenizer, convert_llama2c, meta_to_hf_rope_rows, random_weights,
                          write_checkpoint, write_hf_folder)
from .corpus import LogitsRow, logits_corpus
from .fetched import FETCHED, fetched_model, model_cache
from .parametrize import parametrize_orders, parametrize_presets
from .texts import stdlib_docstrings

__all__ = ["FETCHED", "fetched_model", "model_cache", "SHAPES", "write_checkpoint", "write_hf_folder", "random_weights", "convert_llama2c", "byte_level_tokenizer",
           "meta_to_hf_rope_rows", "assert_same_kept_set", "assert_distribution_close", "assert_samples_follow",
           "total_variation", "logits_corpus", "LogitsRow", "parametrize_orders", "parametrize_presets",
           "stdlib_docstrings"]
