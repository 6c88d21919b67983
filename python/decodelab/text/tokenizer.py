"""Tokenizers: Hugging Face tokenizer.json and GPT-2 vocab.json + merges.txt through the
``tokenizers`` library, and the llama2.c tokenizer.bin format (score-ordered BPE).

Every tokenizer has the same interface, ``Tokenizer``: ``encode`` (text to ids), ``decode`` (ids to
text), ``id_to_piece`` (one token's vocabulary entry) and ``apply_chat_template``. A loaded model's
tokenizer is ``model.tokenizer``; ``load_tokenizer`` reads one from an explicit path.

Examples:
    >>> tok = decodelab.load("stories260K").tokenizer
    >>> type(tok).__name__, tok.vocab_size
    ('Llama2cTokenizer', 512)
    >>> tok.encode("Once upon a time")
    [1, 403, 407, 261, 378]
    >>> tok.decode([1, 403, 407, 261, 378])
    'Once upon a time'
"""
from __future__ import annotations

import heapq
import os
import re
import struct
from typing import Callable, Dict, List, Optional, Sequence

__all__ = ["Tokenizer", "HFTokenizer", "Llama2cTokenizer", "find_tokenizer", "load_tokenizer"]


def _text(text) -> str:
    if not isinstance(text, str):
        raise ValueError(f"encode takes text (str), got {type(text).__name__} {text!r:.60}")
    return text


class Tokenizer:
    """Text <-> token ids: the interface every decodelab tokenizer implements.

    ``encode`` adds the special tokens the model expects (BOS for Llama-family tokenizers);
    ``decode`` leaves special tokens out of the text. The subclasses are ``HFTokenizer``
    (tokenizer.json, GPT-2's files, and a GGUF file's vocabulary) and ``Llama2cTokenizer``.

    Attributes:
        vocab_size: the number of token ids, special tokens included; ids are in [0, vocab_size).
        bos_token_id: the beginning-of-sequence token id, or None where the vocabulary has none.
        eos_token_id: the end-of-sequence token id, or None where none is known.
        chat_template: the model's Jinja chat template (GGUF ``tokenizer.chat_template``, or a Hugging Face
            folder's chat_template.jinja or tokenizer_config.json), or None: the model has none.

    Examples:
        >>> tok = decodelab.load("stories260K").tokenizer
        >>> isinstance(tok, decodelab.text.Tokenizer)
        True
        >>> tok.bos_token_id, tok.eos_token_id, tok.chat_template
        (1, 2, None)
    """

    vocab_size: int
    bos_token_id: Optional[int] = None
    eos_token_id: Optional[int] = None

    def encode(self, text: str, add_special_tokens: bool = True) -> List[int]:
        """The token ids of a text.

        Args:
            text: the text to encode (str; bytes are refused).
            add_special_tokens: add the special tokens the model expects around the text (BOS for
                Llama-family tokenizers); default True. False gives the text's own tokens only.

        Returns:
            The token ids, each in [0, vocab_size).

        Raises:
            NotImplementedError: always: each subclass implements it.
        """
        raise NotImplementedError

    def decode(self, ids: Sequence[int]) -> str:
        """The text of token ids, special tokens left out.

        Args:
            ids: token ids, each in [0, vocab_size).

        Returns:
            The text; bytes that do not form a whole UTF-8 character decode to U+FFFD.

        Raises:
            NotImplementedError: always: each subclass implements it.
        """
        raise NotImplementedError

    def id_to_piece(self, token_id: int) -> str:
        """A token's entry in the vocabulary, as the vocabulary spells it (special tokens included).

        Args:
            token_id: a token id in [0, vocab_size).

        Returns:
            The token's piece, e.g. ``"<s>"`` or ``" Once"``.

        Raises:
            NotImplementedError: always: each subclass implements it.
        """
        raise NotImplementedError

    # The model's Jinja chat template (GGUF tokenizer.chat_template, or tokenizer_config.json), or None.
    chat_template: Optional[str] = None

    def apply_chat_template(self, messages, add_generation_prompt: bool = False, tokenize: bool = False, *,
                            tools=None, chat_template: Optional[str] = None, **variables):
        """The chat template rendered over messages: the text, or with ``tokenize=True`` its token ids.

        Rendering is ``decodelab.text.chat_template.render``'s, as transformers renders it. With
        ``tokenize=True`` special tokens in the text are matched, and no BOS is added twice: the
        template writes what the model expects.

        Args:
            messages: a list of ``{"role": str, "content": str, ...}`` dicts, oldest first.
            add_generation_prompt: end with the template's opening of an assistant turn; default False.
            tokenize: return token ids instead of text; default False.
            tools: JSON-schema function specs the template writes into the prompt (a list of dicts,
                as transformers and OpenAI's API take them); default None: no tools.
            chat_template: a Jinja template to render instead of the tokenizer's own; default None.
            **variables: extra variables for the template (``date_string``, ...); ``bos_token`` and
                ``eos_token`` are set from the tokenizer unless given here.

        Returns:
            The rendered text (str), or with ``tokenize=True`` its token ids (list of int).

        Raises:
            ValueError: if there is no template (neither ``chat_template`` nor the tokenizer's own), a
                message is not a dict with str ``role`` and ``content``, ``tools`` is not a list of
                dicts, or the template fails or calls raise_exception().

        Examples:
            >>> from decodelab.testing import write_checkpoint
            >>> from decodelab.text import load_tokenizer
            >>> tok = load_tokenizer(write_checkpoint("chat", "llama-tiny", byte_tokenizer=True), 512)
            >>> tok.chat_template = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{{ eos_token }}{% endfor %}"
            >>> tok.apply_chat_template([{"role": "user", "content": "Hi"}])
            '<user>Hi<|endoftext|>'
            >>> tok.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=True)
            [60, 117, 115, 101, 114, 62, 72, 105, 256]
            >>> tok.apply_chat_template([{"role": "user", "content": "Hi"}], chat_template="{{ messages[0].content }}!")
            'Hi!'
        """
        from . import chat_template as chat

        template = self.chat_template if chat_template is None else chat_template
        if template is None:
            raise ValueError("this tokenizer has no chat template (none in the GGUF metadata or tokenizer_config.json); "
                             "pass one as chat_template='...'")
        names = {k: self.id_to_piece(i) for k, i in (("bos_token", self.bos_token_id), ("eos_token", self.eos_token_id))
                 if i is not None}
        if tools is not None:
            variables["tools"] = tools
        text = chat.render(template, messages, add_generation_prompt=add_generation_prompt, **{**names, **variables})
        return self.encode(text, add_special_tokens=False) if tokenize else text


class HFTokenizer(Tokenizer):
    """A ``tokenizers.Tokenizer``, from tokenizer.json or from GPT-2's vocab.json + merges.txt.

    Usually made by ``from_file`` or ``from_gpt2_files`` (or by loading a model folder), which also find
    the BOS and EOS tokens.

    Args:
        tok: the ``tokenizers.Tokenizer`` to wrap.
        eos_token: the end-of-sequence token's text (e.g. ``"</s>"``); default None: no EOS id. A token the
            vocabulary lacks also gives None.
        bos_token: the beginning-of-sequence token's text (e.g. ``"<s>"``); default None: no BOS id.

    Examples:
        >>> from tokenizers import Tokenizer
        >>> from decodelab.testing import write_checkpoint
        >>> from decodelab.text import HFTokenizer
        >>> folder = write_checkpoint("ckpt", "llama-tiny", byte_tokenizer=True)
        >>> raw = Tokenizer.from_file(folder + "/tokenizer.json")
        >>> tok = HFTokenizer(raw, eos_token="<|endoftext|>")
        >>> tok.vocab_size, tok.eos_token_id, tok.bos_token_id
        (512, 256, None)
    """

    # A text longer than twice this many characters is cut into pieces of about this size at line
    # starts (where line_cuts allows) and the pieces encoded together, on the library's threads.
    CHUNK_CHARS = 8192

    def __init__(self, tok, eos_token: Optional[str] = None, bos_token: Optional[str] = None):
        self._tok = tok
        # True where the pre-tokenizer never joins a newline to the text after it (llama.cpp's GGUF
        # byte-level BPE and Gemma 4 lists) and no added token holds a newline: cutting there gives
        # the same ids, and long texts encode in linear time.
        self.line_cuts = False
        # For a pipeline that marks the start of a text (SentencePiece's "▁" prefix): the ids that
        # mark gives before a newline; pieces after the first then start with their newline and
        # lose those ids.
        self.start_mark = None
        self._ends = None
        self.vocab_size = tok.get_vocab_size(with_added_tokens=True)
        self.eos_token_id = tok.token_to_id(eos_token) if eos_token else None
        self.bos_token_id = tok.token_to_id(bos_token) if bos_token else None

    @classmethod
    def from_file(cls, path: str) -> "HFTokenizer":
        """A tokenizer from a Hugging Face tokenizer.json.

        The EOS token is the first of ``</s>``, ``<|endoftext|>``, ``<|end_of_text|>``, ``<|eot_id|>`` and
        ``<|im_end|>`` in the vocabulary, the BOS token the first of ``<s>`` and ``<|begin_of_text|>``
        (None where there is none). The chat template is not read here; a model folder's is
        (``find_tokenizer``).

        Args:
            path: the tokenizer.json file.

        Returns:
            The tokenizer.

        Raises:
            ValueError: if the file cannot be read as a tokenizer.json (the message names the file and the
                ``tokenizers`` library's error).

        Examples:
            >>> from decodelab.testing import write_checkpoint
            >>> from decodelab.text import HFTokenizer
            >>> folder = write_checkpoint("ckpt", "llama-tiny", byte_tokenizer=True)
            >>> tok = HFTokenizer.from_file(folder + "/tokenizer.json")
            >>> tok.encode("Hi!"), tok.eos_token_id
            ([72, 105, 33], 256)
        """
        from tokenizers import Tokenizer as _T

        try:
            tok = _T.from_file(path)
        except Exception as e:  # the library raises its own Exception type
            raise ValueError(f"{path}: cannot read tokenizer.json ({e})") from None
        eos = bos = None
        for t in ("</s>", "<|endoftext|>", "<|end_of_text|>", "<|eot_id|>", "<|im_end|>"):
            if tok.token_to_id(t) is not None:
                eos = t
                break
        for t in ("<s>", "<|begin_of_text|>"):
            if tok.token_to_id(t) is not None:
                bos = t
                break
        return cls(tok, eos_token=eos, bos_token=bos)

    @classmethod
    def from_gpt2_files(cls, vocab_json: str, merges_txt: str) -> "HFTokenizer":
        """A GPT-2 tokenizer from vocab.json and merges.txt.

        Byte-level BPE exactly as GPT2TokenizerFast builds it.
        ``<|endoftext|>`` is added as a special token and is both BOS and EOS; ``encode`` adds no
        special tokens to the text (GPT-2 adds none).

        Args:
            vocab_json: the vocab.json file (piece to id).
            merges_txt: the merges.txt file (one merge a line, after an optional ``#version`` line).

        Returns:
            The tokenizer.

        Raises:
            ValueError: if the files cannot be read (the message names both and the ``tokenizers`` library's error).

        Examples:
            >>> import json
            >>> from decodelab.text import HFTokenizer
            >>> with open("vocab.json", "w") as f:
            ...     json.dump({"h": 0, "i": 1, "hi": 2}, f)
            >>> with open("merges.txt", "w") as f:
            ...     _ = f.write("#version: 0.2\\nh i\\n")
            >>> tok = HFTokenizer.from_gpt2_files("vocab.json", "merges.txt")
            >>> tok.encode("hih"), tok.eos_token_id, tok.id_to_piece(3)
            ([2, 0], 3, '<|endoftext|>')
        """
        from tokenizers import Tokenizer as _T, decoders, models, pre_tokenizers, processors

        try:
            bpe = models.BPE.from_file(vocab_json, merges_txt)
        except Exception as e:
            raise ValueError(f"cannot read GPT-2 tokenizer {vocab_json} / {merges_txt} ({e})") from None
        tok = _T(bpe)
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
        tok.add_special_tokens(["<|endoftext|>"])
        return cls(tok, eos_token="<|endoftext|>", bos_token="<|endoftext|>")

    def encode(self, text: str, add_special_tokens: bool = True) -> List[int]:
        """The token ids of a text, through the tokenizer.json's pipeline.

        Args:
            text: the text to encode (str). Special tokens written in it (``<|endoftext|>``) are matched.
            add_special_tokens: apply the tokenizer.json's post-processor (the BOS or other tokens it
                adds); default True. False gives the text's own tokens only.

        Returns:
            The token ids.

        Raises:
            ValueError: if ``text`` is not a str.

        Examples:
            >>> from decodelab.testing import write_checkpoint
            >>> from decodelab.text import load_tokenizer
            >>> tok = load_tokenizer(write_checkpoint("ckpt", "llama-tiny", byte_tokenizer=True), 512)
            >>> tok.encode("é<|endoftext|>")
            [195, 169, 256]
        """
        text = _text(text)
        if not self.line_cuts or len(text) <= 2 * self.CHUNK_CHARS:
            return self._tok.encode(text, add_special_tokens=add_special_tokens).ids
        mark = self.start_mark
        pieces = _line_pieces(text, self.CHUNK_CHARS, before=mark is not None)
        encoded = [e.ids for e in self._tok.encode_batch(pieces, add_special_tokens=False)]
        if mark:
            for k in range(1, len(encoded)):
                if encoded[k][:len(mark)] != mark:  # not cut as planned: encode it whole
                    return self._tok.encode(text, add_special_tokens=add_special_tokens).ids
                encoded[k] = encoded[k][len(mark):]
        ids = [i for e in encoded for i in e]
        if not add_special_tokens:
            return ids
        if self._ends is None:  # the post-processor's tokens before and after a text
            e = self._tok.encode("a", add_special_tokens=True)
            own = [k for k, m in enumerate(e.special_tokens_mask) if not m]
            self._ends = (e.ids[:own[0]], e.ids[own[-1] + 1:]) if own else (e.ids, [])
        return self._ends[0] + ids + self._ends[1]

    def decode(self, ids: Sequence[int]) -> str:
        """The text of token ids, special tokens left out.

        Args:
            ids: token ids, each in [0, vocab_size).

        Returns:
            The text; bytes that do not form a whole UTF-8 character decode to U+FFFD.

        Examples:
            >>> from decodelab.testing import write_checkpoint
            >>> from decodelab.text import load_tokenizer
            >>> tok = load_tokenizer(write_checkpoint("ckpt", "llama-tiny", byte_tokenizer=True), 512)
            >>> tok.decode([72, 105, 256])
            'Hi'
            >>> tok.decode([195]) == "\\ufffd"  # the first byte of é alone
            True
        """
        return self._tok.decode(list(ids), skip_special_tokens=True)

    def id_to_piece(self, token_id: int) -> str:
        """A token's entry in the vocabulary (byte-level vocabularies spell a space ``Ġ``).

        Args:
            token_id: a token id in [0, vocab_size).

        Returns:
            The token's piece, or None for an id outside the vocabulary (the ``tokenizers`` library's answer).
        """
        return self._tok.id_to_token(token_id)


_BYTE_PIECE = re.compile(rb"^<0x([0-9A-Fa-f]{2})>$")


class Llama2cTokenizer(Tokenizer):
    """llama2.c's tokenizer.bin, encoded and decoded as run.c does.

    The file holds an int32 max_token_length, then per token a float32 score, an int32 length and
    the piece's bytes. Encoding follows run.c: a leading dummy space, each UTF-8 character looked up
    (unknown ones fall back to <0xNN> byte tokens, id = byte + 3), then the adjacent pair whose merge
    has the highest score is merged until none is in the vocabulary.

    Attributes:
        path: the tokenizer.bin file read.
        pieces: each token's bytes, by id.
        scores: each token's merge score, by id (higher merges first).

    Args:
        path: the tokenizer.bin file.
        vocab_size: the number of tokens to read from it: the model's vocabulary size (>= 1).
        bos_token_id: the BOS token id; default 1, llama2.c's. None: encode adds no BOS.
        eos_token_id: the EOS token id; default 2, llama2.c's.

    Raises:
        ValueError: if the file is shorter than its header, ends before ``vocab_size`` tokens (truncated, or
            the wrong vocabulary size), or a token's length runs past its end.
        OSError: if the file cannot be opened.

    Examples:
        >>> from decodelab.text import Llama2cTokenizer
        >>> path = decodelab.load("stories260K").tokenizer.path  # the tok512.bin inside the package
        >>> tok = Llama2cTokenizer(path, 512)
        >>> tok.encode("Once upon a time")
        [1, 403, 407, 261, 378]
        >>> tok.pieces[403], tok.scores[403]
        (b' Once', -144.0)
    """

    def __init__(self, path: str, vocab_size: int, bos_token_id: int = 1, eos_token_id: int = 2):
        self.path = path
        self.vocab_size = vocab_size
        self.bos_token_id = bos_token_id
        self.eos_token_id = eos_token_id
        with open(path, "rb") as f:
            data = f.read()
        pieces: List[bytes] = []
        scores: List[float] = []
        pos = 4
        if len(data) < 4:
            raise ValueError(f"{path}: too short for a llama2.c tokenizer")
        for i in range(vocab_size):
            if pos + 8 > len(data):
                raise ValueError(f"{path}: ends at token {i} of {vocab_size}; truncated or the wrong vocabulary size")
            score, n = struct.unpack_from("<fi", data, pos)
            pos += 8
            if n < 0 or pos + n > len(data):
                raise ValueError(f"{path}: token {i} has length {n} past the end of the file")
            pieces.append(data[pos:pos + n])
            scores.append(score)
            pos += n
        self.pieces = pieces
        self.scores = scores
        self._lookup: Dict[bytes, int] = {}
        for i, p in enumerate(pieces):
            self._lookup.setdefault(p, i)
        # Each token's rank by score, highest first; equal scores share a rank.
        order = {sc: r for r, sc in enumerate(sorted(set(scores), reverse=True))}
        self._rank = [order[sc] for sc in scores]
        self._byte_token = {}
        for i, p in enumerate(pieces):
            m = _BYTE_PIECE.match(p)
            if m:
                self._byte_token[int(m.group(1), 16)] = i

    def encode(self, text: str, add_special_tokens: bool = True) -> List[int]:
        """The token ids of a text, as run.c encodes it: BOS, then the text after a dummy space.

        Args:
            text: the text to encode (str). The empty text gives BOS alone (or nothing).
            add_special_tokens: start with BOS (where bos_token_id is not None); default True.

        Returns:
            The token ids.

        Raises:
            ValueError: if ``text`` is not a str, or a character is neither in the vocabulary nor covered by
                <0xNN> byte tokens.

        Examples:
            >>> tok = decodelab.load("stories260K").tokenizer
            >>> tok.encode("Once"), tok.encode("Once", add_special_tokens=False), tok.encode("")
            ([1, 403], [403], [1])
            >>> tok.encode("日")  # not in the vocabulary: its UTF-8 bytes E6 97 A5 as byte tokens (byte + 3)
            [1, 410, 233, 154, 168]
        """
        _text(text)
        ids: List[int] = []
        if add_special_tokens and self.bos_token_id is not None:
            ids.append(self.bos_token_id)
        return ids + self.encode_pieces(text, dummy_prefix=True) if text else ids

    def encode_pieces(self, text: str, dummy_prefix: bool = False) -> List[int]:
        """The text's tokens without BOS and, unless dummy_prefix, without SentencePiece's leading space.

        Without the dummy prefix the tokens' bytes are exactly the text's (what a grammar engine
        tokenizes).

        Args:
            text: the text to encode (str).
            dummy_prefix: start with SentencePiece's dummy space, as ``encode`` does; default False.

        Returns:
            The token ids.

        Raises:
            ValueError: if ``text`` is not a str, or a byte of the text has no <0xNN> byte-fallback token.

        Examples:
            >>> tok = decodelab.load("stories260K").tokenizer
            >>> tok.encode_pieces("Once"), tok.encode_pieces("Once", dummy_prefix=True)
            ([441, 416, 331], [403])
        """
        toks: List[int] = []
        dummy = self._lookup.get(b" ") if dummy_prefix else None
        if dummy is not None:
            toks.append(dummy)
        for ch in _text(text):
            b = ch.encode("utf-8")
            t = self._lookup.get(b)
            if t is not None:
                toks.append(t)
            else:
                for byte in b:
                    if byte not in self._byte_token:
                        raise ValueError(f"{self.path}: no byte-fallback token for byte 0x{byte:02X}")
                    toks.append(self._byte_token[byte])
        return self._merge(toks)

    def _merge(self, toks: List[int]) -> List[int]:
        """run.c's loop (merge the adjacent pair whose merge scores highest, the leftmost among
        equals, until no pair merges) in O(n log n): the symbols form a linked list and the
        candidate pairs a heap of ints, rank x n + left position (rank 0: the highest score; equal
        scores share a rank), so ties pop leftmost first as run.c's scan finds them. A popped pair
        whose symbols no longer merge at that rank is stale and skipped. Plain ints keep the heap
        out of the garbage collector's way."""
        n = len(toks)
        if n < 2:
            return toks
        pieces, lookup, rank = self.pieces, self._lookup, self._rank
        sym = list(toks)
        nxt = list(range(1, n)) + [-1]
        prv = list(range(-1, n - 1))
        alive = [True] * n

        def pair_rank(i: int) -> int:
            j = nxt[i]
            if j < 0:
                return -1
            merged = lookup.get(pieces[sym[i]] + pieces[sym[j]])
            return -1 if merged is None else rank[merged]

        heap = [r * n + i for i in range(n - 1) for r in (pair_rank(i),) if r >= 0]
        heapq.heapify(heap)
        while heap:
            key = heapq.heappop(heap)
            r, i = divmod(key, n)
            if not alive[i] or pair_rank(i) != r:
                continue  # stale: one of the two symbols has merged since
            j = nxt[i]
            sym[i] = lookup[pieces[sym[i]] + pieces[sym[j]]]
            alive[j] = False
            nxt[i] = nxt[j]
            if nxt[j] >= 0:
                prv[nxt[j]] = i
            for k in (prv[i], i):
                if k >= 0:
                    rk = pair_rank(k)
                    if rk >= 0:
                        heapq.heappush(heap, rk * n + k)
        return [sym[i] for i in range(n) if alive[i]]

    def _piece_bytes(self, token_id: int) -> bytes:
        p = self.pieces[token_id]
        m = _BYTE_PIECE.match(p)
        return bytes([int(m.group(1), 16)]) if m else p

    def decode(self, ids: Sequence[int]) -> str:
        """The text of token ids, as run.c prints it.

        BOS, EOS and token 0 (``<unk>``) are left out, and the space a token after BOS starts with
        (SentencePiece's dummy prefix) is dropped; <0xNN> tokens are their byte.

        Args:
            ids: token ids, each in [0, vocab_size).

        Returns:
            The text; bytes that do not form a whole UTF-8 character decode to U+FFFD.

        Raises:
            ValueError: if an id is outside [0, vocab_size) (the message names the id and the range).

        Examples:
            >>> tok = decodelab.load("stories260K").tokenizer
            >>> tok.decode([1, 403, 407, 261, 378, 2])
            'Once upon a time'
            >>> tok.decode([403])  # no BOS before it: the space stays
            ' Once'
        """
        out = bytearray()
        prev = None
        for t in ids:
            t = int(t)
            if not 0 <= t < self.vocab_size:
                raise ValueError(f"token id {t} is outside the vocabulary [0, {self.vocab_size})")
            if t in (self.bos_token_id, self.eos_token_id, 0):
                prev = t
                continue
            b = self._piece_bytes(t)
            # SentencePiece's dummy prefix: the space after BOS is not part of the text (run.c).
            if prev == self.bos_token_id and b.startswith(b" "):
                b = b[1:]
            out += b
            prev = t
        return out.decode("utf-8", errors="replace")

    def id_to_piece(self, token_id: int) -> str:
        """A token's entry in the vocabulary, as text (bytes that are not UTF-8 become U+FFFD).

        Args:
            token_id: a token id in [0, vocab_size); others raise IndexError (negative ones count from
                the end, as in a list).

        Returns:
            The token's piece, e.g. ``" Once"`` or ``"<0x0A>"``.
        """
        return self.pieces[token_id].decode("utf-8", errors="replace")


_LINE_START = re.compile(r"(?<=[!-~]\n)(?=[!-~])")  # a newline between two printable ASCII characters


def _line_pieces(text: str, size: int, before: bool = False) -> List[str]:
    """text cut into pieces of at least ``size`` characters, each cut just after (or ``before``) a
    newline that has a printable ASCII character on each side (none inside a run of whitespace)."""
    pieces, start = [], 0
    while len(text) - start > 2 * size:
        m = _LINE_START.search(text, start + size)
        if m is None:
            break
        cut = m.start() - 1 if before else m.start()
        pieces.append(text[start:cut])
        start = cut
    pieces.append(text[start:])
    return pieces


def _folder_chat_template(folder: str) -> Optional[str]:
    """A Hugging Face folder's chat template: chat_template.jinja, else tokenizer_config.json's
    "chat_template" (a string, or a list of named templates, of which "default")."""
    from ..config import load_json

    jinja = os.path.join(folder, "chat_template.jinja")
    if os.path.exists(jinja):
        with open(jinja, encoding="utf-8") as f:
            return f.read()
    cfg_path = os.path.join(folder, "tokenizer_config.json")
    if not os.path.exists(cfg_path):
        return None
    tpl = load_json(cfg_path).get("chat_template")
    if isinstance(tpl, list):
        named = {d.get("name"): d.get("template") for d in tpl if isinstance(d, dict)}
        tpl = named.get("default")
    if tpl is not None and not isinstance(tpl, str):
        raise ValueError(f"{cfg_path}: chat_template must be a string or a list of named templates")
    return tpl


def find_tokenizer(folder: str, vocab_size: Optional[int]) -> Optional[Tokenizer]:
    """The tokenizer of a model folder, or None where it has no tokenizer files.

    Looks for tokenizer.json (with the chat template of chat_template.jinja or
    tokenizer_config.json), else vocab.json + merges.txt, else a llama2.c tokenizer.bin (or
    tok<vocab_size>.bin), in that order.

    Args:
        folder: the model folder.
        vocab_size: the model's vocabulary size: how many tokens a llama2.c .bin holds; needed where
            the folder's tokenizer is one, unused for the others.

    Returns:
        The tokenizer, or None.

    Raises:
        ValueError: if a file is there but cannot be read (the message names the file), or the
            folder's tokenizer is a llama2.c .bin and vocab_size is None.

    Examples:
        >>> from decodelab.testing import write_checkpoint
        >>> from decodelab.text.tokenizer import find_tokenizer
        >>> type(find_tokenizer(write_checkpoint("ckpt", "llama-tiny", byte_tokenizer=True), 512)).__name__
        'HFTokenizer'
        >>> import os
        >>> os.makedirs("empty", exist_ok=True)
        >>> find_tokenizer("empty", 512) is None
        True
    """
    tj = os.path.join(folder, "tokenizer.json")
    if os.path.exists(tj):
        tok = HFTokenizer.from_file(tj)
        tok.chat_template = _folder_chat_template(folder)
        return tok
    vj, mt = os.path.join(folder, "vocab.json"), os.path.join(folder, "merges.txt")
    if os.path.exists(vj) and os.path.exists(mt):
        return HFTokenizer.from_gpt2_files(vj, mt)
    for name in ("tokenizer.bin", f"tok{vocab_size}.bin"):
        p = os.path.join(folder, name)
        if os.path.exists(p):
            return _llama2c(p, vocab_size)
    return None


def _llama2c(path: str, vocab_size: Optional[int]) -> "Llama2cTokenizer":
    if vocab_size is None:
        raise ValueError(f"{path} is read as a llama2.c tokenizer.bin, which needs vocab_size (the model's "
                         "vocabulary size); got None")
    return Llama2cTokenizer(path, vocab_size)


def load_tokenizer(path: str, vocab_size: Optional[int] = None) -> Tokenizer:
    """A tokenizer from an explicit path: a folder, tokenizer.json, a GGUF file, or a llama2.c .bin.

    A folder is searched as ``find_tokenizer`` does; a file ending in .json is read as tokenizer.json,
    a GGUF file (with or without tensors, such as llama.cpp's vocabulary-only ggml-vocab-*.gguf)
    for its tokenizer metadata, any other file as a llama2.c tokenizer.bin.

    Args:
        path: a model folder, a tokenizer.json file, a GGUF file or a llama2.c tokenizer .bin file.
        vocab_size: the model's vocabulary size: how many tokens a llama2.c .bin holds; needed when
            the path is one or the folder holds one, unused for the others.

    Returns:
        The tokenizer.

    Raises:
        FileNotFoundError: if the path does not exist, or the folder has no tokenizer files.
        ValueError: if the file cannot be read as that kind of tokenizer (the message names the file),
            or a llama2.c .bin is given without vocab_size.

    Examples:
        >>> from decodelab.text import load_tokenizer
        >>> tok = load_tokenizer(decodelab.load("stories260K").tokenizer.path, 512)
        >>> type(tok).__name__, tok.encode("Once")
        ('Llama2cTokenizer', [1, 403])
        >>> load_tokenizer("missing", 512)
        Traceback (most recent call last):
        ...
        FileNotFoundError: tokenizer file missing does not exist
    """
    if os.path.isdir(path):
        tok = find_tokenizer(path, vocab_size)
        if tok is None:
            raise FileNotFoundError(f"no tokenizer files in {path}")
        return tok
    if not os.path.exists(path):
        raise FileNotFoundError(f"tokenizer file {path} does not exist")
    if path.endswith(".json"):
        return HFTokenizer.from_file(path)
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic in FILE_READERS:
        return FILE_READERS[magic](path)
    return _llama2c(path, vocab_size)


# File magic -> a function that reads the file's tokenizer: filled in by the format modules above
# this layer (decodelab.formats.gguf registers b"GGUF"), so that this module does not import them.
FILE_READERS: Dict[bytes, Callable[[str], "Tokenizer"]] = {}
