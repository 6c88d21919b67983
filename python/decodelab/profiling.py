"""Op profiles: where prompts and decode steps spend their time, op by op, with the bytes of
weights and cache each op reads and the multiply-adds it does, from ``Model.profile()``.

    >>> with model.profile() as prof:                                   # doctest: +SKIP
    ...     model.generate("Once upon a time", max_new_tokens=64)
    >>> print(prof)                                                     # doctest: +SKIP

Each op gets the wall time on the calling thread from the previous op's end to its own, parallel
regions included, so a pass's ops add up to the pass. "decode" passes add one token to every
sequence (decode steps, batched or not); "prompt" passes are the rest (prompts, and a speculative
round's pass over its drafts). A decode step reads every weight once: its linear ops' bytes over
their time is the rate they stream weights at, to hold against the machine's read bandwidth
(``probe_bandwidth=True``). A prompt reuses each weight over many rows: its multiply-adds per
second say how well the kernels compute.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional

from ._native import _core

PHASES = ("prompt", "decode")


@dataclasses.dataclass(frozen=True)
class OpTime:
    """One op's share of one phase, summed over the profiled passes."""
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
    ``plot()`` milliseconds per pass by op."""

    def __init__(self, raw: dict, bandwidth: Optional[float] = None):
        self._raw = raw
        self.bandwidth = bandwidth
        self.passes: Dict[str, int] = dict(zip(PHASES, raw["passes"]))
        self.rows: Dict[str, int] = dict(zip(PHASES, raw["rows"]))
        self.seconds: Dict[str, float] = {ph: float(raw["seconds"][i].sum()) for i, ph in enumerate(PHASES)}
        self.kv_bytes: Dict[str, float] = dict(zip(PHASES, raw["kv_bytes"]))

    def ops(self, phase: str = "decode") -> List[OpTime]:
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
        """The op's read rate over the probe (nan without ``probe_bandwidth=True``)."""
        if not self.bandwidth:
            return float("nan")
        return row.gb_per_s * 1e9 / self.bandwidth

    def to_pandas(self):
        """Every op of both phases, one row each. Needs pandas."""
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
        """Milliseconds per pass by op, as horizontal bars, each labelled with its share. Needs
        matplotlib."""
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
    stops it on exit and fills the Profile the block got."""

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
