"""Text from a stream of tokens: incremental detokenisation that never splits a character, and stop
strings matched across token boundaries, held back until they can no longer begin one.

``Model.stream`` and the server use it; ``TextStream`` is the piece to use when tokens come from
somewhere else.

Examples:
    >>> from decodelab.text.streaming import TextStream
    >>> tok = decodelab.load("stories260K").tokenizer
    >>> ts = TextStream(tok, stops=[], include_stop=False)
    >>> [ts.push(t) for t in tok.encode("A 日")]  # 日 is three byte tokens: no text until the last
    ['', '', 'A', ' ', '', '', '日']
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Generator, List, Optional, Sequence

__all__ = ["TextStream", "StreamEnd", "text_pieces"]


@dataclasses.dataclass
class StreamEnd:
    """What a finished stream produced: every token, the whole text, and the stop string that ended it.

    Attributes:
        tokens: every token id pushed, in order (the token that completed a stop string included).
        text: the whole text: with ``include_stop`` up to and including the stop string, else up to its
            start ("" without a tokenizer).
        stop: the stop string that ended the stream, or None: the decoder finished (EOS, a length limit).

    Examples:
        >>> from decodelab.text.streaming import TextStream
        >>> ts = TextStream(None, stops=[], include_stop=False)
        >>> _ = ts.push(5)
        >>> ts.end()
        StreamEnd(tokens=[5], text='', stop=None)
    """
    tokens: List[int]
    text: str
    stop: Optional[str]


class TextStream:
    """Text of tokens pushed one at a time, in pieces safe to show.

    ``push(token)`` returns the text that is now safe to show (never half a character, never a
    possible start of a stop string), and sets ``stopped`` once a stop string appears; ``finish()``
    returns what is left and ``end()`` the ``StreamEnd``. The pieces join to the whole text. Without
    a tokenizer, no text. Each push decodes only the tokens since the last complete text, not the
    whole list (it starts over from the first token only where a token changes earlier text).

    Args:
        tokenizer: a ``Tokenizer`` (anything with ``decode(ids) -> str``), or None: tokens are only collected.
        stops: stop strings, each non-empty; the stream stops where one first appears in the text (the
            earliest, where several do). Empty: no stop strings.
        include_stop: keep the stop string at the end of the text (True) or cut the text before it (False).

    Examples:
        >>> from decodelab.text.streaming import TextStream
        >>> tok = decodelab.load("stories260K").tokenizer
        >>> ts = TextStream(tok, stops=[" a t"], include_stop=False)
        >>> pieces = []
        >>> for t in tok.encode("Once upon a time, there"):
        ...     pieces.append(ts.push(t))
        ...     if ts.stopped:
        ...         break
        >>> pieces  # " a" is held back: it may begin " a t"
        ['', 'Once', ' upon', '', '']
        >>> ts.finish(), ts.end()
        ('', StreamEnd(tokens=[1, 403, 407, 261, 378], text='Once upon', stop=' a t'))
    """

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
        """True once a stop string has appeared in the text (``stop`` names it); push then raises."""
        return self.stop is not None

    def push(self, t: int) -> str:
        """Add one token and return the text that is now safe to show.

        The text held back (an incomplete UTF-8 character, a suffix that may begin a stop string)
        comes with a later push or with ``finish()``. When the token completes a stop string the
        stream stops: ``stopped`` turns True, the text ends at the stop string (with it if
        ``include_stop``) and "" is returned; ``finish()`` gives what of it was not yet returned.

        Args:
            t: the token id (within the tokenizer's vocabulary).

        Returns:
            The new text; "" while text is held back, after a stop string, or without a tokenizer.

        Raises:
            ValueError: if the stream already stopped at a stop string.
        """
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
        """The text not yet returned, all of it final now: call it after the last push.

        Returns:
            The rest of the text ("" when everything was returned); later calls return "".
        """
        piece = self.text[self.emitted:] if len(self.text) > self.emitted else ""
        self.emitted = len(self.text)
        return piece

    def end(self) -> StreamEnd:
        """What the stream produced so far: its tokens, its whole text and the stop string, if any.

        Returns:
            A ``StreamEnd``.
        """
        return StreamEnd(self.tokens, self.text, self.stop)


def text_pieces(step: Callable[[], int], tokenizer, stops: Sequence[str],
                include_stop: bool, with_counts: bool = False) -> Generator[str, None, StreamEnd]:
    """Text of a decoder's tokens, in pieces, until it ends or a stop string appears.

    Calls ``step()`` for tokens until it returns a negative id (-1: the decoder finished) or a stop
    string appears, yielding the text in pieces that join to the whole (as ``TextStream``). The
    generator's return value (``StopIteration.value``) is the ``StreamEnd``.

    Args:
        step: a function of no arguments returning the next token id, or -1 when there is none.
        tokenizer: a ``Tokenizer``, or None: no text is yielded (the tokens are still collected).
        stops: stop strings, each non-empty; empty: none.
        include_stop: end the text with the stop string (True) or before it (False).
        with_counts: yield ``(text, tokens generated so far)`` pairs instead of text; default False.

    Yields:
        Non-empty text pieces (str), or with ``with_counts`` (str, int) pairs.

    Examples:
        >>> from decodelab.text.streaming import text_pieces
        >>> tok = decodelab.load("stories260K").tokenizer
        >>> ids = iter([403, 407, 261, 378, -1])
        >>> list(text_pieces(lambda: next(ids), tok, ["time"], include_stop=True))
        [' Once', ' upon', ' a', ' time']
        >>> ids = iter([403, 407, -1])
        >>> list(text_pieces(lambda: next(ids), tok, [], include_stop=False, with_counts=True))
        [(' Once', 1), (' upon', 2)]
    """
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
