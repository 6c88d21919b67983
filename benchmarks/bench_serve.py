"""Serving under load: decodelab's server beside llama-cpp-python's (`python -m llama_cpp.server`) on
the same GGUF file and thread count, in one run. At 1, 4, 16 and 64 concurrent streaming clients:
output tokens/s over the whole run, and p50 / p99 time to first token (TTFT) and time per output
token (TPOT) per request.

    python benchmarks/bench_serve.py [--model FILE] [--clients 1 4 16 64] [--max-tokens 64] [--dtype D]

Needs llama-cpp-python with its server extras (sse-starlette, starlette-context, pydantic-settings)
and httpx. Results go to benchmarks/results/bench_serve.json. Each request streams a completion
of a story prompt at temperature 0.8 with its own seed; tokens are counted from the streamed chunks
(one chunk per text piece, so TPOT is per piece where a piece holds several tokens).
"""
import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MODELS = os.environ.get("DECODELAB_MODELS", os.path.join(ROOT, "..", "shared", "models"))
SMOLLM = os.path.join(MODELS, "smollm2-135m-instruct", "SmolLM2-135M-Instruct.Q4_1.gguf")
PROMPT = "Once upon a time, in a small village by the sea, there lived an old fisherman who"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(kind: str, model: str, threads: int, dtype=None):
    port = free_port()
    if kind == "decodelab":
        cmd = [sys.executable, "-m", "decodelab", "serve", model, "--port", str(port), "--threads", str(threads),
               "--served-model-name", "m"] + (["--dtype", dtype] if dtype else [])
    else:
        # interrupt_requests off: by default a new request cuts the running stream short.
        cmd = [sys.executable, "-m", "llama_cpp.server", "--model", model, "--port", str(port), "--n_threads",
               str(threads), "--n_ctx", "2048", "--model_alias", "m", "--interrupt_requests", "False"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import httpx

    for _ in range(600):
        try:
            if httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=1).status_code == 200:
                return proc, f"http://127.0.0.1:{port}/v1"
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"{kind} server did not start")


async def one(client, url: str, seed: int, max_tokens: int):
    body = {"model": "m", "prompt": PROMPT, "max_tokens": max_tokens, "temperature": 0.8, "seed": seed,
            "stream": True}
    t0 = time.perf_counter()
    times = []
    async with client.stream("POST", url + "/completions", json=body) as r:
        async for line in r.aiter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                ch = json.loads(line[6:])
                if any(c.get("text") for c in ch.get("choices", [])):
                    times.append(time.perf_counter())
    ttft = times[0] - t0 if times else float("nan")
    tpot = (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else float("nan")
    return ttft, tpot, len(times)


async def level(url: str, clients: int, max_tokens: int):
    import httpx

    async with httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=clients)) as client:
        t0 = time.perf_counter()
        res = await asyncio.gather(*(one(client, url, 100 + i, max_tokens) for i in range(clients)))
        wall = time.perf_counter() - t0
    ttft = np.array([r[0] for r in res])
    tpot = np.array([r[1] for r in res if not np.isnan(r[1])])
    pieces = sum(r[2] for r in res)
    return {"clients": clients, "output_pieces_per_s": pieces / wall, "wall_s": wall,
            "ttft_p50": float(np.percentile(ttft, 50)), "ttft_p99": float(np.percentile(ttft, 99)),
            "tpot_p50": float(np.percentile(tpot, 50)) if len(tpot) else None,
            "tpot_p99": float(np.percentile(tpot, 99)) if len(tpot) else None}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=SMOLLM)
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 4, 16, 64])
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--dtype", default=None, help="decodelab's weights (default: load()'s, int8 for a 4-bit GGUF)")
    ap.add_argument("--servers", nargs="+", default=["decodelab", "llama-cpp-python"],
                    choices=["decodelab", "llama-cpp-python"])
    ap.add_argument("--out", default=os.path.join(HERE, "results", "bench_serve.json"))
    args = ap.parse_args()
    rows = []
    for kind in args.servers:
        proc, url = start(kind, args.model, args.threads, args.dtype)
        try:
            asyncio.run(level(url, 1, 8))  # warm up
            for c in args.clients:
                r = dict(server=kind, **asyncio.run(level(url, c, args.max_tokens)))
                rows.append(r)
                print(f"{kind:17s} {c:3d} clients: {r['output_pieces_per_s']:7.1f} pieces/s, TTFT p50 "
                      f"{r['ttft_p50'] * 1e3:7.0f} ms p99 {r['ttft_p99'] * 1e3:7.0f} ms, TPOT p50 "
                      f"{(r['tpot_p50'] or 0) * 1e3:6.1f} ms p99 {(r['tpot_p99'] or 0) * 1e3:6.1f} ms", flush=True)
        finally:
            proc.terminate()
            proc.wait(30)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump({"model": os.path.basename(args.model), "threads": args.threads, "max_tokens": args.max_tokens,
                   "decodelab_dtype": args.dtype or "int8", "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
