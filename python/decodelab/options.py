"""Generation options: every keyword of generate() and stream() checked in one place, before any
C++ runs, with errors that name the parameter, the value and the limit.

``resolve`` turns the keywords into ``RunOptions``; the checks it is built from (``integer``,
``real``, ``token_ids``, ``checked_seed``, ``check_budget``) are used across the package for the same
messages everywhere.

Examples:
    >>> from decodelab import options
    >>> options.integer("max_new_tokens", 16, 0)
    16
    >>> options.token_ids("prompt", [1, 403, 600], 512)
    Traceback (most recent call last):
    ...
    ValueError: token id 600 at index 2 is outside the vocabulary [0, 512) (prompt)
"""
from __future__ import annotations

import dataclasses
import difflib
import functools
import inspect
import math
import numbers
import os
from typing import List, Optional, Sequence

import numpy as np

from ._native import _core

__all__ = ["RunOptions", "resolve", "integer", "real", "checked_seed", "token_ids", "eos_ids", "memory_budget",
           "check_budget", "check_keywords", "suggest_keywords", "INT32_MAX"]

INT32_MAX = 2**31 - 1
_FLOAT32_MAX = float(np.finfo(np.float32).max)  # larger magnitudes round to inf in float32


def suggest_keywords(fn):
    """Wraps a function that takes keywords so that an unknown one raises a TypeError naming the
    closest known keyword ("did you mean top_p?"), or listing them when none is close.

    Args:
        fn: the function; its signature says which keywords it takes.

    Returns:
        The wrapped function (same signature and docstring).

    Examples:
        >>> @suggest_keywords
        ... def f(*, top_p=1.0, top_k=0):
        ...     return top_p
        >>> f(top_pp=0.9)
        Traceback (most recent call last):
        ...
        TypeError: f() got an unexpected keyword argument 'top_pp'; did you mean top_p?
    """
    sig = inspect.signature(fn)
    names = [n for n, p in sig.parameters.items()
             if n != "self" and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        check_keywords(fn.__name__, kwargs, names)
        return fn(*args, **kwargs)

    wrapper.keywords = names
    return wrapper


def check_keywords(what: str, kwargs, names) -> None:
    """Raise TypeError for the first keyword in kwargs that names does not hold, with the closest name.

    Args:
        what: the function's name, for the message.
        kwargs: the keywords given.
        names: the keywords the function takes.

    Raises:
        TypeError: "what() got an unexpected keyword argument 'k'; did you mean ...?" (or the list
            of names when none is close).

    Examples:
        >>> check_keywords("stream", {"top_pp": 0.9}, ["top_p", "top_k"])
        Traceback (most recent call last):
        ...
        TypeError: stream() got an unexpected keyword argument 'top_pp'; did you mean top_p?
    """
    for k in kwargs:
        if k not in names:
            close = difflib.get_close_matches(k, names, n=1)
            hint = f"did you mean {close[0]}?" if close else f"it takes {', '.join(names)}"
            raise TypeError(f"{what}() got an unexpected keyword argument {k!r}; {hint}")


def memory_budget() -> int:
    """Bytes a single call may plan to allocate: ``DECODELAB_MEMORY_BUDGET`` if set, else half of
    the machine's physical memory.

    Where the physical memory cannot be read, 8 GiB.

    Returns:
        The budget in bytes (>= 1).

    Raises:
        ValueError: if ``DECODELAB_MEMORY_BUDGET`` is set but not an integer number of bytes >= 1.

    Examples:
        >>> import os
        >>> from unittest import mock
        >>> from decodelab.options import memory_budget
        >>> with mock.patch.dict(os.environ, {"DECODELAB_MEMORY_BUDGET": str(2**30)}):
        ...     memory_budget()
        1073741824
    """
    env = os.environ.get("DECODELAB_MEMORY_BUDGET")
    if env is not None:
        try:
            v = int(env)
        except ValueError:
            raise ValueError(f"DECODELAB_MEMORY_BUDGET must be a number of bytes, got {env!r}") from None
        if v < 1:
            raise ValueError(f"DECODELAB_MEMORY_BUDGET must be >= 1, got {v}")
        return v
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
    except (ValueError, OSError, AttributeError):
        return 8 << 30


def _gib(n: float) -> str:
    return f"{n / 2**30:.3g} GiB"


def check_budget(what: str, nbytes: float) -> None:
    """Refuse a plan that would need more memory than ``memory_budget()``.

    Args:
        what: the plan, for the message (e.g. "num_beams=64 over a vocabulary of 32000").
        nbytes: the bytes it would allocate, >= 0.

    Raises:
        ValueError: if nbytes exceeds the budget; the message names the plan, its size and the budget in GiB.

    Examples:
        >>> import os
        >>> from unittest import mock
        >>> from decodelab.options import check_budget
        >>> with mock.patch.dict(os.environ, {"DECODELAB_MEMORY_BUDGET": str(2**20)}):
        ...     check_budget("a small plan", 1000)
        ...     check_budget("a large plan", 2**30)
        Traceback (most recent call last):
        ...
        ValueError: a large plan would need about 1 GiB, more than the memory budget of 0.000977 GiB ...
    """
    budget = memory_budget()
    if nbytes > budget:
        raise ValueError(f"{what} would need about {_gib(nbytes)}, more than the memory budget of {_gib(budget)} "
                         "(half the machine's memory; set DECODELAB_MEMORY_BUDGET in bytes to change it)")


def integer(name: str, v, lo: Optional[int] = None, hi: Optional[int] = INT32_MAX) -> int:
    """An int (or numpy integer, not bool) in [lo, hi].

    Args:
        name: the parameter's name, for the message.
        v: the value to check.
        lo: the least value allowed; default None, no lower limit.
        hi: the greatest value allowed; default ``INT32_MAX`` (2**31 - 1), what the engine's int fields
            hold; None: no upper limit.

    Returns:
        The value as a Python int.

    Raises:
        ValueError: if v is not an integer (bools and floats are refused) or is outside [lo, hi]; the message
            names the parameter, the value and the limit.

    Examples:
        >>> from decodelab.options import integer
        >>> integer("top_k", np.int64(40), 0)
        40
        >>> integer("num_beams", 0, 1)
        Traceback (most recent call last):
        ...
        ValueError: num_beams must be an integer >= 1, got 0
        >>> integer("logprobs", 600, 0, 512)
        Traceback (most recent call last):
        ...
        ValueError: logprobs must be in [0, 512], got 600
    """
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise ValueError(f"{name} must be an integer, got {v!r}")
    v = int(v)
    if lo is not None and hi is not None and hi < INT32_MAX and not lo <= v <= hi:
        raise ValueError(f"{name} must be in [{lo}, {hi}], got {v}")
    return _bounded(name, v, lo, hi, "an integer ")


def real(name: str, v, lo: Optional[float] = None, hi: Optional[float] = None) -> float:
    """A real number (not bool) that stays finite as float32, in [lo, hi].

    Args:
        name: the parameter's name, for the message.
        v: the value to check (int, float or numpy number).
        lo: the least value allowed; default None, no lower limit.
        hi: the greatest value allowed; default None, no upper limit.

    Returns:
        The value as a Python float.

    Raises:
        ValueError: if v is not a real number (bools are refused), is NaN or infinite or beyond float32's
            range (|x| > 3.4e38), or is outside [lo, hi]; the message names the parameter, the value and
            the limit.

    Examples:
        >>> from decodelab.options import real
        >>> real("temperature", 1, 0)
        1.0
        >>> real("top_p", 1.5, 0, 1)
        Traceback (most recent call last):
        ...
        ValueError: top_p must be <= 1, got 1.5
    """
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise ValueError(f"{name} must be a number, got {v!r}")
    v = float(v)
    if not math.isfinite(v) or abs(v) > _FLOAT32_MAX:
        raise ValueError(f"{name} must be finite in float32 (|x| < 3.4e38), got {v!r}")
    return _bounded(name, v, lo, hi, "")


def _bounded(name: str, v, lo, hi, kind: str):
    if lo is not None and v < lo:
        raise ValueError(f"{name} must be {kind}>= {lo}, got {v!r}")
    if hi is not None and v > hi:
        raise ValueError(f"{name} must be {kind}<= {hi}, got {v!r}")
    return v


def checked_seed(v) -> int:
    """A random seed: an integer in [0, 2**64).

    Args:
        v: the seed.

    Returns:
        The seed as a Python int.

    Raises:
        ValueError: if v is not an integer or is outside [0, 2**64).

    Examples:
        >>> from decodelab.options import checked_seed
        >>> checked_seed(2**64 - 1)
        18446744073709551615
        >>> checked_seed(-1)
        Traceback (most recent call last):
        ...
        ValueError: seed must be an integer >= 0, got -1
    """
    return integer("seed", v, 0, 2**64 - 1)


def token_ids(name: str, ids, vocab_size: int) -> List[int]:
    """A sequence of token ids in [0, vocab_size): ints only, never text, bytes or floats.

    Args:
        name: the parameter's name, for the message.
        ids: the token ids: a list, tuple or other iterable of ints (numpy integers too), or a 1-D numpy
            integer array.
        vocab_size: the vocabulary size; every id must be in [0, vocab_size).

    Returns:
        The ids as a list of Python ints.

    Raises:
        ValueError: if ids is text, bytes, None or not iterable, a numpy array that is not 1-D of integers, or
            holds an entry that is not an integer (bools are refused) or is outside [0, vocab_size); the
            message names the parameter, the index and the value.

    Examples:
        >>> from decodelab.options import token_ids
        >>> token_ids("prompt", np.array([1, 403]), 512)
        [1, 403]
        >>> token_ids("prompt", "Once upon", 512)
        Traceback (most recent call last):
        ...
        ValueError: prompt must be a list of token ids (int), got str 'Once upon'
    """
    if isinstance(ids, (str, bytes, bytearray, memoryview)) or ids is None:
        raise ValueError(f"{name} must be a list of token ids (int), got {type(ids).__name__} {ids!r:.80}")
    if isinstance(ids, np.ndarray):
        if ids.ndim != 1 or not (np.issubdtype(ids.dtype, np.integer)):
            raise ValueError(f"{name} must be a 1-D array of integers, got {ids.ndim}-D {ids.dtype}")
        ids = ids.tolist()
    try:
        seq = list(ids)
    except TypeError:
        raise ValueError(f"{name} must be a list of token ids (int), got {type(ids).__name__} {ids!r:.80}") from None
    out = []
    for i, t in enumerate(seq):
        if isinstance(t, bool) or not isinstance(t, numbers.Integral):
            raise ValueError(f"{name}[{i}] must be a token id (int), got {t!r}")
        t = int(t)
        if not 0 <= t < vocab_size:
            raise ValueError(f"token id {t} at index {i} is outside the vocabulary [0, {vocab_size}) ({name})")
        out.append(t)
    return out


def eos_ids(v, vocab_size: int) -> List[int]:
    """eos_token_id: one id or a list of ids, each in the vocabulary.

    Args:
        v: one token id or a sequence of them.
        vocab_size: the vocabulary size; every id must be in [0, vocab_size).

    Returns:
        The ids as a list of Python ints.

    Raises:
        ValueError: if an id is not an integer or is outside [0, vocab_size) (as ``token_ids``).

    Examples:
        >>> from decodelab.options import eos_ids
        >>> eos_ids(2, 512), eos_ids([2, 7], 512)
        ([2], [2, 7])
    """
    if isinstance(v, numbers.Integral) and not isinstance(v, bool):
        return token_ids("eos_token_id", [v], vocab_size)
    return token_ids("eos_token_id", v, vocab_size)


# Bytes beam search holds per beam and vocabulary entry: a candidate (16 bytes) and two rows of
# logits (8 bytes).
_BEAM_BYTES_PER_TOKEN = 24
# Bytes one of n samples keeps per generated token (ids, text, logprobs) and per sample.
_SAMPLE_BYTES_PER_TOKEN, _SAMPLE_BYTES = 256, 4096


def resolve(run: dict, sampling: dict, *, vocab_size: int, block_bytes: int, default_eos, make_chain,
            encode=None) -> dict:
    """Checks generate()'s run options and returns them in the engine's terms.

    Defaults where a key is missing: max_new_tokens 128, n and num_beams 1, logprobs None,
    logprobs_mode "raw", trace False, length_penalty 1.0, early_stopping False, no stop strings, a
    random seed, the model's EOS ids, guidance_scale 1 (off), no draft.

    Args:
        run: the run keywords of generate() (max_new_tokens, n, num_beams, num_return_sequences, logprobs,
            logprobs_mode, trace, early_stopping, length_penalty, stop, include_stop_str_in_output, seed,
            eos_token_id, sampler, order, preset, guidance_scale, negative_prompt, draft, num_draft_tokens,
            draft_p_min);
            missing keys take their defaults.
        sampling: the sampling keywords (temperature, top_k, ...), passed to ``make_chain`` unchecked.
        vocab_size: the model's vocabulary size: the range of token ids and of logprobs.
        block_bytes: the bytes of one KV-cache block, for the memory estimate of beams and samples (>= 0).
        default_eos: the EOS ids to use where run gives no eos_token_id.
        make_chain: ``make_chain(sampler, order, preset, seed, eos, sampling, min_tokens_to_keep)`` builds the
            sampler chain from the sampling keywords; called once per entry of a list of samplers.
        encode: ``encode(prompt)`` turns a negative prompt into token ids; default None (then a
            negative_prompt cannot be given).

    Returns:
        The ``RunOptions``.

    Raises:
        ValueError: if an option is of the wrong type or outside its range (the message names it, its value and
            the limit), options conflict (num_beams with n, logprobs or a draft; negative_prompt without
            guidance_scale; ...), or a plan exceeds ``memory_budget()``; ``make_chain`` raises its own.

    Examples:
        >>> from decodelab.options import resolve
        >>> def make_chain(sampler, order, preset, seed, eos, sampling, min_tokens_to_keep):
        ...     return decodelab.samplers.build_chain(seed=seed, eos_token_ids=eos, greedy_default=True, **sampling)
        >>> opts = resolve({"max_new_tokens": 8, "seed": 0, "stop": "The end"}, {"temperature": 0.7, "top_k": 40},
        ...                vocab_size=512, block_bytes=0, default_eos=[2], make_chain=make_chain)
        >>> opts.max_new_tokens, opts.eos, opts.stops, opts.chains
        (8, [2], ['The end'], [Chain([Temperature(0.7), TopK(40), Dist(seed=0)])])
        >>> resolve({"num_beams": 2, "n": 2}, {}, vocab_size=512, block_bytes=0, default_eos=[2], make_chain=make_chain)
        Traceback (most recent call last):
        ...
        ValueError: use num_beams or n, not both
    """
    max_new_tokens = integer("max_new_tokens", run.get("max_new_tokens", 128), 0)
    logprobs, mode, trace = run.get("logprobs"), run.get("logprobs_mode", "raw"), run.get("trace", False)
    if mode not in ("raw", "processed"):
        raise ValueError(f"logprobs_mode must be 'raw' or 'processed', got {mode!r}")
    if logprobs is not None:
        logprobs = integer("logprobs", logprobs, 0, vocab_size)
    if not (trace is False or trace is True or trace == "full"):
        raise ValueError(f"trace must be False, True or 'full', got {trace!r}")
    n = integer("n", run.get("n", 1), 1)
    num_beams = integer("num_beams", run.get("num_beams", 1), 1)
    nrs = run.get("num_return_sequences")
    if nrs is not None:
        nrs = integer("num_return_sequences", nrs, 1, num_beams)
    if num_beams > 1 and n > 1:
        raise ValueError("use num_beams or n, not both")
    if num_beams > 1 and logprobs is not None:
        raise ValueError("logprobs are not recorded in beam search; scores are in Generation.sequences")
    if num_beams > 1:
        check_budget(f"num_beams={num_beams} over a vocabulary of {vocab_size}",
                     num_beams * (vocab_size * _BEAM_BYTES_PER_TOKEN + block_bytes))
    if n > 1:
        check_budget(f"n={n} samples of up to {max_new_tokens} tokens",
                     n * (_SAMPLE_BYTES + max_new_tokens * _SAMPLE_BYTES_PER_TOKEN + block_bytes))
    es = run.get("early_stopping", False)
    if not (es is True or es is False or es == "never"):
        raise ValueError(f"early_stopping must be True, False or 'never', got {es!r}")
    # Beyond +-100 the length normalisation len ** penalty overflows for any context length.
    lp = real("length_penalty", run.get("length_penalty", 1.0), -100.0, 100.0)
    stop = run.get("stop")
    stops = [stop] if isinstance(stop, str) else stop
    if stops is None:
        stops = []
    elif isinstance(stops, (bytes, bytearray)) or not isinstance(stops, Sequence):
        raise ValueError(f"stop must be a str or a list of str, got {stop!r}")
    for st in stops:
        if not isinstance(st, str) or not st:
            raise ValueError(f"stop strings must be non-empty str, got {st!r}")
    seed = run.get("seed")
    seed = int.from_bytes(os.urandom(8), "little") >> 1 if seed is None else checked_seed(seed)
    eos_in = run.get("eos_token_id")
    eos = list(default_eos) if eos_in is None else eos_ids(eos_in, vocab_size)
    include_stop = run.get("include_stop_str_in_output", False)
    if not isinstance(include_stop, bool):
        raise ValueError(f"include_stop_str_in_output must be True or False, got {include_stop!r}")
    sampler = run.get("sampler")
    samplers_in = sampler if isinstance(sampler, (list, tuple)) else [sampler]
    # Sampling inside beams keeps one token more than there are EOS ids, so a beam can go on (transformers).
    keep = len(eos) + 1 if num_beams > 1 else 1
    chains = [make_chain(sm, run.get("order"), run.get("preset"), seed, eos, sampling, keep) for sm in samplers_in]
    # Classifier-free guidance: one sequence beside its unconditional twin (transformers' guidance_scale).
    gs = run.get("guidance_scale")
    gs = 1.0 if gs is None else real("guidance_scale", gs, -1e4, 1e4)
    neg = run.get("negative_prompt")
    if neg is not None and gs == 1.0:
        raise ValueError("negative_prompt needs guidance_scale != 1 (1 turns guidance off)")
    if gs != 1.0 and (num_beams > 1 or n > 1):
        raise ValueError("guidance_scale guides one sequence: num_beams and n must be 1")
    negative = [] if neg is None else list(encode(neg))
    # Speculative decoding: a draft model (a Model; Model._options checks its vocabulary) or prompt lookup.
    draft, k, p_min = run.get("draft"), run.get("num_draft_tokens"), run.get("draft_p_min")
    if p_min is not None:
        if draft is None or isinstance(draft, str):
            raise ValueError("draft_p_min needs a draft model (prompt lookup has no probabilities), "
                             f"got draft={draft!r}")
        p_min = real("draft_p_min", p_min, 0.0, 1.0)
    if draft is None:
        if k is not None:
            raise ValueError("num_draft_tokens needs a draft (a decodelab Model or 'prompt_lookup')")
        k = 5
    else:
        if isinstance(draft, str) and draft != "prompt_lookup" or not isinstance(draft, str) and not hasattr(
                draft, "_engine"):
            raise ValueError(f"draft must be a decodelab Model or 'prompt_lookup', got {draft!r:.80}")
        k = integer("num_draft_tokens", (10 if isinstance(draft, str) else 5) if k is None else k, 1, 64)
        if num_beams > 1:
            raise ValueError("beam search does not take a draft: use num_beams=1 with draft=")
        if trace:
            raise ValueError("trace is not recorded with a draft; Generation.speculation records each round")
        if gs != 1.0:
            raise ValueError("guidance_scale does not take a draft")
    if trace == "full":  # every stage's logits at every step
        stages = max(len(c.stages) for c in chains) + 1
        check_budget(f"trace='full' over {max_new_tokens} steps x {stages} stages x {vocab_size} logits",
                     max(n, num_beams) * max_new_tokens * stages * vocab_size * 4)
    return RunOptions(max_new_tokens=max_new_tokens, eos=eos, chains=chains, seed=seed,
                      logprobs=-1 if logprobs is None else logprobs, processed=mode == "processed",
                      trace={False: 0, True: 1, "full": 2}[trace], stops=list(stops), include_stop=include_stop, n=n,
                      num_beams=num_beams, length_penalty=lp, early_stopping={True: 1, False: 0, "never": -1}[es],
                      num_return_sequences=nrs or 1, guidance_scale=gs, negative_prompt=negative, draft=draft,
                      num_draft_tokens=k, draft_p_min=p_min or 0.0)


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """generate()'s and stream()'s keywords, checked, in the engine's terms.

    What the decode paths of Model take whole, and build the C++ options of each call shape from;
    made by ``resolve``.

    Attributes:
        max_new_tokens: the most tokens to generate, >= 0.
        eos: the EOS token ids that end a sequence.
        chains: one ``samplers.Chain`` per prompt (or one for all).
        seed: the random seed, in [0, 2**64).
        logprobs: -1: no log-probabilities; N >= 0: each token's log-probability and the top N.
        processed: logprobs under the processed distribution (after the samplers), not the raw one.
        trace: 0 off, 1 per-stage summaries, 2 also the full logits.
        stops: the stop strings (non-empty).
        include_stop: keep the stop string at the end of the text.
        n: the number of independent samples, >= 1.
        num_beams: the number of beams, >= 1 (1: no beam search).
        length_penalty: beam search's exponent on length, in [-100, 100].
        early_stopping: beam search's stopping rule: 1 True, 0 False, -1 "never".
        num_return_sequences: the beams to return, in [1, num_beams].
        guidance_scale: classifier-free guidance's scale; default 1.0: off.
        negative_prompt: the unconditional sequence's token ids for guidance; default []: the prompt's last token.
        draft: speculative decoding: a Model, "prompt_lookup", or None (default): none.
        num_draft_tokens: tokens the draft proposes per round, in [1, 64]; default 5.
        draft_p_min: a draft model's round ends where its most likely next token has less than this
            probability; in [0, 1]; default 0.0: off.

    Examples:
        >>> from decodelab.options import RunOptions
        >>> opts = RunOptions(max_new_tokens=8, eos=[2], chains=[], seed=0, logprobs=-1, processed=False, trace=0,
        ...                   stops=[], include_stop=False, n=1, num_beams=1, length_penalty=1.0, early_stopping=0,
        ...                   num_return_sequences=1)
        >>> opts.guidance_scale, opts.draft, opts.num_draft_tokens
        (1.0, None, 5)
    """
    max_new_tokens: int
    eos: List[int]
    chains: list             # one samplers.Chain per prompt (or one for all)
    seed: int
    logprobs: int            # -1: none
    processed: bool          # logprobs under the processed distribution, not the raw one
    trace: int               # 0 off, 1 per-stage summaries, 2 also the full logits
    stops: List[str]
    include_stop: bool
    n: int
    num_beams: int
    length_penalty: float
    early_stopping: int      # 1 True, 0 False, -1 "never"
    num_return_sequences: int
    guidance_scale: float = 1.0   # classifier-free guidance; 1: off
    negative_prompt: List[int] = dataclasses.field(default_factory=list)  # [] : the prompt's last token
    draft: object = None          # speculative decoding: a Model, "prompt_lookup", or None
    num_draft_tokens: int = 5
    draft_p_min: float = 0.0

    def decode_options(self, *, sequence: int = 0, logprobs: Optional[int] = None) -> "_core.DecodeOptions":
        """The options of one sequence's decode loop (generate, a stream, one of n samples).

        Args:
            sequence: the sequence's index among n samples, >= 0 (what seeds its random stream apart from the
                others'); default 0.
            logprobs: -1: no log-probabilities; N >= 0: each token's log-probability and the top N; default
                None: this RunOptions' logprobs.

        Returns:
            A ``_core.DecodeOptions``.

        Examples:
            >>> from decodelab.options import RunOptions
            >>> opts = RunOptions(max_new_tokens=8, eos=[2], chains=[], seed=0, logprobs=-1, processed=False,
            ...                   trace=0, stops=[], include_stop=False, n=1, num_beams=1, length_penalty=1.0,
            ...                   early_stopping=0, num_return_sequences=1)
            >>> d = opts.decode_options(sequence=1, logprobs=5)
            >>> d.max_new_tokens, d.eos_ids, d.sequence, d.logprobs
            (8, [2], 1, 5)
        """
        o = _core.DecodeOptions()
        o.max_new_tokens = self.max_new_tokens
        o.eos_ids = self.eos
        o.sequence = sequence
        o.logprobs = self.logprobs if logprobs is None else logprobs
        o.logprobs_processed = self.processed
        o.trace = self.trace  # trace_top keeps DecodeOptions' default (decoder.h)
        o.guidance_scale = self.guidance_scale
        o.negative_prompt = self.negative_prompt
        o.num_draft_tokens = self.num_draft_tokens
        o.draft_p_min = self.draft_p_min
        return o

    def beam_options(self, *, do_sample: bool) -> "_core.BeamOptions":
        """The options of beam search.

        Args:
            do_sample: the beams draw their continuations through the sampler chain (True) or take the
                most likely ones (False).

        Returns:
            A ``_core.BeamOptions``.
        """
        o = _core.BeamOptions()
        o.num_beams = self.num_beams
        o.max_new_tokens = self.max_new_tokens
        o.length_penalty = self.length_penalty
        o.early_stopping = self.early_stopping
        o.num_return_sequences = self.num_return_sequences
        o.eos_ids = self.eos
        o.do_sample = do_sample
        o.seed = self.seed
        o.trace = bool(self.trace)
        return o
