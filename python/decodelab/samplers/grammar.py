"""Constrained decoding: a grammar (JSON Schema, regular expression, Lark or GBNF grammar, or a
choice among strings) as a sampler stage that removes, at each step, every token the grammar does
not allow next. The grammar engine is llguidance (an optional extra: pip install
"decodelab[constrained]"); the stage itself runs in the C++ chain like any sampler and shows in
traces with the tokens and probability mass it removed.

``Grammar`` holds a compiled constraint, ``GrammarMask`` is its sampler stage for one tokenizer, and
``from_options`` picks the one constraint among generate()'s keywords (``OPTION_KEYS``: json_schema,
regex, grammar, choice). ``SYNTAXES`` lists the syntaxes a Grammar records.

Examples:
    >>> model = decodelab.load("stories260K")
    >>> g = Grammar.choice(["yes", "no"])
    >>> model.generate("Is the sky blue? Answer:", grammar=g, max_new_tokens=5).text in ("yes", "no")
    True
    >>> text = model.generate("Once upon a time", regex="[0-9]{2}", max_new_tokens=5).text
    >>> len(text), text.isdigit()
    (2, True)
"""
from __future__ import annotations

import ctypes
import functools
import json
import time
import weakref
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from .._native import _core
from .base import Sampler

__all__ = ["SYNTAXES", "OPTION_KEYS", "Grammar", "GrammarMask", "from_options"]

SYNTAXES = ("lark", "gbnf", "regex", "json_schema", "choice")
OPTION_KEYS = ("json_schema", "regex", "grammar", "choice")  # generate()'s keywords, exclusive


def _llguidance():
    try:
        import llguidance
    except ImportError:
        raise ImportError("constrained decoding needs llguidance: pip install \"decodelab[constrained]\" "
                          "(or pip install llguidance)") from None
    return llguidance


@functools.lru_cache(maxsize=256)
def _compile(syntax: str, text: str) -> str:
    """llguidance's grammar for (syntax, text), checked: ValueError naming what is wrong."""
    llg = _llguidance()
    try:
        if syntax == "json_schema":
            grammar = llg.LLMatcher.grammar_from_json_schema(text)
        elif syntax == "regex":
            grammar = llg.LLMatcher.grammar_from_regex(text)
        elif syntax == "gbnf":
            from llguidance.gbnf_to_lark import gbnf_to_lark

            grammar = llg.LLMatcher.grammar_from_lark(gbnf_to_lark(text))
        else:  # lark, and choice (compiled to lark by Grammar.choice)
            grammar = llg.LLMatcher.grammar_from_lark(text)
    except Exception as e:  # the converters raise ValueError or their own errors
        raise ValueError(f"invalid {syntax} grammar: {e}") from None
    error = llg.LLMatcher.validate_grammar(grammar)
    if error and not error.startswith("WARNING"):
        raise ValueError(f"invalid {syntax} grammar: {error}")
    return grammar


class Grammar:
    """A constraint on the generated text, compiled once (compilations are cached by text).

    ``Grammar(text, syntax="lark")`` takes a Lark / llguidance grammar (``start: ...``) or, with
    ``syntax="gbnf"``, llama.cpp's GBNF (``root ::= ...``); ``Grammar.json_schema(schema)``,
    ``Grammar.regex(pattern)`` (the whole output must match) and ``Grammar.choice([...])`` build the
    others. A bad grammar raises ValueError here, before any decoding. Pass it to generate() as
    ``grammar=``, or wrap it in a ``GrammarMask`` stage.

    Args:
        text: the grammar, a non-empty str in the given syntax.
        syntax: one of ``SYNTAXES``: "lark" (the default), "gbnf", "regex", "json_schema" (the
            schema's JSON text) or "choice" (use ``Grammar.choice`` for that one).

    Raises:
        ValueError: if ``syntax`` is unknown, ``text`` is empty or not a str, or the grammar does
            not compile (the message gives llguidance's reason).
        ImportError: if llguidance is not installed.

    Examples:
        >>> Grammar('start: "yes" | "no"')
        Grammar('start: "yes" | "no"', syntax='lark')
        >>> Grammar('root ::= "yes" | "no"', syntax="gbnf").syntax
        'gbnf'
        >>> Grammar("start: (")
        Traceback (most recent call last):
            ...
        ValueError: invalid lark grammar: ...
    """

    def __init__(self, text: str, syntax: str = "lark"):
        if syntax not in SYNTAXES:
            raise ValueError(f"syntax must be one of {', '.join(SYNTAXES)}, got {syntax!r}")
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"a {syntax} grammar must be a non-empty str, got {text!r:.80}")
        self.syntax = syntax
        self.text = text
        self.compiled = _compile(syntax, text)

    @classmethod
    def json_schema(cls, schema) -> "Grammar":
        """Output that parses as JSON valid under ``schema``.

        Properties are generated in the schema's order.

        Args:
            schema: a JSON Schema: a dict, or its JSON text.

        Returns:
            Grammar: a grammar of syntax "json_schema".

        Raises:
            ValueError: if ``schema`` is text that is not valid JSON, is not a JSON object, or is
                a schema llguidance cannot compile.

        Examples:
            >>> Grammar.json_schema({"type": "integer"})
            Grammar('{"type": "integer"}', syntax='json_schema')
        """
        if isinstance(schema, str):
            try:
                schema = json.loads(schema)
            except json.JSONDecodeError as e:
                raise ValueError(f"json_schema is not valid JSON: {e}") from None
        if not isinstance(schema, dict):
            raise ValueError(f"json_schema must be a JSON object (a dict), got {type(schema).__name__}")
        return cls(json.dumps(schema), "json_schema")  # property order kept: the output follows it

    @classmethod
    def regex(cls, pattern: str) -> "Grammar":
        """Output that matches ``pattern`` whole (Rust regex syntax, as llguidance reads it).

        Args:
            pattern: the regular expression, a non-empty str.

        Returns:
            Grammar: a grammar of syntax "regex".

        Raises:
            ValueError: if ``pattern`` is empty or not a valid regular expression.

        Examples:
            >>> Grammar.regex("[0-9]{2}")
            Grammar('[0-9]{2}', syntax='regex')
        """
        return cls(pattern, "regex")

    @classmethod
    def choice(cls, options: Iterable[str]) -> "Grammar":
        """Output that is exactly one of ``options``.

        Args:
            options: the allowed outputs, a non-empty list of non-empty str.

        Returns:
            Grammar: a grammar of syntax "choice" (its ``text`` is the options as JSON).

        Raises:
            ValueError: if ``options`` is a str, empty, or holds an empty or non-str item.

        Examples:
            >>> Grammar.choice(["yes", "no"])
            Grammar('["yes", "no"]', syntax='choice')
        """
        if isinstance(options, (str, bytes)):
            raise ValueError(f"choice must be a list of strings, got {options!r:.80}")
        opts = list(options)
        if not opts or any(not isinstance(o, str) or not o for o in opts):
            raise ValueError(f"choice must be a non-empty list of non-empty strings, got {opts!r:.80}")
        g = cls.__new__(cls)
        g.syntax, g.text = "choice", json.dumps(opts, ensure_ascii=False)
        g.compiled = _compile("choice", "start: " + " | ".join(json.dumps(o, ensure_ascii=False) for o in opts))
        return g

    def __repr__(self) -> str:
        return f"Grammar({self.text!r:.60}, syntax={self.syntax!r})"


def from_options(json_schema=None, regex=None, grammar=None, choice=None) -> Optional[Grammar]:
    """The one constraint among generate()'s json_schema / regex / grammar / choice, or None.

    Args:
        json_schema: a JSON Schema (a dict or its JSON text), or None.
        regex: a regular expression str the whole output must match, or None.
        grammar: a ``Grammar``, or a Lark grammar str, or None.
        choice: a list of allowed output strings, or None.

    Returns:
        Grammar or None: the constraint, or None when all four are None.

    Raises:
        ValueError: if more than one is given, one has the wrong type, or its grammar does not
            compile.

    Examples:
        >>> from_options(choice=["yes", "no"])
        Grammar('["yes", "no"]', syntax='choice')
        >>> from_options() is None
        True
        >>> from_options(regex="a+", choice=["b"])
        Traceback (most recent call last):
            ...
        ValueError: json_schema, regex, grammar and choice are exclusive; got regex, choice
    """
    given = [k for k, v in (("json_schema", json_schema), ("regex", regex), ("grammar", grammar), ("choice", choice))
             if v is not None]
    if len(given) > 1:
        raise ValueError(f"json_schema, regex, grammar and choice are exclusive; got {', '.join(given)}")
    if json_schema is not None:
        return Grammar.json_schema(json_schema)
    if regex is not None:
        if not isinstance(regex, str):
            raise ValueError(f"regex must be a str, got {type(regex).__name__}")
        return Grammar.regex(regex)
    if choice is not None:
        return Grammar.choice(choice)
    if grammar is not None:
        if isinstance(grammar, Grammar):
            return grammar
        if isinstance(grammar, str):
            return Grammar(grammar, "lark")
        raise ValueError(f"grammar must be a decodelab.Grammar or a Lark grammar str, got {type(grammar).__name__}")
    return None


class _TokenBytes:
    """llguidance's view of a tokenizer without a tokenizer.json: each token's bytes, the special
    tokens, and an encoder (its TokenizerWrapper protocol)."""

    def __init__(self, tokenizer, vocab_size: int, eos: Sequence[int]):
        self.tokens = [tokenizer._piece_bytes(i) for i in range(vocab_size)]
        self.eos_token_id = eos[0]
        self.bos_token_id = tokenizer.bos_token_id
        self.special_token_ids = sorted({0, *(t for t in (tokenizer.bos_token_id, *eos) if t is not None)})
        self._tok = tokenizer
        self.is_tokenizer_wrapper = True

    def __call__(self, text):
        if isinstance(text, bytes):
            text = text.decode("utf-8", errors="replace")
        return self._tok.encode_pieces(text)


# One llguidance tokenizer per (tokenizer, vocabulary size, EOS ids): building one takes ~0.3 s.
_TOKENIZERS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _ll_tokenizer(tokenizer, vocab_size: int, eos: Tuple[int, ...]):
    llg = _llguidance()
    per = _TOKENIZERS.setdefault(tokenizer, {})
    key = (vocab_size, eos)
    if key not in per:
        if hasattr(tokenizer, "_tok") and hasattr(tokenizer._tok, "to_str"):  # a tokenizers.Tokenizer
            per[key] = llg.LLTokenizer(tokenizer._tok.to_str(), n_vocab=vocab_size, eos_token=list(eos))
        elif hasattr(tokenizer, "_piece_bytes"):  # llama2.c's SentencePiece pieces
            per[key] = llg.LLTokenizer(llg.TokenizerWrapper(_TokenBytes(tokenizer, vocab_size, eos)),
                                       n_vocab=vocab_size, eos_token=list(eos))
        else:
            raise ValueError(f"constrained decoding cannot read this tokenizer ({type(tokenizer).__name__})")
    return per[key]


class GrammarMask(Sampler):
    """The grammar as a sampler stage: at each step every token the grammar does not allow after
    the tokens generated so far is removed; end-of-sequence (``eos_token_ids``) only where the
    grammar is complete. One matcher per sequence (sample, beam) follows that sequence's tokens,
    rolled back where they change (beams that swap, drafted tokens a speculative round rejects).
    The generated tokens are ``apply``'s ``context[n_prompt:]``. generate() builds this stage itself
    for its ``json_schema``, ``regex``, ``grammar`` and ``choice`` keywords.

    ``mask_seconds`` and ``mask_calls`` count the time spent computing masks.

    Args:
        grammar: the constraint, a ``Grammar``. No-op: none (leave the stage out).
        tokenizer: the model's tokenizer (``model.tokenizer``): a tokenizer.json tokenizer or
            llama2.c's SentencePiece pieces.
        vocab_size: the model's vocabulary size (the length of its logits).
        eos_token_ids: the end-of-sequence ids. Range: at least one; the first is llguidance's EOS.

    Raises:
        ValueError: if ``grammar`` is not a Grammar, ``tokenizer`` is None or of a kind
            llguidance cannot read, or ``eos_token_ids`` is empty.
        ImportError: if llguidance is not installed.

    Examples:
        >>> model = decodelab.load("stories260K")
        >>> tok, V = model.tokenizer, model.config.vocab_size
        >>> mask = GrammarMask(Grammar.choice(["yes", "no"]), tok, V, [tok.eos_token_id])
        >>> first = mask.apply(np.zeros(V), context=[tok.bos_token_id], n_prompt=1)
        >>> sorted(tok.id_to_piece(int(t)) for t in np.flatnonzero(np.isfinite(first)))
        ['<0x6E>', '<0x79>', 'n', 'y']
        >>> done = mask.apply(np.zeros(V), context=[tok.bos_token_id, *tok.encode_pieces("yes")], n_prompt=1)
        >>> np.flatnonzero(np.isfinite(done)).tolist() == [tok.eos_token_id]
        True
    """

    def __init__(self, grammar: Grammar, tokenizer, vocab_size: int, eos_token_ids: Sequence[int]):
        if not isinstance(grammar, Grammar):
            raise ValueError(f"grammar must be a decodelab.Grammar, got {type(grammar).__name__}")
        if tokenizer is None:
            raise ValueError("constrained decoding needs the model's tokenizer")
        eos = tuple(int(t) for t in eos_token_ids)
        if not eos:
            raise ValueError("constrained decoding needs an end-of-sequence token to finish on; eos_token_id is empty")
        self.grammar = grammar
        self._tokenizer = _ll_tokenizer(tokenizer, int(vocab_size), eos)
        self._matchers: Dict[int, Tuple[object, List[int]]] = {}
        self.mask_seconds = 0.0
        self.mask_calls = 0
        self._core = _core.sampler_token_mask(self._rule, f"grammar({grammar.syntax})")

    def matcher(self):
        """A fresh llguidance matcher of this grammar (for inspection and tests).

        Returns:
            llguidance.LLMatcher: a matcher at the start of the grammar, apart from the stage's own.
        """
        return _llguidance().LLMatcher(self._tokenizer, self.grammar.compiled)

    def _rule(self, generated: np.ndarray, sequence: int, address: int, n_words: int) -> None:
        t0 = time.perf_counter()
        gen = generated.tolist()
        state = self._matchers.get(sequence)
        if state is None:
            state = self._matchers[sequence] = (self.matcher(), [])
        m, done = state
        k = len(done)
        if gen[:k] != done:  # beams that swapped, or drafts rejected: roll back to the common prefix
            k = 0
            while k < min(len(done), len(gen)) and done[k] == gen[k]:
                k += 1
        if k < len(done):
            m.rollback(len(done) - k)
            del done[k:]
        for t in gen[k:]:
            if not m.consume_token(t):
                # A token the grammar refuses: only a drafted token under check gets here, and its
                # round is cut there, so what this position allows does not matter.
                del self._matchers[sequence]
                ctypes.memset(address, 0xFF, 4 * n_words)
                return
            done.append(t)
        m.unsafe_compute_mask_ptr(address, 4 * n_words)
        self.mask_seconds += time.perf_counter() - t0
        self.mask_calls += 1

    def reset(self) -> None:
        """Forget every sequence's matcher, so the next ``apply`` starts each from the grammar's start."""
        self._matchers.clear()
        self._core.reset()

    def clone(self) -> "GrammarMask":
        """This same stage, not a copy: beams and samples of one call share its matchers.

        Returns:
            GrammarMask: ``self``.
        """
        # Clones share the matchers (keyed by sequence): beams and samples of one call.
        return self

    def __repr__(self) -> str:
        return f"GrammarMask({self.grammar!r})"
