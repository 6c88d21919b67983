"""Tools for tests: checkpoints of any shape (``checkpoints``), assertions that compare samplers
(``assertions``), the corpus of real next-token logits (``corpus``), real text built offline (``texts``), and helpers to parametrize a
test over sampler orders and presets. The pytest plugin (``decodelab.pytest_plugin``) serves these
as ``decodelab_*`` fixtures."""
from .assertions import assert_distribution_close, assert_same_kept_set, assert_samples_follow, total_variation
from .checkpoints import (SHAPES, byte_level_tokenizer, convert_llama2c, meta_to_hf_rope_rows, random_weights,
                          write_checkpoint, write_hf_folder)
from .corpus import LogitsRow, logits_corpus
from .parametrize import parametrize_orders, parametrize_presets
from .texts import stdlib_docstrings

__all__ = ["SHAPES", "write_checkpoint", "write_hf_folder", "random_weights", "convert_llama2c", "byte_level_tokenizer",
           "meta_to_hf_rope_rows", "assert_same_kept_set", "assert_distribution_close", "assert_samples_follow",
           "total_variation", "logits_corpus", "LogitsRow", "parametrize_orders", "parametrize_presets", "stdlib_docstrings"]
