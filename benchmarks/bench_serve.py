"""Serving under load: decodelab's server beside llama.cpp's own `llama-server` (continuous
batching, `--parallel` set to the client count) on the same GGUF file and thread count, in one run.
At 1, 4, 16 and 64 concurrent streaming clients: generated tokens per second over the whole run
(counted from each stream's usage, not from its pieces), and p50 / p99 time to first token (TTFT)
and time per output token after the first (TPOT) per request.

    python benchmarks/bench_serve.py --llama-server PATH [--model FILE] [--clients 1 4 16 64]
        [--max-tokens 64] [--dtype D ...] [--servers decodelab llama-server] [--out FILE]

Every request streams a completion of one story prompt at temperature 0.8 with its own seed and
ignore_eos, so every engine generates exactly --max-tokens per request. llama-server is started
afresh for each client count (its slots are fixed at start: `--parallel N`, `-c 512*N`, continuous
batching on, web UI off, bound to 127.0.0.1); decodelab once per dtype, with --max-running at the
largest client count. `llama-cpp-python` (`python -m llama_cpp.server`, one request at a time) can
be added to --servers. Results go to benchmarks/results/bench_serve.json.

llama-server from the llama.cpp source vendored in llama-cpp-python's source package, no network:

    pip download --no-binary :all: --no-deps llama-cpp-python==0.3.36 && tar xzf llama_cpp_python-0.3.36.tar.gz
    cmake -S llama_cpp_python-0.3.36/vendor/llama.cpp -B build-ls -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DGGML_NATIVE=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_UI=OFF \
        -DLLAMA_USE_PREBUILT_UI=OFF -DBUILD_SHARED_LIBS=OFF
    cmake --build build-ls --target llama-server -j2
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


def start(kind: str, model: str, threads: int, dtype=None, clients=64, binary=None):
    port = free_port()
    if kind == "decodelab":
        cmd = [sys.executable, "-m", "decodelab", "serve", model, "--port", str(port), "--threads", str(threads),
               "--served-model-name", "m", "--max-running", str(clients), "--max-waiting", "1024"] + \
              (["--dtype", dtype] if dtype else [])
    elif kind == "llama-server":
        cmd = [binary, "-m", model, "--host", "127.0.0.1", "--port", str(port), "-t", str(threads), "-tb", str(threads),
               "--parallel", str(clients), "-c", str(512 * clients), "--cont-batching", "--no-webui", "-a", "m"]
    else:
        # interrupt_requests off: by default a new request cuts the running stream short.
        cmd = [sys.executable, "-m", "llama_cpp.server", "--model", model, "--port", str(port), "--n_threads",
               str(threads), "--n_ctx", "2048", "--model_alias", "m", "--interrupt_requests", "False"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import httpx

    for _ in range(1200):
        try:
            if httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=1).status_code == 200 and \
                    httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return proc, f"http://127.0.0.1:{port}/v1"
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"{kind} server did not start: {' '.join(cmd)}")


async def one(client, url: str, seed: int, max_tokens: int):
    body = {"model": "m", "prompt": PROMPT, "max_tokens": max_tokens, "temperature": 0.8, "seed": seed,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    t0 = time.perf_counter()
    times, tokens = [], None
    async with client.stream("POST", url + "/completions", json=body) as r:
        r.raise_for_status()
        async for line in r.aiter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                ch = json.loads(line[6:])
                if any(c.get("text") for c in ch.get("choices", [])):
                    times.append(time.perf_counter())
                if ch.get("usage"):
                    tokens = ch["usage"]["completion_tokens"]
    if tokens is None:
        raise RuntimeError("the stream carried no usage")
    ttft = times[0] - t0 if times else float("nan")
    tpot = (times[-1] - times[0]) / (tokens - 1) if tokens > 1 and times else float("nan")
    return ttft, tpot, tokens


async def level(url: str, clients: int, max_tokens: int):
    import httpx

    async with httpx.AsyncClient(timeout=1200, limits=httpx.Limits(max_connections=clients)) as client:
        t0 = time.perf_counter()
        res = await asyncio.gather(*(one(client, url, 100 + i, max_tokens) for i in range(clients)))
        wall = time.perf_counter() - t0
    ttft = np.array([r[0] for r in res])
    tpot = np.array([r[1] for r in res if not np.isnan(r[1])])
    tokens = sum(r[2] for r in res)
    return {"clients": clients, "tokens": tokens, "tokens_per_s": tokens / wall, "wall_s": wall,
            "ttft_p50": float(np.percentile(ttft, 50)), "ttft_p99": float(np.percentile(ttft, 99)),
            "tpot_p50": float(np.percentile(tpot, 50)) if len(tpot) else None,
            "tpot_p99": float(np.percentile(tpot, 99)) if len(tpot) else None}


def run(kind, args, dtype, clients):
    """Rows of one server: started once for all client counts, or (llama-server) once per count."""
    rows = []
    groups = [[c] for c in clients] if kind == "llama-server" else [clients]
    for group in groups:
        proc, url = start(kind, args.model, args.threads, dtype, max(group), args.llama_server)
        try:
            asyncio.run(level(url, min(4, max(group)), 8))  # warm up
            for c in group:
                r = dict(server=kind, dtype=dtype, **asyncio.run(level(url, c, args.max_tokens)))
                rows.append(r)
                name = kind + (f" {dtype}" if dtype else "")
                print(f"{name:22s} {c:3d} clients: {r['tokens_per_s']:7.1f} tok/s, TTFT p50 "
                      f"{r['ttft_p50'] * 1e3:7.0f} ms p99 {r['ttft_p99'] * 1e3:7.0f} ms, TPOT p50 "
                      f"{(r['tpot_p50'] or 0) * 1e3:6.1f} ms p99 {(r['tpot_p99'] or 0) * 1e3:6.1f} ms", flush=True)
        finally:
            proc.terminate()
            proc.wait(30)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=SMOLLM)
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 4, 16, 64])
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--dtype", nargs="+", default=[None],
                    help="decodelab's weights, one row set per dtype (default: load()'s for the file)")
    ap.add_argument("--servers", nargs="+", default=["decodelab", "llama-server"],
                    choices=["decodelab", "llama-server", "llama-cpp-python"])
    ap.add_argument("--llama-server", default=os.environ.get("LLAMA_SERVER"),
                    help="the llama-server binary (or $LLAMA_SERVER)")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "bench_serve.json"))
    args = ap.parse_args()
    if "llama-server" in args.servers and not (args.llama_server and os.access(args.llama_server, os.X_OK)):
        ap.error(f"--llama-server must name the llama-server binary, got {args.llama_server!r}")
    rows = []
    for kind in args.servers:
        for dtype in (args.dtype if kind == "decodelab" else [None]):
            rows += run(kind, args, dtype, args.clients)
    out = {"model": os.path.basename(args.model), "threads": args.threads, "max_tokens": args.max_tokens,
           "rows": rows}
    if os.path.exists(args.out):  # one file per model: other models' results stay
        with open(args.out, encoding="utf-8") as f:
            old = json.load(f)
        runs = [r for r in old.get("runs", []) if r["model"] != out["model"]] if "runs" in old else []
    else:
        runs = []
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump({"runs": runs + [out]}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
