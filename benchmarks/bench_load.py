"""Load time and peak memory: decodelab.load against llama.cpp's llama_model_load_from_file on
the same GGUF files, each load in a fresh process, from a warm page cache.

    python benchmarks/bench_load.py FILE [FILE ...] [--rounds 3] [--rest 0] [--engines decodelab llama.cpp] [--json out.json]

Before every load the file is read once, so both engines start from the page cache, as
bench_speed's rows do. --rest S waits S seconds before each load: on a virtual machine that
returns freed memory to its host, a load right after another process freed memory gets its fresh
huge pages far faster than one after a rest (benchmarks/bench_first_touch.py), and the two
engines can land on different sides of that. Rounds alternate the engines; each row reports
every round's seconds and peak RSS (the worker's ru_maxrss), and its best. decodelab loads at the
file's default dtype with its tokenizer (built beside the weights); llama.cpp with its default
parameters, which repack some block types for its CPU kernels.
"""
import argparse
import json
import os
import subprocess
import sys
import time

from bench_speed import warm_page_cache


def worker(engine, path, threads):
    import resource

    if engine == "decodelab":
        import decodelab

        t = time.perf_counter()
        decodelab.load(path, threads=threads)
        seconds = time.perf_counter() - t
    else:
        import llama_cpp as lc

        lc.llama_backend_init()
        params = lc.llama_model_default_params()
        t = time.perf_counter()
        model = lc.llama_model_load_from_file(path.encode(), params)
        seconds = time.perf_counter() - t
        if not model:
            raise SystemExit(f"llama.cpp could not load {path}")
    print(json.dumps({"load_s": seconds, "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="*", help="GGUF files")
    ap.add_argument("--engines", nargs="+", default=["decodelab", "llama.cpp"], choices=["decodelab", "llama.cpp"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rest", type=float, default=0.0, help="seconds to wait before each load")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json")
    ap.add_argument("--worker", nargs=2, metavar=("ENGINE", "FILE"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        worker(a.worker[0], a.worker[1], a.threads)
        return
    if not a.files:
        ap.error("name at least one GGUF file")
    runs = {(f, e): [] for f in a.files for e in a.engines}
    for r in range(a.rounds):
        for f in a.files:
            for e in a.engines:
                warm_page_cache([f])
                time.sleep(a.rest)
                p = subprocess.run([sys.executable, __file__, "--worker", e, f, "--threads", str(a.threads)],
                                   capture_output=True, text=True)
                if p.returncode != 0:
                    res = {"error": (p.stderr.strip().splitlines() or ["failed"])[-1][:200]}
                else:
                    res = json.loads(p.stdout.strip().splitlines()[-1])
                runs[(f, e)].append(res)
                print(f"  round {r + 1}/{a.rounds} {os.path.basename(f)} {e}: "
                      + (res.get("error") or f"{res['load_s']:.2f} s, {res['peak_rss_mib']:.0f} MiB"), file=sys.stderr,
                      flush=True)
    rows = []
    print(f"{'file':<44} {'engine':<10} {'best s':>7} {'rounds s':<24} {'peak MiB':>9}")
    for (f, e), rs in runs.items():
        ok = [x for x in rs if "error" not in x]
        row = {"file": os.path.basename(f), "engine": e, "rounds": rs}
        if ok:
            row["load_s"] = min(x["load_s"] for x in ok)
            row["peak_rss_mib"] = max(x["peak_rss_mib"] for x in ok)
            spread = " ".join(f"{x['load_s']:.2f}" for x in ok)
            print(f"{row['file']:<44} {e:<10} {row['load_s']:>7.2f} {spread:<24} {row['peak_rss_mib']:>9.0f}")
        rows.append(row)
    if a.json:
        with open(a.json, "w") as out:
            json.dump({"argv": sys.argv, "rest_s": a.rest, "threads": a.threads, "rows": rows}, out, indent=1)


if __name__ == "__main__":
    main()
