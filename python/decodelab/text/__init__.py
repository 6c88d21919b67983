"""Text in and out of a model: ``tokenizer`` (Hugging Face tokenizer.json, GPT-2 and llama2.c
vocabularies), ``chat_template`` (a model's Jinja chat template, rendered as transformers renders
it) and ``streaming`` (token ids to text pieces, with stop strings matched across tokens)."""
from .chat_template import render as render_chat
from .streaming import TextStream
from .tokenizer import HFTokenizer, Llama2cTokenizer, Tokenizer, load_tokenizer

__all__ = ["Tokenizer", "HFTokenizer", "Llama2cTokenizer", "load_tokenizer", "TextStream", "render_chat"]
