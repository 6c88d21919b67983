"""Op profiles: where prompts and decode steps spend their time, op by op, with the bytes of
weights and cache each op reads and the multiply-adds it does, from ``Model.profile()``.

Each op gets the wall time on the calling thread from the previous op's end to its own, parallel
regions included, so a pass's ops add up to the pass. "decode" passes add one token to every
sequence (decode steps, batched or not); "prompt" passes are the rest (prompts, and a speculative
round's pass over its drafts). A decode step reads every weight once: its linear ops' bytes over
their time is the rate they stream weights at, to hold against the machine's read bandwidth
(``probe_bandwidth=True``). A prompt reuses each weight over many rows: its multiply-adds per
second say how well the kernels compute.

Examples:
    >>> model = decodelab.load("stories260K")
    >>> with model.profile() as prof:
    ...     g = model.generate("Once upon a time", max_new_tokens=8, eos_token_id=[])
    >>> prof.passes, prof.rows  # one prompt pass over 5 tokens, then 7 decode steps
    ({'prompt': 1, 'decode': 7}, {'prompt': 5, 'decode': 7})
    >>> print(prof)  # doctest: +ELLIPSIS
    prompt: 1 passes, 5 rows, ... ms per pass
      op             ms/pass  share    GB/s  GMAC/s
      embed ...
    decode: 7 passes, 7 rows, ... ms per pass
    ...
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional

from ._native import _core

__all__ = ["PHASES", "OpTime", "Profile", "Profiler"]

PHASES = ("prompt", "decode")


@dataclasses.dataclass(frozen=True)
class OpTime:
    """One op's share of one phase, summed over the profiled passes (a row of ``Profile.ops()``).

    Attributes:
        phase: "prompt" or "decode".
        op: the op's name: embed, norm, qkv_proj, rope, kv_store, attention, out_proj, mlp_in,
            activation, mlp_out, residual, head, sampling, ...
        seconds: wall time of the op over the phase's passes.
        calls: how many times it ran.
        share: its part of the phase's time (0 to 1).
        ms_per_pass: seconds / passes, in milliseconds.
        weight_bytes: bytes of weights the op read (linear ops; every pass reads them once).
        read_bytes: weight_bytes, or for attention the cache bytes it read.
        macs: multiply-adds.
        gb_per_s: read_bytes / seconds, in GB/s (0 where the op reads no weights or cache).
        gmacs_per_s: macs / seconds, in billions (0 where it does none).

    Examples:
        >>> model = decodelab.load("stories260K")
        >>> with model.profile() as prof:
        ...     g = model.generate("Once upon a time", max_new_tokens=4)
        >>> rows = prof.ops("decode")
        >>> type(rows[0]).__name__, rows[0].phase, bool(np.isclose(sum(r.share for r in rows), 1.0))
        ('OpTime', 'decode', True)
        >>> [r.op for r in rows if r.weight_bytes > 0]  # the linear ops: every decode step reads their weights
        ['qkv_proj', 'out_proj', 'mlp_in', 'mlp_out', 'head']
    """
    phase: str
    op: str
    seconds: float
    calls: int
    share: float             # of the phase's time
    ms_per_pass: float       # seconds / passes, in milliseconds
    weight_bytes: float      # bytes of weights the op read (linear ops; every pass reads them once)
    read_bytes: float        # weight_bytes, or for attention the cache bytes it read
    macs: float              # multiply-adds
    gb_per_s: float          # read_bytes / seconds, in GB/s (0 where the op reads no weights or cache)
    gmacs_per_s: float       # macs / seconds, in billions


class Profile:
    """What ``with model.profile() as p:`` collected, complete once the block ends.

    ``passes``, ``rows`` and ``seconds`` per phase; ``ops(phase)`` the rows of one phase (ops that
    never ran left out); ``bandwidth`` the read-bandwidth probe in bytes/s when asked for, and
    each row's share of it as ``bandwidth_share(row)``; ``to_pandas()`` every row as a DataFrame;
    ``plot()`` milliseconds per pass by op. Reading it inside the ``with`` block raises RuntimeError.

    Attributes:
        passes: forward passes per phase ("prompt", "decode").
        rows: token rows those passes ran, per phase.
        seconds: profiled wall time per phase.
        kv_bytes: KV-cache bytes attention read, per phase.
        bandwidth: the read-bandwidth probe in bytes/s with ``probe_bandwidth=True``; else None.

    Args:
        raw: the engine's op profiler result (``_core.OpProfiler.result()``): arrays of seconds,
            calls, weight bytes and multiply-adds by phase and op, and passes, rows and kv_bytes per phase.
        bandwidth: the measured read bandwidth in bytes/s; None (the default) when not probed.

    Examples:
        >>> model = decodelab.load("stories260K")
        >>> with model.profile() as prof:
        ...     g = model.generate("Once upon a time", max_new_tokens=4, eos_token_id=[])
        >>> isinstance(prof, decodelab.profiling.Profile), prof.passes["decode"], prof.bandwidth
        (True, 3, None)
        >>> sorted(prof.seconds), all(v > 0 for v in prof.seconds.values())
        (['decode', 'prompt'], True)
        >>> prof.to_pandas().shape[1]  # needs pandas; one column per OpTime field
        11
    """

    def __init__(self, raw: dict, bandwidth: Optional[float] = None):
        self._raw = raw
        self.bandwidth = bandwidth
        self.passes: Dict[str, int] = dict(zip(PHASES, raw["passes"]))
        self.rows: Dict[str, int] = dict(zip(PHASES, raw["rows"]))
        self.seconds: Dict[str, float] = {ph: float(raw["seconds"][i].sum()) for i, ph in enumerate(PHASES)}
        self.kv_bytes: Dict[str, float] = dict(zip(PHASES, raw["kv_bytes"]))

    def ops(self, phase: str = "decode") -> List[OpTime]:
        """The ops of one phase, in the order a pass runs them; ops that never ran are left out.

        Args:
            phase: "decode" (the default) or "prompt".

        Returns:
            One OpTime per op that ran in the phase (an empty list when the phase had no passes).

        Raises:
            ValueError: ``phase`` is not "prompt" or "decode".
        """
        if phase not in PHASES:
            raise ValueError(f"phase must be one of {', '.join(PHASES)}, got {phase!r}")
        i = PHASES.index(phase)
        r = self._raw
        total, passes = self.seconds[phase], max(self.passes[phase], 1)
        out = []
        for j, name in enumerate(r["ops"]):
            s, n = float(r["seconds"][i, j]), int(r["calls"][i, j])
            if n == 0:
                continue
            wb = float(r["weight_bytes"][i, j])
            rb = self.kv_bytes[phase] if name == "attention" else wb
            macs = float(r["macs"][i, j])
            out.append(OpTime(phase, name, s, n, s / total if total > 0 else 0.0, 1e3 * s / passes, wb, rb, macs,
                              rb / s / 1e9 if s > 0 and rb else 0.0, macs / s / 1e9 if s > 0 and macs else 0.0))
        return out

    def bandwidth_share(self, row: OpTime) -> float:
        """The op's read rate over the probe (nan without ``probe_bandwidth=True``).

        Args:
            row: an OpTime from ``ops()``.

        Returns:
            ``row.gb_per_s`` as a fraction of the measured read bandwidth (1.0: at the probe's rate);
            NaN when no bandwidth was probed.
        """
        if not self.bandwidth:
            return float("nan")
        return row.gb_per_s * 1e9 / self.bandwidth

    def to_pandas(self):
        """Every op of both phases, one row each. Needs pandas.

        Returns:
            A pandas DataFrame with the OpTime fields as columns, prompt rows first, and a
            ``bandwidth_share`` column when the bandwidth was probed.

        Raises:
            ImportError: pandas is not installed.
        """
        try:
            import pandas as pd
        except ImportError:
            raise ImportError("Profile.to_pandas needs pandas: pip install pandas") from None
        rows = []
        for ph in PHASES:
            for r in self.ops(ph):
                d = dataclasses.asdict(r)
                if self.bandwidth:
                    d["bandwidth_share"] = self.bandwidth_share(r)
                rows.append(d)
        return pd.DataFrame(rows)

    def plot(self, phase: str = "decode", *, title: Optional[str] = None):
        """Milliseconds per pass by op, as horizontal bars, each labelled with its share (and, for
        decode, its GB/s). Needs matplotlib.

        Args:
            phase: "decode" (the default) or "prompt".
            title: the figure's title; None (the default) names the phase, its passes and the
                milliseconds per pass.

        Returns:
            The matplotlib Figure.

        Raises:
            ValueError: ``phase`` is not "prompt" or "decode".
            ImportError: matplotlib is not installed.
        """
        import matplotlib.pyplot as plt

        rows = self.ops(phase)
        fig, ax = plt.subplots(figsize=(7, 0.35 * len(rows) + 1.2))
        y = range(len(rows))
        ax.barh(list(y), [r.ms_per_pass for r in rows], color="tab:blue")
        ax.set_yticks(list(y), [r.op for r in rows])
        ax.invert_yaxis()
        for k, r in enumerate(rows):
            label = f" {r.share:.0%}" + (f", {r.gb_per_s:.0f} GB/s" if r.gb_per_s and phase == "decode" else "")
            ax.text(r.ms_per_pass, k, label, va="center", fontsize=8)
        ax.set_xlabel(f"ms per {'step' if phase == 'decode' else 'prompt pass'}")
        per = 1e3 * self.seconds[phase] / max(self.passes[phase], 1)
        ax.set_title(title or f"{phase}: {self.passes[phase]} passes, {per:.2f} ms each")
        fig.tight_layout()
        return fig

    def __repr__(self) -> str:
        lines = []
        for ph in PHASES:
            if not self.passes[ph]:
                continue
            per = 1e3 * self.seconds[ph] / self.passes[ph]
            lines.append(f"{ph}: {self.passes[ph]} passes, {self.rows[ph]} rows, {per:.3f} ms per pass")
            bw = f"  {'of probe':>8s}" if self.bandwidth else ""
            lines.append(f"  {'op':12s} {'ms/pass':>9s} {'share':>6s} {'GB/s':>7s} {'GMAC/s':>7s}{bw}")
            for r in self.ops(ph):
                share = f"  {self.bandwidth_share(r):8.0%}" if self.bandwidth and r.gb_per_s else (
                    f"  {'':8s}" if self.bandwidth else "")
                lines.append(f"  {r.op:12s} {r.ms_per_pass:9.3f} {r.share:6.1%} "
                             f"{r.gb_per_s:7.1f} {r.gmacs_per_s:7.1f}{share}")
        if self.bandwidth:
            lines.append(f"read-bandwidth probe: {self.bandwidth / 1e9:.1f} GB/s")
        return "\n".join(lines) if lines else "Profile: no passes"


class Profiler:
    """The context manager behind ``Model.profile()``: starts the engine's op profiler on entry,
    stops it on exit and fills the Profile the block got.

    Args:
        threads: threads the bandwidth probe reads on (the model's ``threads``), 1 or more.
        probe_bandwidth: True also measures the machine's read bandwidth (256 MiB) on exit;
            False skips the probe.

    Examples:
        >>> model = decodelab.load("stories260K")
        >>> profiler = model.profile()
        >>> type(profiler).__name__
        'Profiler'
        >>> with profiler as prof:
        ...     repr(prof)
        'Profile (running)'
        >>> prof.passes
        {'prompt': 0, 'decode': 0}
    """

    def __init__(self, threads: int, probe_bandwidth: bool):
        self._p = _core.OpProfiler()
        self._threads = threads
        self._probe = probe_bandwidth

    def __enter__(self) -> "_Live":
        self._live = _Live()
        self._p.start()
        return self._live

    def __exit__(self, *exc) -> None:
        self._p.stop()
        bw = _core.read_bandwidth(256 << 20, self._threads) if self._probe else None
        self._live._fill(self._p.result(), bw)


class _Live(Profile):
    """The object a ``with`` block gets: empty until the block ends, then the block's Profile."""

    def __init__(self):  # filled by _fill
        self._done = False

    def _fill(self, raw: dict, bandwidth: Optional[float]) -> None:
        super().__init__(raw, bandwidth)
        self._done = True

    def __getattr__(self, name):  # only for names not set: before _fill, every Profile attribute
        if self.__dict__.get("_done"):
            raise AttributeError(f"'Profile' object has no attribute {name!r}")
        raise RuntimeError(f"the profile is read after its with block ends ({name!r} asked for inside it)")

    def __repr__(self) -> str:
        return super().__repr__() if self.__dict__.get("_done") else "Profile (running)"
