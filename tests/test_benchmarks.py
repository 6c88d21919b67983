"""Benchmark tools measure what they say: the plain-C baseline of benchmarks/bench_speed.py
computes the same model as decodelab (if it did not, its speed would say nothing), and
bench_phase.py's first-prompt phase reports one figure per prompt."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import decodelab

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc to build benchmarks/baseline/plainc.c")
def test_plain_c_baseline_matches_decodelab_greedy(stories, stories_bin, tmp_path):
    exe = tmp_path / "plainc"
    subprocess.run(["gcc", "-O3", "-ffast-math", "-march=native", "-fopenmp",
                    os.path.join(ROOT, "benchmarks", "baseline", "plainc.c"), "-lm", "-o", str(exe)], check=True)
    P, N = 50, 100
    out = subprocess.run([str(exe), stories_bin, str(P), str(N)], capture_output=True, text=True, check=True,
                         env=dict(os.environ, OMP_NUM_THREADS="2"))
    last = json.loads(out.stdout)["last_token"]
    # The same pseudo-random prompt as plainc.c: BOS, then a linear congruential sequence.
    rng, prompt = 12345, [1]
    for _ in range(P - 1):
        rng = (rng * 1664525 + 1013904223) % 2**32
        prompt.append(3 + rng % (stories.config.vocab_size - 3))
    g = stories.generate(prompt, max_new_tokens=N + 1, eos_token_id=[])
    assert g.token_ids[-1] == last


def test_first_prompt_phase_reports_each_prompt(checkpoint):
    # bench_phase.py --phase first is how the first-request figures in the notes are taken: one
    # rate and one page-fault count per prompt, the first one first.
    out = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "bench_phase.py"), str(checkpoint("llama-tiny")),
                          "--phase", "first", "--prompt", "24", "--repeats", "2", "--threads", "1"],
                         capture_output=True, text=True, check=True)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["phase"] == "first" and res["prompt"] == 24
    assert len(res["tok_s"]) == 3 and all(r > 0 for r in res["tok_s"])
    assert len(res["page_faults"]) == 3 and all(isinstance(n, int) and n >= 0 for n in res["page_faults"])
    assert res["load_s"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["decodelab", "plain-C"])
def test_worker_peak_rss_is_its_own(engine, checkpoint):
    # bench_speed.py's workers are started by a parent that may hold far more memory (it writes
    # the checkpoints). Their RSS column must not report the parent's peak, as ru_maxrss, which
    # carries over fork and exec, did. Here the parent holds 800 MiB; a tiny model's worker needs
    # a fraction of that.
    if engine == "plain-C" and shutil.which("gcc") is None:
        pytest.skip("needs gcc to build benchmarks/baseline/plainc.c")
    folder = str(checkpoint("llama-tiny"))
    parent = (
        "import subprocess, sys, numpy as np\n"
        "held = np.ones(100 << 20)\n"  # 800 MiB, every page touched
        "cmd = [sys.executable, sys.argv[1], '--worker', sys.argv[2], sys.argv[3], 'float32', '--threads', '1',"
        " '--prompt', '8', '--decode', '4', '--batch-steps', '1']\n"
        "print(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip())\n"
        "print(held.sum() > 0)\n")
    out = subprocess.run([sys.executable, "-c", parent, os.path.join(ROOT, "benchmarks", "bench_speed.py"), engine, folder],
                         capture_output=True, text=True, check=True)
    res = json.loads(out.stdout.strip().splitlines()[-2])
    assert 1 < res["peak_rss_mib"] < 400, res
    if engine == "decodelab":  # the bytes its bound counts: the profile's, fp32 here
        cfg = decodelab.load(folder).config
        D, H, q, kv = cfg.hidden_size, cfg.intermediate_size, cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
        params = cfg.n_layers * (D * q + 2 * D * kv + q * D + 3 * D * H) + D * cfg.vocab_size
        assert res["weight_bytes_per_step"] == 4 * params


def test_phase_profile_reports_the_ops_and_the_bound(checkpoint):
    # bench_phase.py --profile is how the notes' per-op figures are taken.
    out = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "bench_phase.py"), str(checkpoint("llama-tiny")),
                          "--phase", "decode", "--prompt", "16", "--steps", "8", "--repeats", "2", "--threads", "1",
                          "--profile"], capture_output=True, text=True, check=True)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert {"qkv_proj", "attention", "mlp_in", "mlp_out", "head"} <= set(res["profile_ms_per_pass"])
    assert res["weight_bytes_per_pass"] > 0 and res["kv_bytes_per_pass"] > 0 and 0 < res["bound_share"]
    assert "ms/pass" in out.stdout and "of probe" in out.stdout


@pytest.mark.parametrize("kv", ["float32", "bfloat16", "int8"])
def test_attention_timing_binding_takes_every_cache_dtype(kv):
    """bench_attention.py's binding fills a cache of each dtype and times decode attention over it."""
    from decodelab._native import _core

    t = _core.attention_seconds(2, 4, 2, 64, 100, kv, 3, 1)
    assert t.shape == (3,) and np.all(np.isfinite(t)) and np.all(t > 0)
    with pytest.raises(ValueError, match="cache dtype must be 'float32', 'bfloat16' or 'int8', got 'fp8'"):
        _core.attention_seconds(2, 4, 2, 64, 100, "fp8", 3, 1)


def test_soak_counts_no_error_and_memory_returns(tmp_path):
    """benchmarks/bench_soak.py for a few seconds on stories260K with 4 clients: every request kind
    runs, the bad requests get their 4xx, the server returns to its idle KV blocks and exits 0."""
    pytest.importorskip("httpx", reason="the soak's clients use httpx (a test extra)")
    out = tmp_path / "soak.json"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "bench_soak.py"), "--model", "stories260K",
                        "--minutes", "0.1", "--clients", "4", "--warmup", "2", "--out", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["errors"] == 0 and result["server_exit"] == 0 and result["kv_blocks"]["returned"]
    assert all(result["by_kind"][k] > 0 for k in ("stream", "complete", "abandon", "bad")), result["by_kind"]
