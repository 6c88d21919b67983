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
class GeneratedSequence:
    """One of several returned sequences (beams, or n samples)."""

    token_ids: List[int]
    text: str
    score: float          # beams: sum_logprobs / length ** length_penalty; samples: sum of raw logprobs
    finish_reason: str
    logprobs: Optional[List["TokenLogprob"]] = None  # samples, when generate() was asked for logprobs


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
