"""A soak of `decodelab serve`: mixed traffic from many clients for minutes, then the server's
memory and KV blocks against their idle level, and latency percentiles minute by minute.

    python benchmarks/bench_soak.py [--model FILE] [--minutes 10] [--clients 32] [--warmup 15] [--dtype D]

Each client loops until the time is up, choosing by a seeded draw: a stream (40%), a
non-streamed completion or chat (30%; chats only where the model has a chat template), a stream it
abandons after two chunks (15%), or a bad request (15%: a value out of range, another model's
name, a body that is not JSON, a body over the size limit). Every answer is checked: a good request
must succeed with a finish reason, a bad one must get its 4xx with OpenAI's error JSON; anything
else is counted as an error. Idle RSS and KV blocks are read after a warm-up at full concurrency
(--warmup, 15 s); after the load the server must return to them (RSS within 5% or 32 MiB, blocks
equal), with the prefix cache off so that only requests hold blocks. RSS is also sampled every 5 s
and its maximum reported per minute. Results go to benchmarks/results/bench_soak.json.
"""
import argparse
import asyncio
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MODELS = os.environ.get("DECODELAB_MODELS", os.path.join(ROOT, "..", "shared", "models"))
SMOLLM = os.path.join(MODELS, "smollm2-135m-instruct", "SmolLM2-135M-Instruct.Q4_1.gguf")
PROMPTS = ["Once upon a time, in a small village by the sea,", "The three most useful kitchen tools are",
           "Write a haiku about autumn rain.", "Explain what a hash table is in two sentences."]
KINDS = [("stream", 0.40), ("complete", 0.30), ("abandon", 0.15), ("bad", 0.15)]
MAX_BODY_MIB = 1
CHAT = True  # half the completions are chats, where the model has a chat template


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(ln.split()[1]) for ln in f if ln.startswith("VmRSS:")) / 1024


def metrics(client, base: str) -> dict:
    text = client.get(base + "/metrics", timeout=30).text
    return {ln.split()[0]: float(ln.split()[1]) for ln in text.splitlines() if ln and not ln.startswith("#")}


async def one_request(client, base: str, kind: str, rng: random.Random) -> dict:
    """Send one request of `kind`; {'ok': bool, 'status', 'seconds', 'ttft', 'why'}."""
    prompt = rng.choice(PROMPTS)
    body = {"model": "soak", "prompt": prompt, "max_tokens": rng.choice([8, 16, 32]),
            "temperature": 0.8, "seed": rng.randrange(2**31)}
    t0 = time.perf_counter()
    out = {"kind": kind, "ok": False, "status": None, "ttft": None, "why": ""}
    try:
        if kind == "bad":
            which = rng.randrange(4)
            if which == 0:
                r = await client.post(base + "/v1/completions", json=dict(body, temperature=7))
                want = 400
            elif which == 1:
                r = await client.post(base + "/v1/completions", json=dict(body, model="gpt-4"))
                want = 404
            elif which == 2:
                r = await client.post(base + "/v1/completions", content=b"{not json",
                                      headers={"content-type": "application/json"})
                want = 400
            else:
                r = await client.post(base + "/v1/completions", json=dict(body, prompt="x" * (MAX_BODY_MIB * 2**20 + 1)))
                want = 413
            out["status"] = r.status_code
            out["ok"] = r.status_code == want and "error" in r.json()
            out["why"] = "" if out["ok"] else f"wanted {want}, got {r.status_code}: {r.text[:200]}"
        elif kind == "complete":
            if not CHAT or rng.random() < 0.5:
                r = await client.post(base + "/v1/completions", json=body)
                reason = r.json()["choices"][0]["finish_reason"] if r.status_code == 200 else None
            else:
                chat = {"model": "soak", "messages": [{"role": "user", "content": prompt}],
                        "max_tokens": body["max_tokens"], "temperature": 0.8, "seed": body["seed"]}
                r = await client.post(base + "/v1/chat/completions", json=chat)
                reason = r.json()["choices"][0]["finish_reason"] if r.status_code == 200 else None
            out["status"] = r.status_code
            out["ok"] = r.status_code == 200 and reason in ("stop", "length")
            out["why"] = "" if out["ok"] else f"{r.status_code}: {r.text[:200]}"
        else:
            chunks, reason = 0, None
            async with client.stream("POST", base + "/v1/completions", json=dict(body, stream=True)) as r:
                out["status"] = r.status_code
                async for line in r.aiter_lines():
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    if chunks == 0:
                        out["ttft"] = time.perf_counter() - t0
                    chunks += 1
                    choice = json.loads(line[6:])["choices"]
                    reason = (choice[0].get("finish_reason") if choice else None) or reason
                    if kind == "abandon" and chunks >= 2:
                        break  # leave mid-stream: the server must cancel it and free its blocks
            out["ok"] = r.status_code == 200 and (kind == "abandon" or reason in ("stop", "length"))
            out["why"] = "" if out["ok"] else f"{r.status_code}, finish_reason {reason}"
    except Exception as e:  # a dropped connection or a timeout is an error of the server
        out["why"] = f"{type(e).__name__}: {e}"
    out["seconds"] = time.perf_counter() - t0
    return out


async def load(base: str, clients: int, seconds: float, seed: int) -> list:
    import httpx

    deadline = time.perf_counter() + seconds
    start = time.perf_counter()
    records = []

    async def client_loop(i: int):
        rng = random.Random(seed * 1000 + i)
        async with httpx.AsyncClient(timeout=120) as client:
            while time.perf_counter() < deadline:
                kind = rng.choices([k for k, _ in KINDS], [w for _, w in KINDS])[0]
                rec = await one_request(client, base, kind, rng)
                rec["at"] = time.perf_counter() - start
                records.append(rec)

    await asyncio.gather(*(client_loop(i) for i in range(clients)))
    return records


def per_minute(records: list, rss: list) -> list:
    rows = []
    for m in range(int(max(r["at"] for r in records) // 60) + 1):
        rs = [r for r in records if m * 60 <= r["at"] < (m + 1) * 60]
        mem = [v for t, v in rss if m * 60 <= t < (m + 1) * 60]
        good = [r["seconds"] for r in rs if r["kind"] in ("stream", "complete") and r["ok"]]
        ttft = [r["ttft"] for r in rs if r["ttft"] is not None and r["kind"] == "stream"]
        pct = (lambda xs, q: round(float(np.percentile(xs, q)) * 1000, 1) if xs else None)
        rows.append({"minute": m + 1, "requests": len(rs), "errors": sum(not r["ok"] for r in rs),
                     "latency_p50_ms": pct(good, 50), "latency_p90_ms": pct(good, 90), "latency_p99_ms": pct(good, 99),
                     "ttft_p50_ms": pct(ttft, 50), "ttft_p99_ms": pct(ttft, 99),
                     "rss_max_mib": round(max(mem), 1) if mem else None})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=SMOLLM)
    ap.add_argument("--dtype", default=None)
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--warmup", type=float, default=15.0, help="seconds of load before the idle level is read")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "bench_soak.json"))
    args = ap.parse_args()
    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "decodelab", "serve", args.model, "--served-model-name", "soak", "--port", str(port),
           "--prefix-cache-mib", "0", "--max-body-mib", str(MAX_BODY_MIB), "--max-running", "32"]
    if args.dtype:
        cmd += ["--dtype", args.dtype]
    server = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    try:
        with httpx.Client() as c:
            for _ in range(600):
                try:
                    if c.get(base + "/health", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.1)
            global CHAT
            probe = c.post(base + "/v1/chat/completions", timeout=60,
                           json={"model": "soak", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1})
            CHAT = probe.status_code == 200
            # A warm-up at full concurrency: every kind, so that the batch's buffers and the block
            # pool reach their working size; what the load adds beyond that is what it leaves.
            warm = asyncio.run(load(base, args.clients, args.warmup, args.seed + 1))
            time.sleep(1.0)
            idle_rss, idle = rss_mib(server.pid), metrics(c, base)
            print(f"idle after warm-up ({len(warm)} requests): RSS {idle_rss:.0f} MiB, "
                  f"KV blocks {idle['decodelab_kv_blocks_in_use']:.0f}", flush=True)
            rss, sampling = [], threading.Event()
            t0 = time.perf_counter()

            def sample():
                while not sampling.wait(5.0):
                    rss.append((time.perf_counter() - t0, rss_mib(server.pid)))

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            records = asyncio.run(load(base, args.clients, args.minutes * 60, args.seed))
            sampling.set()
            for _ in range(600):  # the abandoned streams end at the engine's next step
                after = metrics(c, base)
                if after["decodelab_requests_running"] == 0 and after["decodelab_requests_waiting"] == 0:
                    break
                time.sleep(0.1)
            time.sleep(1.0)
            after_rss, after = rss_mib(server.pid), metrics(c, base)
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            _, err = server.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            _, err = server.communicate()
    errors = [r for r in records if not r["ok"]]
    rows = per_minute(records, rss)
    rss_ok = after_rss <= max(idle_rss * 1.05, idle_rss + 32)
    blocks_ok = after["decodelab_kv_blocks_in_use"] == idle["decodelab_kv_blocks_in_use"]
    result = {"argv": sys.argv, "model": args.model, "dtype": args.dtype, "clients": args.clients,
              "minutes": args.minutes, "requests": len(records),
              "by_kind": {k: sum(r["kind"] == k for r in records) for k, _ in KINDS},
              "errors": len(errors), "error_examples": [f"{r['kind']}: {r['why']}" for r in errors[:10]],
              "rss_mib": {"idle": round(idle_rss, 1), "after": round(after_rss, 1), "returned": rss_ok},
              "kv_blocks": {"idle": idle["decodelab_kv_blocks_in_use"], "after": after["decodelab_kv_blocks_in_use"],
                            "returned": blocks_ok},
              "generated_tokens": after["decodelab_generation_tokens_total"] - idle["decodelab_generation_tokens_total"],
              "server_exit": server.returncode, "per_minute": rows}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"{len(records)} requests ({result['by_kind']}), {len(errors)} errors, "
          f"{result['generated_tokens']:.0f} tokens generated")
    print(f"RSS {idle_rss:.0f} -> {after_rss:.0f} MiB ({'returned' if rss_ok else 'DID NOT return'}); KV blocks "
          f"{idle['decodelab_kv_blocks_in_use']:.0f} -> {after['decodelab_kv_blocks_in_use']:.0f}; "
          f"server exit {server.returncode}")
    print("minute  requests  errors  p50 ms  p90 ms  p99 ms  TTFT p50  TTFT p99  max RSS MiB")
    for r in rows:
        print(f"{r['minute']:>6}  {r['requests']:>8}  {r['errors']:>6}  {r['latency_p50_ms']!s:>6}  "
              f"{r['latency_p90_ms']!s:>6}  {r['latency_p99_ms']!s:>6}  {r['ttft_p50_ms']!s:>8}  {r['ttft_p99_ms']!s:>8}"
              f"  {r['rss_max_mib']!s:>11}")
    for why in result["error_examples"]:
        print("  error:", why)
    return 0 if not errors and rss_ok and blocks_ok and server.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
