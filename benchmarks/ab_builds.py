"""Two builds of decodelab side by side: runs bench_phase.py for each phase and checkpoint, the
builds alternating round by round on one machine, and reports each side's median tokens/s.

    pip wheel --no-deps -w /tmp/before_whl . && pip install --no-deps --target /tmp/before /tmp/before_whl/*.whl
    python benchmarks/ab_builds.py --before /tmp/before --after "" FOLDER [FOLDER ...] [--rounds 5]
        [--phases decode,prefill,batch] [--dtype float32] [--out FILE]

--before / --after: a directory put first on PYTHONPATH ("" for the installed package). Phases:
decode (64 steps after a 16-token prompt), decode_1k (32 steps after 1024 tokens, where attention
weighs more), prefill (a 512-token prompt) and batch (16 sequences, 16 steps). Writes benchmarks/results/ab_builds.json with every round's figures.
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
PHASES = {"decode": ["--phase", "decode", "--prompt", "16", "--steps", "64"],
          "decode_1k": ["--phase", "decode", "--prompt", "1024", "--steps", "32"],
          "prefill": ["--phase", "prefill", "--prompt", "512"],
          "batch": ["--phase", "batch", "--batch", "16", "--steps", "16"]}


def run(site: str, folder: str, args) -> float:
    env = dict(os.environ)
    if site:
        env["PYTHONPATH"] = site + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, str(HERE / "bench_phase.py"), folder, *args, "--repeats", "3"], env=env,
                         capture_output=True, text=True, check=True, cwd="/")
    return json.loads(out.stdout.strip().splitlines()[-1])["tok_s"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("folders", nargs="+")
    ap.add_argument("--before", required=True)
    ap.add_argument("--after", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--phases", default=",".join(PHASES), help="comma-separated, from " + ", ".join(PHASES))
    ap.add_argument("--dtype", default="float32", help="weights, as bench_phase.py takes them")
    ap.add_argument("--out", default=str(HERE / "results" / "ab_builds.json"))
    a = ap.parse_args()
    rows = {}
    for r in range(a.rounds):
        for folder in a.folders:
            for phase in a.phases.split(","):
                args = PHASES[phase] + ["--dtype", a.dtype]
                key = f"{os.path.basename(os.path.normpath(folder))} {phase}"
                sides = [("before", a.before), ("after", a.after)]
                for name, site in (sides if r % 2 == 0 else sides[::-1]):
                    rows.setdefault(key, {"before": [], "after": []})[name].append(run(site, folder, args))
        print(f"round {r + 1} of {a.rounds} done", file=sys.stderr)
    print(f"{'checkpoint phase':28s} {'before':>9s} {'after':>9s} {'after/before':>13s}   (median tok/s)")
    for key, v in rows.items():
        b, f = statistics.median(v["before"]), statistics.median(v["after"])
        v["median_before"], v["median_after"], v["ratio"] = b, f, f / b
        print(f"{key:28s} {b:9.1f} {f:9.1f} {f / b:13.3f}")
    pathlib.Path(a.out).write_text(json.dumps({"rounds": a.rounds, "phases": PHASES, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
