"""Decode speed with the machine idle and with a spinning process beside it, per OpenMP wait setting.

    python benchmarks/bench_busy.py [--rounds 3] [--out benchmarks/results/bench_busy.json]

For stories260K and the Llama 110M shape (random weights), each setting runs in its own process
(OpenMP reads its environment once, at load): load()'s default (every core less those other
programs keep busy), every core always (the default before), OMP_WAIT_POLICY=active and passive,
and one thread. "busy" first starts one `while True` Python
process per spare core. Rounds interleave the settings and keep each one's best (this host's
speed drifts).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.environ.get("DECODELAB_MODELS", os.path.join(ROOT, "..", "shared", "models"))

CHILD = """
import json, sys, decodelab
m = decodelab.load(sys.argv[1], threads=None if sys.argv[3] == "auto" else int(sys.argv[3]))
n = int(sys.argv[2])
m.generate([1], max_new_tokens=8, eos_token_id=[])
best = 0.0
for _ in range(3):
    g = m.generate([1], max_new_tokens=n, eos_token_id=[])
    best = max(best, g.decode_tokens_per_second)
print(json.dumps({"tok_s": best}))
"""

# name -> (environment changes, threads); None removes a variable; threads None: every core,
# "auto": load()'s default, every core less those other programs keep busy.
SETTINGS = {
    "auto threads (default)": ({"OMP_WAIT_POLICY": None, "GOMP_SPINCOUNT": None}, "auto"),
    "all cores (before)": ({"OMP_WAIT_POLICY": None, "GOMP_SPINCOUNT": None}, None),
    "OMP_WAIT_POLICY=active": ({"OMP_WAIT_POLICY": "active", "GOMP_SPINCOUNT": None}, None),
    "OMP_WAIT_POLICY=passive": ({"OMP_WAIT_POLICY": "passive", "GOMP_SPINCOUNT": None}, None),
    "1 thread": ({"OMP_WAIT_POLICY": None, "GOMP_SPINCOUNT": None}, 1),
}


def run(model: str, n: int, env_changes: dict, threads) -> float:
    env = dict(os.environ)
    for k, v in env_changes.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    out = subprocess.run([sys.executable, "-c", CHILD, model, str(n), str(threads)], capture_output=True, text=True,
                         env=env, timeout=900, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["tok_s"]


def spinners(count: int):
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--models", nargs="+", default=["stories260K", "llama-110m"])
    ap.add_argument("--spincounts", nargs="*", type=int, default=[],
                    help="also rows with GOMP_SPINCOUNT set to each of these")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    for n in args.spincounts:
        SETTINGS[f"GOMP_SPINCOUNT={n}"] = ({"OMP_WAIT_POLICY": None, "GOMP_SPINCOUNT": str(n)}, None)
    from decodelab import testing

    cores = len(os.sched_getaffinity(0))
    tmp = tempfile.mkdtemp()
    models = {}
    if "stories260K" in args.models:
        models["stories260K"] = (os.path.join(MODELS, "stories260K", "stories260K.bin"), 400)
    if "llama-110m" in args.models:
        models["llama-110m"] = (testing.write_checkpoint(os.path.join(tmp, "llama-110m"), "llama-110m"), 48)
    best = {}
    for r in range(args.rounds):
        for load in ("idle", "busy"):
            procs = spinners(cores - 1) if load == "busy" else []
            time.sleep(0.2)
            try:
                for mname, (path, n) in models.items():
                    for sname, (env, threads) in SETTINGS.items():
                        key = (mname, load, sname)
                        best[key] = max(best.get(key, 0.0), run(path, n, env, threads or str(cores)))
            finally:
                for p in procs:
                    p.kill()
                    p.wait()
        print(f"round {r + 1} of {args.rounds} done", file=sys.stderr)
    rows = [{"model": m, "load": l, "setting": s, "decode_tok_s": round(v, 1)} for (m, l, s), v in best.items()]
    print(f"{'model':12s} {'setting':30s} {'idle tok/s':>11s} {'busy tok/s':>11s} {'busy/idle':>9s}")
    for mname in models:
        for sname in SETTINGS:
            i, b = best[(mname, "idle", sname)], best[(mname, "busy", sname)]
            print(f"{mname:12s} {sname:30s} {i:11.1f} {b:11.1f} {b / i:9.2f}")
    if args.out:
        import platform

        cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
        with open(args.out, "w") as f:
            json.dump({"cpu": cpu, "cores": cores, "python": platform.python_version(), "rounds": args.rounds,
                       "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
