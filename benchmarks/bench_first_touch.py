"""How fast this machine hands a process fresh memory: the first write to each page of a new
anonymous mapping, in 2 MiB huge pages (MADV_HUGEPAGE, as the engine's packed weights) and in
4 KiB pages, each right after the same amount was freed by this process and not.

    python benchmarks/bench_first_touch.py [--gib 2] [--rounds 2] [--json bench_first_touch.json]

Packing a model's layers at load writes every byte of a new block of huge pages, so load time is
bounded below by this rate. On a virtual machine that returns freed guest memory to its host
(free page reporting works in 2 MiB and larger pieces), a huge page taken from such memory is
backed by the host again at its first write, and the rate depends on what ran before: a "cold"
row maps memory after --settle seconds without any (long enough for freed memory to have gone
back to the host), an "again" row right after the row before freed the same amount.
"""
import argparse
import json
import mmap
import time

import numpy as np


def first_touch(nbytes, huge):
    """Seconds to write one byte per 4 KiB page of a new anonymous mapping of nbytes."""
    m = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if huge:
        m.madvise(mmap.MADV_HUGEPAGE)
    a = np.frombuffer(m, np.uint8)
    t = time.perf_counter()
    a[::4096] = 1
    seconds = time.perf_counter() - t
    del a
    m.close()
    return seconds


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gib", type=float, default=2.0, help="size of each mapping")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--settle", type=float, default=5.0, help="seconds of rest before each cold row")
    ap.add_argument("--json")
    a = ap.parse_args()
    n = int(a.gib * (1 << 30)) // (2 << 20) * (2 << 20)
    rows = []
    for r in range(a.rounds):
        for pages in ("huge", "4k"):
            for state in ("cold", "again"):
                if state == "cold":
                    time.sleep(a.settle)
                s = first_touch(n, pages == "huge")
                rows.append({"round": r + 1, "pages": pages, "state": state, "seconds": s, "gb_s": n / s / 1e9})
                print(f"round {r + 1} {pages:>4} pages, {state:>5}: {n / s / 1e9:6.2f} GB/s ({s:.3f} s for {n >> 20} MiB)",
                      flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"bytes": n, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
