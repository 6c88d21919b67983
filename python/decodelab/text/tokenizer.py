"""Tokenizers: Hugging Face tokenizer.json and GPT-2 vocab.json + merges.txt through the
`tokenizers` library, and the llama2.c tokenizer.bin format (score-ordered BPE)."""
from __future__ import annotations

import heapq
import os
import re
import struct
from typing import Dict, List, Optional, Sequence


def _text(text) -> str:
    if not isinstance(text, str):
        raise ValueError(f"encode takes text (str), got {type(text).__name__} {text!r:.60}")
    return text


class Tokenizer:
    """Text <-> token ids. ``encode`` adds the special tokens the model expects (BOS for
    Llama-family tokenizers); ``decode`` leaves special tokens out of the text."""

    vocab_size: int
    bos_token_id: Optional[int] = None
    eos_token_id: Optional[int] = None

    def encode(self, text: str, add_special_tokens: bool = True) -> List[int]:
        raise NotImplementedError

    def decode(self, ids: Sequence[int]) -> str:
        raise NotImplementedError

    def id_to_piece(self, token_id: int) -> str:
        raise NotImplementedError

    # The model's Jinja chat template (GGUF tokenizer.chat_template, or tokenizer_config.json), or None.
    chat_template: Optional[str] = None

    def apply_chat_template(self, messages, add_generation_prompt: bool = False, tokenize: bool = False,
                            **variables):
        """The chat template rendered over messages ([{"role": ..., "content": ...}, ...]): the text,
        or with ``tokenize=True`` its token ids (special tokens in the text are matched, and no BOS
        is added twice: the template writes what the model expects). Extra keyword variables pass
        through to the template; bos_token and eos_token are set from the tokenizer."""
        from . import chat_template as chat

        if self.chat_template is None:
            raise ValueError("this tokenizer has no chat template (none in the GGUF metadata or tokenizer_config.json)")
        names = {k: self.id_to_piece(i) for k, i in (("bos_token", self.bos_token_id), ("eos_token", self.eos_token_id))
                 if i is not None}
        text = chat.render(self.chat_template, messages, add_generation_prompt=add_generation_prompt,
                           **{**names, **variables})
        return self.encode(text, add_special_tokens=False) if tokenize else text


class HFTokenizer(Tokenizer):
    """A `tokenizers.Tokenizer`, from tokenizer.json or from GPT-2's vocab.json + merges.txt."""

    def __init__(self, tok, eos_token: Optional[str] = None, bos_token: Optional[str] = None):
        self._tok = tok
        self.vocab_size = tok.get_vocab_size(with_added_tokens=True)
        self.eos_token_id = tok.token_to_id(eos_token) if eos_token else None
        self.bos_token_id = tok.token_to_id(bos_token) if bos_token else None

    @classmethod
    def from_file(cls, path: str) -> "HFTokenizer":
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
        """Byte-level BPE exactly as GPT2TokenizerFast builds it."""
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
        return self._tok.encode(_text(text), add_special_tokens=add_special_tokens).ids

    def decode(self, ids: Sequence[int]) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=True)

    def id_to_piece(self, token_id: int) -> str:
        return self._tok.id_to_token(token_id)


_BYTE_PIECE = re.compile(rb"^<0x([0-9A-Fa-f]{2})>$")


class Llama2cTokenizer(Tokenizer):
    """llama2.c's tokenizer.bin: int32 max_token_length, then per token float32 score, int32
    length and the piece's bytes. Encoding follows run.c: a leading dummy space, each UTF-8
    character looked up (unknown ones fall back to <0xNN> byte tokens, id = byte + 3), then the
    adjacent pair whose merge has the highest score is merged until none is in the vocabulary."""

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
        _text(text)
        ids: List[int] = []
        if add_special_tokens and self.bos_token_id is not None:
            ids.append(self.bos_token_id)
        return ids + self.encode_pieces(text, dummy_prefix=True) if text else ids

    def encode_pieces(self, text: str, dummy_prefix: bool = False) -> List[int]:
        """The text's tokens without BOS and, unless dummy_prefix, without SentencePiece's leading
        space: tokens whose bytes are exactly the text's (what a grammar engine tokenizes)."""
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
        return self.pieces[token_id].decode("utf-8", errors="replace")


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


def find_tokenizer(folder: str, vocab_size: int) -> Optional[Tokenizer]:
    """The tokenizer files of a model folder: tokenizer.json, else vocab.json + merges.txt,
    else a llama2.c tokenizer.bin (or tok<vocab_size>.bin)."""
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
            return Llama2cTokenizer(p, vocab_size)
    return None


def load_tokenizer(path: str, vocab_size: int) -> Tokenizer:
    """A tokenizer from an explicit path: a folder, tokenizer.json, or a llama2.c .bin."""
    if os.path.isdir(path):
        tok = find_tokenizer(path, vocab_size)
        if tok is None:
            raise FileNotFoundError(f"no tokenizer files in {path}")
        return tok
    if not os.path.exists(path):
        raise FileNotFoundError(f"tokenizer file {path} does not exist")
    if path.endswith(".json"):
        return HFTokenizer.from_file(path)
    return Llama2cTokenizer(path, vocab_size)
