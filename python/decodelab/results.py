"""What generate() returns: the Generation, its sequences and per-token logprobs.

:class:`Generation` is the result of one ``Model.generate`` call; :class:`GeneratedSequence` is one of its
``sequences`` (beams, or n samples); :class:`TokenLogprob` is one generated token's log-probability with
``logprobs=N``; :class:`StreamPiece` is what ``Model.stream_tokens`` yields; :class:`Speculation` and
:class:`SpeculationRound` record speculative decoding (``draft=``).

Examples:
    >>> model = decodelab.load("stories260K")
    >>> g = model.generate("Once upon a time", max_new_tokens=8, eos_token_id=[])
    >>> type(g).__name__, len(g.token_ids), g.finish_reason
    ('Generation', 8, 'length')
"""
from __future__ import annotations

import dataclasses
from typing import List, NamedTuple, Optional, Tuple, Union

from .beam import BeamTree
from .trace import Trace

__all__ = ["Generation", "GeneratedSequence", "TokenLogprob", "TopLogprob", "StreamPiece", "Speculation",
           "SpeculationRound"]


class TopLogprob(NamedTuple):
    """One of the likeliest tokens at a step: its id, natural-log probability and text.

    Examples:
        >>> from decodelab.results import TopLogprob
        >>> TopLogprob(token=791, logprob=-0.25, text=" Paris")
        TopLogprob(token=791, logprob=-0.25, text=' Paris')
    """

    token: int
    logprob: float
    text: str


def token_logprobs(tokens, logprobs, top_ids, top_logprobs, decode) -> List["TokenLogprob"]:
    """TokenLogprob records from the engine's parallel lists; decode(id) writes a token's text."""
    return [TokenLogprob(token=t, logprob=l, text=decode(t),
                         top=[TopLogprob(int(i), float(v), decode(int(i))) for i, v in zip(ti, tv)])
            for t, l, ti, tv in zip(tokens, logprobs, top_ids, top_logprobs)]


@dataclasses.dataclass
class TokenLogprob:
    """A generated token's log-probability and the most likely alternatives at that step.

    Recorded per token with ``generate(..., logprobs=N)``, under the raw distribution
    (``logprobs_mode="raw"``, the default) or the processed one the token was drawn from ("processed").

    Attributes:
        token: the generated token id.
        logprob: its natural-log probability at that step (<= 0).
        top: the N most likely tokens at that step as TopLogprob(token, logprob, text), best
            first; N is the ``logprobs`` asked for (0: an empty list).
        text: the token's text, as the tokenizer decodes it alone ("" without a tokenizer); a
            token that holds part of a multi-byte character decodes to U+FFFD.

    Examples:
        >>> model = decodelab.load("stories260K")
        >>> g = model.generate("Once upon a time", max_new_tokens=4, logprobs=3)
        >>> lp = g.logprobs[0]
        >>> lp.token == g.token_ids[0], len(lp.top), lp.logprob <= 0, lp.top[0].logprob >= lp.logprob
        (True, 3, True, True)
        >>> lp.text == model.tokenizer.decode([lp.token]), lp.top[0].text == model.tokenizer.decode([lp.top[0].token])
        (True, True)
    """

    token: int
    logprob: float
    top: List[TopLogprob]  # best first
    text: str = ""


@dataclasses.dataclass
class StreamPiece:
    """A piece of streamed text and the tokens completed since the previous piece.

    What ``Model.stream_tokens`` yields.

    Attributes:
        text: the new text, valid UTF-8 (may be empty while a character or a possible stop string is
            held back).
        token_ids: the tokens completed since the previous piece.
        logprobs: their TokenLogprob records with ``logprobs=N``; None otherwise.

    Examples:
        >>> model = decodelab.load("stories260K")
        >>> pieces = list(model.stream_tokens("Once upon a time", max_new_tokens=6, eos_token_id=[]))
        >>> type(pieces[0]).__name__, sum(len(p.token_ids) for p in pieces), pieces[0].logprobs
        ('StreamPiece', 6, None)
    """

    text: str
    token_ids: List[int]
    logprobs: Optional[List["TokenLogprob"]] = None


@dataclasses.dataclass
class SpeculationRound:
    """One round of speculative decoding: the drafted tokens, how many the model kept, and the
    token it added itself (after a rejection, or a bonus when it kept them all).

    Attributes:
        draft: the token ids the draft proposed this round (empty when prompt lookup found none).
        accepted: how many of them the model kept, from the start (0 to ``len(draft)``).
        token: the token the model added after the kept ones.
        bonus: True when every drafted token was kept and ``token`` is the extra one; False after a
            rejection.

    Examples:
        >>> model = decodelab.load("stories260K")
        >>> g = model.generate("Once upon a time", max_new_tokens=10, draft="prompt_lookup", eos_token_id=[])
        >>> r = g.speculation.rounds[0]
        >>> type(r).__name__, 0 <= r.accepted <= len(r.draft), r.bonus == (r.accepted == len(r.draft))
        ('SpeculationRound', True, True)
    """

    draft: List[int]
    accepted: int
    token: int
    bonus: bool


@dataclasses.dataclass
class Speculation:
    """What speculative decoding did in one generation (``Generation.speculation``; None without a draft).

    Attributes:
        drafted: tokens proposed, over all rounds.
        accepted: of them, how many the model kept.
        drafted_per_position: by position in the draft (0 first): how often a token was drafted there.
        accepted_per_position: by position in the draft: how often the token there was kept.
        rounds: one SpeculationRound per pass of the model over a draft, in order.
        draft_seconds: seconds spent proposing (the draft model, or the lookup).
        verify_seconds: seconds of the model's passes over the drafts, and choosing.

    Examples:
        >>> model = decodelab.load("stories260K")
        >>> g = model.generate("Once upon a time", max_new_tokens=10, draft="prompt_lookup", eos_token_id=[])
        >>> s = g.speculation
        >>> type(s).__name__, s.accepted <= s.drafted, sum(r.accepted for r in s.rounds) == s.accepted
        ('Speculation', True, True)
        >>> s.tokens_per_round >= 1
        True
    """

    drafted: int                      # tokens proposed, over all rounds
    accepted: int                     # of them, kept by the model
    drafted_per_position: List[int]   # by position in the draft: how often drafted
    accepted_per_position: List[int]  # and how often kept
    rounds: List[SpeculationRound]
    draft_seconds: float              # proposing (the draft model, or the lookup)
    verify_seconds: float             # the model's passes over the drafts, and choosing

    @classmethod
    def from_core(cls, d: dict) -> "Speculation":
        """Build a Speculation from the engine's record of one speculative generation.

        Args:
            d: the C++ engine's dict, with keys drafted, accepted, drafted_at, accepted_at, rounds
                ((draft, accepted, token, bonus) tuples), draft_seconds and verify_seconds.

        Returns:
            The Speculation those values describe.
        """
        return cls(drafted=d["drafted"], accepted=d["accepted"], drafted_per_position=list(d["drafted_at"]),
                   accepted_per_position=list(d["accepted_at"]),
                   rounds=[SpeculationRound(list(a), b, c, e) for a, b, c, e in d["rounds"]],
                   draft_seconds=d["draft_seconds"], verify_seconds=d["verify_seconds"])

    @property
    def acceptance_rate(self) -> float:
        """accepted / drafted (NaN when nothing was drafted)."""
        return self.accepted / self.drafted if self.drafted else float("nan")

    @property
    def acceptance_per_position(self) -> List[float]:
        """For each position in the draft, the share of its drafts that were kept."""
        return [a / d if d else float("nan") for a, d in zip(self.accepted_per_position, self.drafted_per_position)]

    @property
    def tokens_per_round(self) -> float:
        """Tokens the model produced per pass over a draft (plain decoding: 1)."""
        return (self.accepted + len(self.rounds)) / len(self.rounds) if self.rounds else float("nan")


@dataclasses.dataclass
class GeneratedSequence:
    """One of several returned sequences (beams, or n samples), as listed in ``Generation.sequences``.

    A single sequence (plain decoding) is listed too, as the only entry.

    Attributes:
        token_ids: the generated token ids, without the prompt.
        text: their text.
        score: beams: sum_logprobs / length ** length_penalty; samples: the sum of the raw logprobs;
            a single sequence: that sum with ``logprobs=N``, else NaN.
        finish_reason: "stop" (an EOS id or stop string) or "length" (max_new_tokens).
        logprobs: the TokenLogprob records of samples, when generate() was asked for logprobs; else None.
        speculation: with a draft, this sequence's own Speculation; else None.

    Examples:
        >>> model = decodelab.load("stories260K")
        >>> g = model.generate("Once upon a time", max_new_tokens=6, n=3, temperature=1.0, seed=0)
        >>> len(g.sequences), type(g.sequences[0]).__name__, g.sequences[0].token_ids == g.token_ids
        (3, 'GeneratedSequence', True)
        >>> [s.score for s in g.sequences] == sorted((s.score for s in g.sequences), reverse=True)
        True
    """

    token_ids: List[int]
    text: str
    score: float          # beams: sum_logprobs / length ** length_penalty; samples: sum of raw logprobs
    finish_reason: str
    logprobs: Optional[List["TokenLogprob"]] = None  # samples, when generate() was asked for logprobs
    speculation: Optional[Speculation] = None        # with a draft: this sequence's own rounds


@dataclasses.dataclass
class Generation:
    """The result of one ``generate`` call.

    Attributes:
        text: the generated text, without the prompt (a stop string is cut unless
            ``include_stop_str_in_output``).
        token_ids: the generated ids, the stopping EOS included.
        finish_reason: "stop" (an EOS id or a stop string) or "length" (max_new_tokens).
        prompt_token_ids: the prompt's token ids.
        prefill_seconds: seconds spent running the prompt.
        decode_seconds: seconds spent on the decode steps after the first token.
        reused_prompt_tokens: prompt tokens found in the cache passed in, not prefilled again (default 0).
        seed: the seed of the random stream (reproduces a sampled run); None for greedy beam search.
        sampler: the repr of the chain that chose the tokens (for beam search, its settings).
        logprobs: one TokenLogprob per generated token with ``logprobs=N``; else None.
        trace: the Trace (one StepTrace per token) with ``trace=True`` or "full"; else None.
        first_token_seconds: seconds for the prefill and choosing the first token.
        sequences: every returned sequence (beams or n samples), best first; one entry otherwise.
        beam_tree: the BeamTree of a beam search run with ``trace=True``; else None.
        stop_reason: the EOS id or stop string that ended the text; None when it ran to max_new_tokens.
        peak_cache_bytes: beam search: bytes of K/V blocks in use at the peak; else None.
        speculation: with a draft (speculative decoding), what it did; else None.

    Examples:
        >>> model = decodelab.load("stories260K")
        >>> g = model.generate("Once upon a time", max_new_tokens=8, eos_token_id=[])
        >>> g.finish_reason, g.generated_tokens, g.prompt_tokens, g.stop_reason
        ('length', 8, 5, None)
        >>> sorted(g.timings)  # seconds and rates: they differ from run to run
        ['decode_tokens_per_second', 'generated_tokens', 'prefill_tokens_per_second', 'prompt_tokens',
         'time_per_output_token', 'time_to_first_token']
    """

    text: str                      # generated text, without the prompt
    token_ids: List[int]           # generated ids, the stopping EOS included
    finish_reason: str             # "stop" (an EOS id) or "length" (max_new_tokens)
    prompt_token_ids: List[int]
    prefill_seconds: float
    decode_seconds: float
    reused_prompt_tokens: int = 0  # prompt tokens found in the cache passed in, not prefilled again
    seed: Optional[int] = None     # the seed of the random stream (reproduces a sampled run)
    sampler: str = ""              # the chain that chose the tokens
    logprobs: Optional[List["TokenLogprob"]] = None
    trace: Optional[Trace] = None
    first_token_seconds: float = 0.0  # prefill + choosing the first token
    sequences: List["GeneratedSequence"] = dataclasses.field(default_factory=list)  # best first
    beam_tree: Optional[BeamTree] = None
    stop_reason: Union[None, int, str] = None  # the EOS id or stop string that ended the text
    peak_cache_bytes: Optional[int] = None     # beam search: K/V blocks in use at the peak
    speculation: Optional[Speculation] = None  # with a draft (speculative decoding)

    @property
    def time_to_first_token(self) -> float:
        """Seconds from the start of the call to the first token chosen (``first_token_seconds``)."""
        return self.first_token_seconds

    @property
    def time_per_output_token(self) -> float:
        """Decode seconds per token after the first (NaN with fewer than two tokens)."""
        steps = len(self.token_ids) - 1
        return self.decode_seconds / steps if steps > 0 else float("nan")

    @property
    def prompt_tokens(self) -> int:
        """Number of prompt tokens."""
        return len(self.prompt_token_ids)

    @property
    def generated_tokens(self) -> int:
        """Number of generated tokens, the stopping EOS included."""
        return len(self.token_ids)

    @property
    def decode_tokens_per_second(self) -> float:
        """Tokens after the first per decode second (NaN when no decode time was measured)."""
        steps = max(len(self.token_ids) - 1, 0)
        return steps / self.decode_seconds if self.decode_seconds > 0 else float("nan")

    @property
    def prefill_tokens_per_second(self) -> float:
        """Prompt tokens prefilled (those not reused from a cache) per prefill second (NaN without prefill time)."""
        n = self.prompt_tokens - self.reused_prompt_tokens
        return n / self.prefill_seconds if self.prefill_seconds > 0 else float("nan")

    @property
    def timings(self) -> dict:
        """prompt_tokens, generated_tokens, time_to_first_token, time_per_output_token,
        prefill_tokens_per_second and decode_tokens_per_second, as one dict."""
        return {"prompt_tokens": self.prompt_tokens, "generated_tokens": self.generated_tokens,
                "time_to_first_token": self.time_to_first_token, "time_per_output_token": self.time_per_output_token,
                "prefill_tokens_per_second": self.prefill_tokens_per_second,
                "decode_tokens_per_second": self.decode_tokens_per_second}
