"""Throughput of decodelab.integrations.ray with 1, 2 and 4 replicas on this machine: a head and
two worker raylets on 127.0.0.1 (as tests/test_ray.py starts them, each offering 2 CPUs so that 4
replicas can be placed on a 2-core machine), one thread per replica, seeded sampled rows; the
output checked equal across replica counts.

    python benchmarks/bench_ray.py [--model smollm2] [--rows 48] [--max-tokens 32] [--replicas 1 2 4]

Results go to benchmarks/results/bench_ray.json: generated tokens per second of the whole pipeline,
the replicas' start and model load included, as a study pays them.
"""
import argparse
import json
import os
import time

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # every node on the loopback address

import ray  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

from decodelab.integrations.ray import ProcessorConfig, build_processor  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.environ.get("DECODELAB_MODELS", os.path.join(HERE, "..", "..", "shared", "models"))
SMOLLM = os.path.join(MODELS, "smollm2-135m-instruct", "SmolLM2-135M-Instruct.Q4_1.gguf")
PROMPTS = ["Once upon a time", "The little dog", "Lily found a", "One day, Tom", "The sun was", "A big red box",
           "In the park", "Sam and Mia"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2", help="'smollm2' (the shared Q4_1 file) or what load() takes")
    ap.add_argument("--rows", type=int, default=48)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--replicas", type=int, nargs="+", default=[1, 2, 4])
    a = ap.parse_args()
    model = os.path.abspath(SMOLLM) if a.model == "smollm2" else a.model
    node = {"num_cpus": 2, "object_store_memory": 100 << 20, "node_ip_address": "127.0.0.1"}
    c = Cluster(initialize_head=True, head_node_args=dict(node))
    for _ in range(2):
        c.add_node(**node)
    ray.init(address=c.address, _node_ip_address="127.0.0.1", log_to_driver=False)
    rows = [{"id": i, "prompt": PROMPTS[i % len(PROMPTS)], "sampling_params": {"seed": i, "temperature": 0.8}}
            for i in range(a.rows)]
    results, texts = [], None
    for n in a.replicas:
        config = ProcessorConfig(model=model, concurrency=n, batch_size=max(1, a.rows // (2 * n)),
                                 generate_options={"max_new_tokens": a.max_tokens, "eos_token_id": []})
        t0 = time.perf_counter()
        out = build_processor(config)(ray.data.from_items(rows)).take_all()
        seconds = time.perf_counter() - t0
        tokens = sum(r["num_generated_tokens"] for r in out)
        got = {r["id"]: r["generated_text"] for r in out}
        same = texts is None or got == texts
        texts = texts or got
        results.append({"replicas": n, "seconds": seconds, "tokens": tokens, "tok_s": tokens / seconds,
                        "same_output_as_first": same})
        print(f"{n} replicas: {seconds:.1f} s, {tokens / seconds:.1f} tok/s (model loads included), "
              f"same output: {same}", flush=True)
    ray.shutdown()
    c.shutdown()
    out = {"model": os.path.basename(str(model)), "rows": a.rows, "max_tokens": a.max_tokens,
           "cpus": len(os.sched_getaffinity(0)), "results": results}
    with open(os.path.join(HERE, "results", "bench_ray.json"), "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
