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


def text_pieces(step: Callable[[], int], tokenizer, stops: Sequence[str],
                include_stop: bool, with_counts: bool = False) -> Generator[str, None, StreamEnd]:
    """Calls step() for tokens until it returns -1 or a stop string appears, yielding the text in
    pieces that join to the whole; returns a StreamEnd. Without a tokenizer, no text. With
    ``with_counts`` each piece comes as (text, tokens generated so far)."""
    tokens: List[int] = []
    emitted = 0
    text = ""
    stop_hit = None
    longest = max((len(s) for s in stops), default=0)
    # Incremental detokenisation: `done` is the text of tokens[:read], known complete; only
    # the window tokens[prefix:] is decoded per step and the new text is what it adds to
    # tokens[prefix:read]. (Decoding the whole list every step cost O(length) per token.)
    done, prefix, read, prefix_text = "", 0, 0, ""
    while True:
        t = step()
        if t < 0:
            break
        tokens.append(t)
        if tokenizer is None:
            continue
        window = tokenizer.decode(tokens[prefix:])
        tail = window[len(prefix_text):] if window.startswith(prefix_text) else None
        if tail is None:  # the new token changed earlier text: start over from the first token
            done, prefix, read, prefix_text = "", 0, 0, ""
            tail = tokenizer.decode(tokens)
        if tail and not tail.endswith("\ufffd"):
            done += tail
            tail = ""
            prefix, read = read, len(tokens)
            prefix_text = tokenizer.decode(tokens[prefix:read])
        text = done + tail
        if stops:
            start = max(0, emitted - longest)
            hits = [(text.find(s, start), s) for s in stops]
            hits = [(i, s) for i, s in hits if i >= 0]
            if hits:
                i, s = min(hits)
                stop_hit = s
                text = text[:i + len(s)] if include_stop else text[:i]
                break
        safe = len(text)
        while safe > emitted and text[safe - 1] == "\ufffd":  # a character still incomplete
            safe -= 1
        for s in stops:  # a suffix that may grow into a stop string
            for k in range(min(len(s) - 1, safe - emitted), 0, -1):
                if text[safe - k:safe] == s[:k]:
                    safe -= k
                    break
        if safe > emitted:
            yield (text[emitted:safe], len(tokens)) if with_counts else text[emitted:safe]
            emitted = safe
    if len(text) > emitted:
        yield (text[emitted:], len(tokens)) if with_counts else text[emitted:]
    return StreamEnd(tokens, text, stop_hit)
