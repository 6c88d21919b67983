"""What generate() returns: the Generation, its sequences and per-token logprobs."""
from __future__ import annotations

import dataclasses
from typing import List, Optional, Tuple, Union

from .beam import BeamTree
from .trace import Trace


@dataclasses.dataclass
class TokenLogprob:
    """A generated token's log-probability and the most likely alternatives at that step."""

    token: int
    logprob: float
    top: List[Tuple[int, float]]  # (token id, logprob), best first


@dataclasses.dataclass
class StreamPiece:
    """A piece of streamed text and the tokens completed since the previous piece."""

    text: str
    token_ids: List[int]
    logprobs: Optional[List["TokenLogprob"]] = None


@dataclasses.dataclass
class SpeculationRound:
    """One round of speculative decoding: the drafted tokens, how many the model kept, and the
    token it added itself (after a rejection, or a bonus when it kept them all)."""

    draft: List[int]
    accepted: int
    token: int
    bonus: bool


@dataclasses.dataclass
class Speculation:
    """What speculative decoding did in one generation (None without a draft)."""

    drafted: int                      # tokens proposed, over all rounds
    accepted: int                     # of them, kept by the model
    drafted_per_position: List[int]   # by position in the draft: how often drafted
    accepted_per_position: List[int]  # and how often kept
    rounds: List[SpeculationRound]
    draft_seconds: float              # proposing (the draft model, or the lookup)
    verify_seconds: float             # the model's passes over the drafts, and choosing

    @classmethod
    def from_core(cls, d: dict) -> "Speculation":
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
    """One of several returned sequences (beams, or n samples)."""

    token_ids: List[int]
    text: str
    score: float          # beams: sum_logprobs / length ** length_penalty; samples: sum of raw logprobs
    finish_reason: str
    logprobs: Optional[List["TokenLogprob"]] = None  # samples, when generate() was asked for logprobs
    speculation: Optional[Speculation] = None        # with a draft: this sequence's own rounds


@dataclasses.dataclass
class Generation:
    """The result of one ``generate`` call."""

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
        return self.first_token_seconds

    @property
    def time_per_output_token(self) -> float:
        steps = len(self.token_ids) - 1
        return self.decode_seconds / steps if steps > 0 else float("nan")

    @property
    def prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def generated_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def decode_tokens_per_second(self) -> float:
        steps = max(len(self.token_ids) - 1, 0)
        return steps / self.decode_seconds if self.decode_seconds > 0 else float("nan")

    @property
    def prefill_tokens_per_second(self) -> float:
        n = self.prompt_tokens - self.reused_prompt_tokens
        return n / self.prefill_seconds if self.prefill_seconds > 0 else float("nan")

    @property
    def timings(self) -> dict:
        return {"prompt_tokens": self.prompt_tokens, "generated_tokens": self.generated_tokens,
                "time_to_first_token": self.time_to_first_token, "time_per_output_token": self.time_per_output_token,
                "prefill_tokens_per_second": self.prefill_tokens_per_second,
                "decode_tokens_per_second": self.decode_tokens_per_second}
