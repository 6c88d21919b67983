"""Text from a stream of tokens: incremental detokenisation that never splits a character, and stop
strings matched across token boundaries, held back until they can no longer begin one."""
from __future__ import annotations

import dataclasses
from typing import Callable, Generator, List, Optional, Sequence


@dataclasses.dataclass
class StreamEnd:
    """What a finished stream produced: every token, the whole text, and the stop string that ended
    it (None: the decoder finished)."""
    tokens: List[int]
    text: str
    stop: Optional[str]


class TextStream:
    """Text of tokens pushed one at a time: push(token) returns the text that is now safe to show
    (never half a character, never a possible start of a stop string), and sets ``stopped`` once a
    stop string appears; finish() returns what is left and end() the StreamEnd. Without a
    tokenizer, no text."""

    def __init__(self, tokenizer, stops: Sequence[str], include_stop: bool):
        self.tokenizer, self.stops, self.include_stop = tokenizer, list(stops), include_stop
        self.tokens: List[int] = []
        self.text = ""
        self.stop: Optional[str] = None
        self.emitted = 0
        self._longest = max((len(s) for s in self.stops), default=0)
        # Incremental detokenisation: `done` is the text of tokens[:read], known complete; only
        # the window tokens[prefix:] is decoded per token and the new text is what it adds to
        # tokens[prefix:read]. (Decoding the whole list every token cost O(length) per token.)
        self._done, self._prefix, self._read, self._prefix_text = "", 0, 0, ""

    @property
    def stopped(self) -> bool:
        return self.stop is not None

    def push(self, t: int) -> str:
        if self.stopped:
            raise ValueError("the stream already ended at a stop string")
        tokens, tok = self.tokens, self.tokenizer
        tokens.append(t)
        if tok is None:
            return ""
        window = tok.decode(tokens[self._prefix:])
        tail = window[len(self._prefix_text):] if window.startswith(self._prefix_text) else None
        if tail is None:  # the new token changed earlier text: start over from the first token
            self._done, self._prefix, self._read, self._prefix_text = "", 0, 0, ""
            tail = tok.decode(tokens)
        if tail and not tail.endswith("\ufffd"):
            self._done += tail
            tail = ""
            self._prefix, self._read = self._read, len(tokens)
            self._prefix_text = tok.decode(tokens[self._prefix:self._read])
        text = self._done + tail
        if self.stops:
            start = max(0, self.emitted - self._longest)
            hits = [(text.find(s, start), s) for s in self.stops]
            hits = [(i, s) for i, s in hits if i >= 0]
            if hits:
                i, s = min(hits)
                self.stop = s
                self.text = text[:i + len(s)] if self.include_stop else text[:i]
                return ""
        self.text = text
        safe = len(text)
        while safe > self.emitted and text[safe - 1] == "\ufffd":  # a character still incomplete
            safe -= 1
        for s in self.stops:  # a suffix that may grow into a stop string
            for k in range(min(len(s) - 1, safe - self.emitted), 0, -1):
                if text[safe - k:safe] == s[:k]:
                    safe -= k
                    break
        piece = text[self.emitted:safe] if safe > self.emitted else ""
        self.emitted = max(self.emitted, safe)
        return piece

    def finish(self) -> str:
        """The text not yet returned (all of it is final now)."""
        piece = self.text[self.emitted:] if len(self.text) > self.emitted else ""
        self.emitted = len(self.text)
        return piece

    def end(self) -> StreamEnd:
        return StreamEnd(self.tokens, self.text, self.stop)


def text_pieces(step: Callable[[], int], tokenizer, stops: Sequence[str],
                include_stop: bool, with_counts: bool = False) -> Generator[str, None, StreamEnd]:
    """Calls step() for tokens until it returns -1 or a stop string appears, yielding the text in
    pieces that join to the whole; returns a StreamEnd. Without a tokenizer, no text. With
    ``with_counts`` each piece comes as (text, tokens generated so far)."""
    ts = TextStream(tokenizer, stops, include_stop)
    while not ts.stopped:
        t = step()
        if t < 0:
            break
        piece = ts.push(t)
        if piece:
            yield (piece, len(ts.tokens)) if with_counts else piece
    rest = ts.finish()
    if rest:
        yield (rest, len(ts.tokens)) if with_counts else rest
    return ts.end()
