"""A GGUF file's tokenizer as a Hugging Face `tokenizers` object that cuts text where llama.cpp
cuts it: `gpt2`-type byte-level BPE with its merges and the `tokenizer.ggml.pre` pre-tokenizer
(llama.cpp's regex list for that name), `llama`-type SentencePiece BPE with scores and byte
fallback, and `gemma4`-type BPE over characters. Special tokens and the add-BOS/EOS rule come from
the metadata, with llama.cpp's defaults (llama-vocab.cpp) where a key is absent. Vocabulary-only
files (llama.cpp's ggml-vocab-*.gguf) load as tokenizers with ``decodelab.text.load_tokenizer``.

Examples:
    >>> MODELS
    ('gpt2', 'llama', 'gemma4')
    >>> "gpt-2" in PRE_TOKENIZERS and "qwen2" in PRE_TOKENIZERS and "deepseek-llm" in PRE_TOKENIZERS
    True
"""
from __future__ import annotations

from typing import Dict, List, Optional

import numpy as np

from ..._native import _core
from .reader import GGUFFile

__all__ = ["MODELS", "PRE_TOKENIZERS", "tokenizer_from_gguf", "read_vocabulary"]

# llama.cpp's token types (llama-vocab.h): the ones matched as whole tokens in text.
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
_SPECIAL_TYPES = (UNKNOWN, CONTROL)  # matched whole in text, left out of decoded text
SPIECE_SPACE = "\u2581"  # SentencePiece's visible space, "▁"

# llama.cpp's pre-tokenizers (llama-vocab.cpp): the text is split by each regex of the list in turn,
# every piece by the next one, matches and the text between them kept ("isolated"), then mapped
# to byte-level symbols. GPT-2's own regex is ByteLevel(use_regex=True)'s.
_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_LLAMA3 = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
           r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2 = _LLAMA3.replace(r"\p{N}{1,3}", r"\p{N}")
# Qwen 3.5: a letter run takes the combining marks after it, and a symbol run leaves them out.
_QWEN35 = _QWEN2.replace(r"?\p{L}+", r"?[\p{L}\p{M}]+").replace(r"[^\s\p{L}\p{N}]", r"[^\s\p{L}\p{M}\p{N}]")
_CJK = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"
# DeepSeek LLM's cased letters (Unicode Lu, Ll and Lt in the scripts it lists), as code points:
# written as characters, several would be changed by Unicode normalisation in an editor.
_DEEPSEEK_LETTERS = (
    "A-Za-z\xb5\xc0-\xd6\xd8-\xf6\xf8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af\u0370-\u0373\u0376\u0377"
    "\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481\u048a-\u052f"
    "\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77"
    "\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d"
    "\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb"
    "\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128"
    "\u212a-\u212d\u212f-\u2134\u2139\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4"
    "\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf"
    "\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3"
    "\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df\U0001e900-\U0001e943")
_DIGITS_THEN_GPT2 = [r"\p{N}", _GPT2]
# Pre-tokenizer name -> its regex list; None: GPT-2's regex through ByteLevel itself.
SPLITS = {
    "gpt-2": None, "gpt2": None, "phi-2": None, "mpt": None, "olmo": None,
    "llama-bpe": [_LLAMA3], "llama3": [_LLAMA3], "llama-v3": [_LLAMA3], "dbrx": [_LLAMA3], "smaug-bpe": [_LLAMA3],
    "qwen2": [_QWEN2], "deepseek-r1-qwen": [_QWEN2], "stablelm2": [_QWEN2], "megrez": [_QWEN2],
    "qwen35": [_QWEN35],
    "smollm": _DIGITS_THEN_GPT2, "starcoder": _DIGITS_THEN_GPT2, "refact": _DIGITS_THEN_GPT2,
    "command-r": _DIGITS_THEN_GPT2,
    "falcon": [r"[\p{P}\$\+<=>\^~\|`]+", _GPT2, "[0-9][0-9][0-9]"],
    "deepseek-llm": ["[\r\n]", rf"\s?[{_DEEPSEEK_LETTERS}]+", "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+",
                     r"\s+$", _CJK, r"\p{N}+"],
    "deepseek-coder": ["[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", _CJK, r"\p{N}"],
    # A file without a pre-tokenizer name: llama.cpp's default list.
    "default": [r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", "[0-9][0-9][0-9]"],
}
PRE_TOKENIZERS = tuple(SPLITS)
# Pre-tokenizers for which llama.cpp adds BOS by default and takes a word found whole in the
# vocabulary without merging (its ignore_merges).
_LLAMA3_STYLE = ("llama-bpe", "llama3", "llama-v3")
MODELS = ("gpt2", "llama", "gemma4")


def _array(g: GGUFFile, key: str, n: int, kind: str):
    v = g.metadata.get(key)
    if v is None:
        return None
    if kind == "str":  # the reader gives a list for an array of strings alone (arrays of numbers come as ndarray)
        ok = isinstance(v, list)
    else:
        ok = isinstance(v, np.ndarray) and v.ndim == 1 and (
            np.issubdtype(v.dtype, np.integer) if kind == "int" else np.issubdtype(v.dtype, np.floating))
    if not ok:
        raise ValueError(f"{g.path}: GGUF metadata {key!r} must be an array of {kind}")
    if n >= 0 and len(v) != n:
        raise ValueError(f"{g.path}: GGUF metadata {key!r} has {len(v)} entries, expected one per token ({n})")
    return v


def _token_id(g: GGUFFile, name: str, n: int) -> Optional[int]:
    key = f"tokenizer.ggml.{name}_token_id"
    v = g.metadata.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 0 <= int(v) < n:
        raise ValueError(f"{g.path}: GGUF metadata {key!r} = {v!r} is not a token id in [0, {n})")
    return int(v)


def _flag(g: GGUFFile, key: str, default: bool) -> bool:
    v = g.metadata.get(key, default)
    if not isinstance(v, (bool, np.bool_)):
        raise ValueError(f"{g.path}: GGUF metadata {key!r} = {v!r} must be a bool")
    return bool(v)


def _vocab(tokens: List[str]) -> Dict[str, int]:
    """Token text -> its first id: built from the last id back, so a repeat's first id is written
    last (in C, 5x the speed of a Python loop over 262,144 tokens)."""
    return dict(zip(reversed(tokens), range(len(tokens) - 1, -1, -1)))


class _MergePairs:
    """Merges as a sequence of (left, right) token pairs, formed one at a time from two id arrays.

    `tokenizers` copies the merges into its own strings as it iterates, so no list of them is
    held alongside: Gemma 3's 514,847 pairs as a list were 40 MiB more at load's peak. Iterating
    runs in C (zip over map), and each pair holds the tokens' own str objects.
    """

    def __init__(self, tokens: List[str], ids) -> None:
        self._tokens = tokens
        self._left, self._right = (memoryview(np.ascontiguousarray(a, np.int32)) for a in ids)

    def __len__(self) -> int:
        return len(self._left)

    def __getitem__(self, i: int) -> tuple:
        return self._tokens[self._left[i]], self._tokens[self._right[i]]

    def __iter__(self):
        pick = self._tokens.__getitem__
        return zip(map(pick, self._left), map(pick, self._right))


def _merges(g: GGUFFile, tokens: List[str]) -> _MergePairs:
    """The file's merges as (left, right) pairs, each checked (in C++: Qwen's 151,387 merges took
    0.16 s as a Python loop): `tokenizers` raises a bare Exception, or panics, on a merge outside
    the vocabulary."""
    try:
        return _MergePairs(tokens, _core.bpe_merges(tokens, _array(g, "tokenizer.ggml.merges", -1, "str") or []))
    except ValueError as e:
        raise ValueError(f"{g.path}: GGUF {e}") from None


def _gpt2_model(g: GGUFFile, tokens: List[str], _types):
    """Byte-level BPE with the file's merges, pre-tokenized as `tokenizer.ggml.pre` says."""
    from tokenizers import Regex, decoders, models, pre_tokenizers

    pre = g.metadata.get("tokenizer.ggml.pre") or "default"  # absent or empty: llama.cpp's default
    if pre not in SPLITS:
        names = ", ".join(repr(n) for n in PRE_TOKENIZERS)
        raise ValueError(f"{g.path}: GGUF pre-tokenizer {pre!r} is not supported yet (supported: {names})")
    if SPLITS[pre] is None:
        pre_tok = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        pre_tok = pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(r), behavior="isolated", invert=False) for r in SPLITS[pre]]
            + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    vocab = _vocab(tokens)
    model = models.BPE(vocab=vocab, merges=_merges(g, tokens), fuse_unk=False, ignore_merges=pre in _LLAMA3_STYLE)
    return model, None, pre_tok, decoders.ByteLevel(), pre in _LLAMA3_STYLE, False


def _gemma4_model(g: GGUFFile, tokens: List[str], _types):
    """Gemma 4: BPE over the text's own characters (no byte-level map) with spaces as "▁", split
    into runs of newlines and runs of other characters, and <0xNN> byte tokens for the rest."""
    from tokenizers import Regex, decoders, models, normalizers, pre_tokenizers

    vocab = _vocab(tokens)
    model = models.BPE(vocab=vocab, merges=_merges(g, tokens), fuse_unk=False, byte_fallback=True)
    decoder = decoders.Sequence([decoders.Replace(SPIECE_SPACE, " "), decoders.ByteFallback(), decoders.Fuse()])
    pre_tok = pre_tokenizers.Split(Regex(r"[^\n]+|[\n]+"), behavior="isolated", invert=False)
    return model, normalizers.Replace(" ", SPIECE_SPACE), pre_tok, decoder, True, False


def _spm_merges(tokens: List[str], scores: np.ndarray, types: Optional[np.ndarray]):
    """SentencePiece BPE as llama.cpp runs it merges the adjacent pair whose joined text is the
    highest-scoring token (the leftmost among equals). As BPE merges: every split of every normal
    or user-defined token into two vocabulary pieces, ranked by the joined token's score (in C++:
    Gemma 3's 262,144 tokens give 514,847 merges)."""
    eligible = np.ones(len(tokens), bool) if types is None else np.isin(types, (NORMAL, USER_DEFINED))
    return _MergePairs(tokens, _core.spm_merges(tokens, np.asarray(scores, np.float64), eligible))


def _llama_model(g: GGUFFile, tokens: List[str], types: Optional[np.ndarray]):
    """SentencePiece BPE: spaces as "▁", one "▁" before the text and after each special token
    (add_space_prefix), characters outside the vocabulary as <0xNN> byte tokens."""
    from tokenizers import decoders, models, normalizers

    scores = _array(g, "tokenizer.ggml.scores", len(tokens), "float")
    if scores is None:
        raise ValueError(f"{g.path}: GGUF tokenizer 'llama' needs 'tokenizer.ggml.scores'")
    if not np.all(np.isfinite(scores)):
        raise ValueError(f"{g.path}: GGUF metadata 'tokenizer.ggml.scores' holds a value that is not finite")
    unk = _token_id(g, "unknown", len(tokens))
    space_prefix = _flag(g, "tokenizer.ggml.add_space_prefix", True)
    vocab = _vocab(tokens)
    model = models.BPE(vocab=vocab, merges=_spm_merges(tokens, scores, types), fuse_unk=True,
                       byte_fallback=True, unk_token=tokens[unk] if unk is not None else None)
    steps = [normalizers.Prepend(SPIECE_SPACE)] if space_prefix else []
    normalizer = normalizers.Sequence(steps + [normalizers.Replace(" ", SPIECE_SPACE)])
    decoder = decoders.Sequence([decoders.Replace(SPIECE_SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
                                + ([decoders.Strip(" ", 1, 0)] if space_prefix else []))
    return model, normalizer, None, decoder, True, False


def tokenizer_from_gguf(g: GGUFFile):
    """The file's tokenizer as a decodelab HFTokenizer, cutting text where llama.cpp cuts it.

    ``tokenizer.ggml.model`` picks the kind: ``gpt2`` (byte-level BPE with the file's merges,
    pre-tokenized as ``tokenizer.ggml.pre`` says, one of PRE_TOKENIZERS, llama.cpp's default list
    when the key is absent), ``llama`` (SentencePiece BPE with scores, a "▁" space prefix unless
    ``add_space_prefix`` is false, and byte fallback) or ``gemma4`` (BPE over characters with
    spaces as "▁", newline runs apart, byte fallback and BOS always added, as llama.cpp runs it). Control and unknown tokens are special (matched whole in text, left out of
    decoded text); user-defined ones (Gemma's newline and indent runs, Qwen's ``<tool_call>``) are
    matched whole in text too but decode as the text they hold, as llama.cpp and transformers
    render them. BOS and EOS are added as ``add_bos_token`` and ``add_eos_token``
    say, else by llama.cpp's defaults (BOS for ``llama`` and Llama 3 style files where the file
    has a BOS token). The chat template, if any, goes along.

    Args:
        g: the open GGUFFile.

    Returns:
        A decodelab.HFTokenizer, or None when the file has no vocabulary (no
        ``tokenizer.ggml.model``, or llama.cpp's "none"): the caller then feeds token ids.

    Raises:
        ValueError: the tokenizer kind or pre-tokenizer is not supported yet, or the metadata is
            malformed: no token list, an array of the wrong type or length, scores that are not
            finite or missing for ``llama``, a merge that is not two vocabulary tokens, a special
            token id out of range, a flag that is not a bool, an add-BOS/EOS flag without its
            token, or a chat template that is not a string; the message names the file and the key.

    Examples:
        >>> import os, gguf
        >>> from decodelab.testing import convert_llama2c
        >>> from decodelab.formats.gguf.export import export
        >>> from decodelab.formats.gguf.reader import GGUFFile
        >>> bin_path = os.path.join(os.path.dirname(decodelab.__file__), "models", "stories260K", "stories260K.bin")
        >>> path = export(convert_llama2c(bin_path, "stories"), "stories.gguf")   # with its SentencePiece vocabulary
        >>> with GGUFFile(path) as g:
        ...     tok = tokenizer_from_gguf(g)
        >>> type(tok).__name__, tok.bos_token_id, tok.eos_token_id
        ('HFTokenizer', 1, 2)
        >>> ids = tok.encode("Once upon a time")
        >>> ids[0], tok.decode(ids)                                  # BOS first, as llama.cpp adds it
        (1, 'Once upon a time')
        >>> w = gguf.GGUFWriter("bert.gguf", "llama")
        >>> w.add_tokenizer_model("bert")
        >>> w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
        >>> with GGUFFile("bert.gguf") as g:
        ...     tokenizer_from_gguf(g)
        Traceback (most recent call last):
        ...
        ValueError: bert.gguf: GGUF tokenizer model 'bert' is not supported yet (supported: 'gpt2', 'llama', 'gemma4')
    """
    from tokenizers import AddedToken, Tokenizer, processors

    from ...text.tokenizer import HFTokenizer

    kind = g.metadata.get("tokenizer.ggml.model")
    if kind is None or kind == "none":  # no vocabulary: the caller feeds token ids
        return None
    if kind not in MODELS:
        raise ValueError(f"{g.path}: GGUF tokenizer model {kind!r} is not supported yet "
                         f"(supported: {', '.join(repr(m) for m in MODELS)})")
    tokens = _array(g, "tokenizer.ggml.tokens", -1, "str")
    if not tokens:
        raise ValueError(f"{g.path}: GGUF tokenizer {kind!r} has no 'tokenizer.ggml.tokens'")
    types = _array(g, "tokenizer.ggml.token_type", len(tokens), "int")
    build = {"gpt2": _gpt2_model, "llama": _llama_model, "gemma4": _gemma4_model}[kind]
    # Each returns (model, normalizer, pre-tokenizer, decoder, add-BOS default, add-EOS default).
    model, normalizer, pre_tok, decoder, add_bos_default, add_eos_default = build(g, tokens, types)
    tok = Tokenizer(model)
    if normalizer is not None:
        tok.normalizer = normalizer
    if pre_tok is not None:
        tok.pre_tokenizer = pre_tok
    tok.decoder = decoder
    if types is not None:
        special = [tokens[i] for i in np.flatnonzero(np.isin(types, _SPECIAL_TYPES))]
        tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special])
        user = [tokens[i] for i in np.flatnonzero(types == USER_DEFINED)]
        tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in user])
    bos, eos = _token_id(g, "bos", len(tokens)), _token_id(g, "eos", len(tokens))
    # A default applies only where the token exists; a key that asks for a missing token is an error.
    add_bos = _flag(g, "tokenizer.ggml.add_bos_token", add_bos_default and bos is not None)
    if kind == "gemma4" and bos is not None:
        add_bos = True  # as llama.cpp does, whatever the file says
    add_eos = _flag(g, "tokenizer.ggml.add_eos_token", add_eos_default and eos is not None)
    for flag, tid, name in ((add_bos, bos, "bos"), (add_eos, eos, "eos")):
        if flag and tid is None:
            raise ValueError(f"{g.path}: GGUF metadata 'tokenizer.ggml.add_{name}_token' asks for a {name} "
                             f"token but 'tokenizer.ggml.{name}_token_id' is missing")
    if add_bos or add_eos:
        ends = ([(tokens[bos], bos)] if add_bos else []) + ([(tokens[eos], eos)] if add_eos and eos != bos else [])
        first = f"{tokens[bos]} " if add_bos else ""
        last = f" {tokens[eos]}" if add_eos else ""
        tok.post_processor = processors.TemplateProcessing(
            single=f"{first}$A{last}", pair=f"{first}$A{last} $B{last}", special_tokens=ends)
    out = HFTokenizer(tok, eos_token=tokens[eos] if eos is not None else None,
                      bos_token=tokens[bos] if bos is not None else None)
    added = tok.get_added_tokens_decoder().values()
    out.line_cuts = kind in ("gpt2", "gemma4") and not any("\n" in t.content for t in added)
    space_prefix = _flag(g, "tokenizer.ggml.add_space_prefix", True)
    if kind == "llama" and space_prefix and not any("\n" in t for t in tokens):
        # SentencePiece merges never join a newline here (no token holds one): cut before newlines;
        # each later piece then starts "▁\n", and the "▁" ids are dropped.
        alone = tok.encode("\n", add_special_tokens=False).ids  # the mark's ids, then the newline's
        if len(alone) > 1 and alone[-1:] == tok.encode("a\n", add_special_tokens=False).ids[-1:]:
            out.line_cuts, out.start_mark = True, alone[:-1]
    template = g.metadata.get("tokenizer.chat_template")
    if template is not None:
        if not isinstance(template, str):
            raise ValueError(f"{g.path}: GGUF metadata 'tokenizer.chat_template' must be a string")
        out.chat_template = template
    return out


def read_vocabulary(path: str):
    """The tokenizer of a GGUF file, with or without tensors (llama.cpp's ggml-vocab-*.gguf): what
    ``decodelab.text.load_tokenizer`` reads for a file that starts with the GGUF magic.

    Args:
        path: the GGUF file.

    Returns:
        A decodelab.HFTokenizer.

    Raises:
        ValueError: the file is not valid GGUF, its tokenizer metadata is malformed or not supported
            yet, or it holds no vocabulary.

    Examples:
        >>> from decodelab.testing import write_checkpoint
        >>> from decodelab.formats.gguf.export import export
        >>> read_vocabulary(export(write_checkpoint("ckpt", "llama-tiny"), "m.gguf"))
        Traceback (most recent call last):
        ...
        ValueError: m.gguf holds no vocabulary (tokenizer.ggml.model is absent or 'none')
    """
    with GGUFFile(path) as g:
        tok = tokenizer_from_gguf(g)
    if tok is None:
        raise ValueError(f"{path} holds no vocabulary (tokenizer.ggml.model is absent or 'none')")
    return tok


def _register() -> None:
    from ...text import tokenizer as text_tokenizer

    text_tokenizer.FILE_READERS[b"GGUF"] = read_vocabulary


_register()
