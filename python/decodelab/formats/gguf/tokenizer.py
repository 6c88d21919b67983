"""A GGUF file's tokenizer as a Hugging Face `tokenizers` object that cuts text where llama.cpp
cuts it: `gpt2`-type byte-level BPE with its merges and `tokenizer.ggml.pre` pre-tokenizer, and
`llama`-type SentencePiece BPE with scores and byte fallback. Special tokens and the add-BOS/EOS
rule come from the metadata, with llama.cpp's defaults (llama-vocab.cpp) where a key is absent.

Examples:
    >>> MODELS, PRE_TOKENIZERS
    (('gpt2', 'llama'), ('gpt2', 'smollm', 'llama-bpe', 'llama3', 'qwen2'))
"""
from __future__ import annotations

from typing import Dict, List, Optional

import numpy as np

from .reader import GGUFFile

__all__ = ["MODELS", "PRE_TOKENIZERS", "tokenizer_from_gguf"]

# llama.cpp's token types (llama-vocab.h): the ones matched as whole tokens in text.
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
_SPECIAL_TYPES = (UNKNOWN, CONTROL)  # matched whole in text, left out of decoded text
SPIECE_SPACE = "\u2581"  # SentencePiece's visible space, "▁"

# llama.cpp's pre-tokenizer regexes (llama-vocab.cpp) for the names that are not GPT-2's own: the
# text is split by the pattern, then mapped to byte-level symbols without GPT-2's regex. Llama 3
# ("llama-bpe") keeps up to three digits together, Qwen2 one.
_LLAMA3_SPLIT = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
SPLIT_PRE_TOKENIZERS = {"llama-bpe": _LLAMA3_SPLIT, "llama3": _LLAMA3_SPLIT,
                        "qwen2": _LLAMA3_SPLIT.replace(r"\p{N}{1,3}", r"\p{N}")}
PRE_TOKENIZERS = ("gpt2", "smollm", *SPLIT_PRE_TOKENIZERS)
# Pre-tokenizers for which llama.cpp adds BOS by default and takes a word found whole in the
# vocabulary without merging (its ignore_merges).
_LLAMA3_STYLE = ("llama-bpe", "llama3")
MODELS = ("gpt2", "llama")


def _array(g: GGUFFile, key: str, n: int, kind: str):
    v = g.metadata.get(key)
    if v is None:
        return None
    if kind == "str":
        ok = isinstance(v, list) and all(isinstance(x, str) for x in v)
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
    vocab: Dict[str, int] = {}
    for i, t in enumerate(tokens):
        vocab.setdefault(t, i)
    return vocab


def _gpt2_model(g: GGUFFile, tokens: List[str], _types):
    """Byte-level BPE with the file's merges, pre-tokenized as `tokenizer.ggml.pre` says."""
    from tokenizers import Regex, decoders, models, pre_tokenizers

    pre = g.metadata.get("tokenizer.ggml.pre", "gpt2")
    # llama.cpp's pre-tokenizers: smollm splits every digit, then GPT-2's regex.
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre == "gpt2":
        pre_tok = byte_level
    elif pre == "smollm":
        pre_tok = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    elif pre in SPLIT_PRE_TOKENIZERS:
        pre_tok = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(SPLIT_PRE_TOKENIZERS[pre]), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    else:
        names = ", ".join(repr(n) for n in PRE_TOKENIZERS)
        raise ValueError(f"{g.path}: GGUF pre-tokenizer {pre!r} is not supported yet (supported: {names})")
    vocab = _vocab(tokens)
    merges = []
    # Checked here: `tokenizers` raises a bare Exception, or panics, on a merge outside the vocabulary.
    for i, m in enumerate(_array(g, "tokenizer.ggml.merges", -1, "str") or []):
        a, sep, b = m.partition(" ")
        if not sep or a not in vocab or b not in vocab or a + b not in vocab:
            raise ValueError(f"{g.path}: GGUF merge {i} ({m[:64]!r}) is not two vocabulary tokens, separated "
                             "by a space, whose joined text is a token too")
        merges.append((a, b))
    model = models.BPE(vocab=vocab, merges=merges, fuse_unk=False, ignore_merges=pre in _LLAMA3_STYLE)
    return model, None, pre_tok, decoders.ByteLevel(), pre in _LLAMA3_STYLE, False


def _spm_merges(tokens: List[str], vocab: Dict[str, int], scores: np.ndarray, types: Optional[np.ndarray]):
    """SentencePiece BPE as llama.cpp runs it merges the adjacent pair whose joined text is the
    highest-scoring token (the leftmost among equals). As BPE merges: every split of every normal
    or user-defined token into two vocabulary pieces, ranked by the joined token's score."""
    ranked = []
    for i, t in enumerate(tokens):
        if types is not None and types[i] not in (NORMAL, USER_DEFINED):
            continue
        for k in range(1, len(t)):
            a, b = t[:k], t[k:]
            if a in vocab and b in vocab:
                ranked.append((-float(scores[i]), i, vocab[a], a, b))
    ranked.sort(key=lambda r: r[:3])
    return [(a, b) for *_, a, b in ranked]


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
    model = models.BPE(vocab=vocab, merges=_spm_merges(tokens, vocab, scores, types), fuse_unk=True,
                       byte_fallback=True, unk_token=tokens[unk] if unk is not None else None)
    steps = [normalizers.Prepend(SPIECE_SPACE)] if space_prefix else []
    normalizer = normalizers.Sequence(steps + [normalizers.Replace(" ", SPIECE_SPACE)])
    decoder = decoders.Sequence([decoders.Replace(SPIECE_SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
                                + ([decoders.Strip(" ", 1, 0)] if space_prefix else []))
    return model, normalizer, None, decoder, True, False


def tokenizer_from_gguf(g: GGUFFile):
    """The file's tokenizer as a decodelab HFTokenizer, cutting text where llama.cpp cuts it.

    ``tokenizer.ggml.model`` picks the kind: ``gpt2`` (byte-level BPE with the file's merges,
    pre-tokenized as ``tokenizer.ggml.pre`` says, one of PRE_TOKENIZERS) or ``llama``
    (SentencePiece BPE with scores, a "▁" space prefix unless ``add_space_prefix`` is false, and
    byte fallback). Control and unknown tokens are special (matched whole in text, left out of
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
        ValueError: bert.gguf: GGUF tokenizer model 'bert' is not supported yet (supported: 'gpt2', 'llama')
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
    build = _gpt2_model if kind == "gpt2" else _llama_model
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
    template = g.metadata.get("tokenizer.chat_template")
    if template is not None:
        if not isinstance(template, str):
            raise ValueError(f"{g.path}: GGUF metadata 'tokenizer.chat_template' must be a string")
        out.chat_template = template
    return out
