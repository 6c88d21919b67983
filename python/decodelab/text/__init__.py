"""Text in and out of a model: ``tokenizer`` (Hugging Face tokenizer.json, GPT-2 and llama2.c
vocabularies), ``chat_template`` (a model's Jinja chat template, rendered as transformers renders
it) and ``streaming`` (token ids to text pieces, with stop strings matched across tokens).

The names here are the ones to import: ``Tokenizer`` (the interface), ``HFTokenizer`` and
``Llama2cTokenizer`` (its implementations), ``load_tokenizer`` (a tokenizer from a path),
``TextStream`` (streamed detokenisation) and ``render_chat`` (``chat_template.render``).

Examples:
    >>> from decodelab.text import load_tokenizer
    >>> tok = load_tokenizer(decodelab.load("stories260K").tokenizer.path, 512)
    >>> tok.encode("Once upon a time")
    [1, 403, 407, 261, 378]
    >>> tok.decode(tok.encode("Once upon a time"))
    'Once upon a time'
"""
from .chat_template import render as render_chat
from .streaming import TextStream
from .tokenizer import HFTokenizer, Llama2cTokenizer, Tokenizer, load_tokenizer

__all__ = ["Tokenizer", "HFTokenizer", "Llama2cTokenizer", "load_tokenizer", "TextStream", "render_chat"]
