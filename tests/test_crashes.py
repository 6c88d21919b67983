"""Calls that once killed the process: each runs in a child Python, so a segfault or an abort
fails its test instead of ending the run, and the child checks the clear error it expects."""
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from decodelab import testing

PRELUDE = """
import os, sys, threading, time
import numpy as np
import decodelab
from decodelab import samplers
"""


def run_child(code, *, timeout=120, env=None, expect_rc=0):
    """Runs code in a fresh interpreter; fails on a crash, a hang or an unexpected exit status."""
    full_env = dict(os.environ, **(env or {}))
    p = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(code)], capture_output=True, text=True,
                       timeout=timeout, env=full_env)
    died = p.returncode < 0 and p.returncode != expect_rc
    assert not died, f"the child died of signal {-p.returncode}:\n{p.stderr[-3000:]}"
    assert "terminate called" not in p.stderr, p.stderr[-3000:]
    assert p.returncode == expect_rc, f"exit status {p.returncode}:\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}"
    return p


@pytest.fixture(scope="module")
def slow_model(tmp_path_factory):
    """A model large enough that a long generation takes a second or more, so other threads act
    while it runs."""
    shape = dict(arch="llama", hidden_size=256, intermediate_size=768, num_hidden_layers=6, num_attention_heads=8,
                 num_key_value_heads=4, vocab_size=512, max_position_embeddings=4096, tie_word_embeddings=False)
    return testing.write_checkpoint(str(tmp_path_factory.mktemp("slow")), shape)


def test_huge_num_beams_is_refused(stories_bin):
    run_child(f"""
        m = decodelab.load({stories_bin!r})
        for beams in (2**30, 2**31 - 1):
            try:
                m.generate("Hi", num_beams=beams, max_new_tokens=2)
            except ValueError as e:
                assert "memory budget" in str(e) and str(beams) in str(e), e
            else:
                raise SystemExit("num_beams=%d was accepted" % beams)
        try:
            m.generate("Hi", num_beams=2**40)
        except ValueError as e:
            assert "num_beams must be an integer <= 2147483647" in str(e), e
    """)


def test_many_eos_ids_with_many_beams(stories_bin):
    # (1 + EOS ids) x beams once overflowed an int; now it is counted in 64 bits and capped at
    # beams x vocabulary.
    run_child(f"""
        m = decodelab.load({stories_bin!r})
        g = m.generate("Once", num_beams=64, eos_token_id=list(range(3, 500)), max_new_tokens=3)
        assert len(g.sequences) == 1 and g.token_ids
    """)


def test_num_beams_and_n_respect_the_memory_budget(stories_bin):
    run_child(f"""
        m = decodelab.load({stories_bin!r})
        for kw in (dict(num_beams=100000), dict(n=10**9, temperature=1.0)):
            try:
                m.generate("Hi", max_new_tokens=3, **kw)
            except ValueError as e:
                assert "memory budget of 1 GiB" in str(e) and "DECODELAB_MEMORY_BUDGET" in str(e), e
            else:
                raise SystemExit("%r was accepted" % kw)
    """, env={"DECODELAB_MEMORY_BUDGET": str(2**30)})


def test_trace_with_negative_top():
    run_child("""
        chain = samplers.Chain([samplers.TopK(3)])
        for top in (-1, -1000):
            try:
                chain.trace(np.zeros(10, np.float32), top=top)
            except ValueError as e:
                assert "top must be an integer >= 0" in str(e), e
            else:
                raise SystemExit("top=%d was accepted" % top)
    """)


@pytest.mark.slow
def test_one_cache_from_two_threads(slow_model):
    run_child(f"""
        m = decodelab.load({slow_model!r}, threads=1)
        want = m.generate([1, 2, 3], max_new_tokens=800, eos_token_id=[]).token_ids
        cache = m.new_cache()
        out = {{}}

        def run():  # the loop below may hold the cache when this starts: then it is refused too
            while True:
                try:
                    return out.update(g=m.generate([1, 2, 3], max_new_tokens=800, eos_token_id=[], cache=cache))
                except ValueError as e:
                    assert "in use by another call" in str(e), e
        t = threading.Thread(target=run)
        t.start()
        refused = 0
        while t.is_alive():
            for call in (lambda: cache.token_ids, lambda: cache.truncate(0), lambda: cache.fork(),
                         lambda: m.decode(1, cache), lambda: m.generate([1], max_new_tokens=2, cache=cache)):
                try:
                    call()
                except ValueError as e:
                    assert "in use by another call" in str(e), e
                    refused += 1
            time.sleep(0.001)
        t.join()
        assert refused > 0, "the generation ended before any call met it"
        assert out["g"].token_ids == want
    """)


@pytest.mark.slow
def test_threads_change_while_another_thread_generates(slow_model):
    run_child(f"""
        m = decodelab.load({slow_model!r}, threads=2)
        want = m.generate([1, 2, 3], max_new_tokens=800, eos_token_id=[]).token_ids
        out = {{}}
        t = threading.Thread(target=lambda: out.update(g=m.generate([1, 2, 3], max_new_tokens=800,
                                                                     eos_token_id=[])))
        t.start()
        refused = 0
        while t.is_alive():
            try:
                m.threads = 1 + refused % 2
            except ValueError as e:
                assert "threads cannot change while this model is running" in str(e), e
                refused += 1
            time.sleep(0.001)
        t.join()
        assert refused > 0
        assert out["g"].token_ids == want
        m.threads = 1  # between calls it changes
        assert m.threads == 1
    """)


@pytest.mark.slow
def test_four_threads_on_one_model_match_sequential(slow_model):
    # Each thread keeps its caches alive, so the block pool grows all the while; every result must
    # equal the one computed alone first.
    run_child(f"""
        m = decodelab.load({slow_model!r}, threads=1)
        rng = np.random.default_rng(0)
        jobs = [(rng.integers(0, 512, size=int(rng.integers(1, 60))).tolist(), int(rng.integers(1, 40)), i)
                for i in range(24)]
        want = [m.generate(p, max_new_tokens=n, temperature=0.9, seed=s, eos_token_id=[]).token_ids
                for p, n, s in jobs]
        errors, rounds = [], [0] * 4

        def worker(w):
            kept = []
            end = time.monotonic() + 3.0
            while time.monotonic() < end or rounds[w] < 2:  # slow builds (sanitizers) still do two rounds
                for j in range(w, len(jobs), 4):
                    p, n, s = jobs[j]
                    c = m.new_cache(capacity=64, grow=True)
                    g = m.generate(p, max_new_tokens=n, temperature=0.9, seed=s, eos_token_id=[], cache=c)
                    if g.token_ids != want[j]:
                        errors.append((w, j))
                    kept.append(c)
                kept = kept[-40:]
                rounds[w] += 1

        threads = [threading.Thread(target=worker, args=(w,)) for w in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        assert m.memory_report()["float32"]["blocks_allocated"] > 24  # several chunks: the pool grew
    """)


@pytest.mark.parametrize("daemon", [True, False])
def test_interpreter_exit_while_a_thread_generates(slow_model, daemon):
    p = run_child(f"""
        m = decodelab.load({slow_model!r}, threads=1)
        # A daemon thread is still generating when the interpreter shuts down; shutdown waits for
        # another thread, which finishes.
        t = threading.Thread(target=lambda: m.generate([1, 2], max_new_tokens={3000 if daemon else 400},
                                                       eos_token_id=[]), daemon={daemon})
        t.start()
        time.sleep(0.3)
        print("main thread exits")
    """)
    assert "main thread exits" in p.stdout


def test_ctrl_c_in_main_thread_while_a_thread_generates(slow_model, sigint):
    # The KeyboardInterrupt ends the main thread; the interpreter then shuts down around the
    # daemon thread still inside generate().
    p = run_child(f"""
        import signal
        signal.signal(signal.SIGINT, signal.default_int_handler)  # as if started in a terminal
        m = decodelab.load({slow_model!r}, threads=1)
        t = threading.Thread(target=lambda: m.generate([1, 2], max_new_tokens=3000, eos_token_id=[]), daemon=True)
        t.start()
        time.sleep(0.3)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)
    """, expect_rc=-signal.SIGINT)
    assert "KeyboardInterrupt" in p.stderr


def test_long_context_config_allocates_no_rope_table(checkpoint, tmp_path):
    # A config asking for 2^22 positions once made 4 GB of RoPE tables at load.
    import json
    import shutil

    d = tmp_path / "long"
    shutil.copytree(checkpoint("llama-tiny"), d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["max_position_embeddings"] = 2**22
    (d / "config.json").write_text(json.dumps(cfg))
    run_child(f"""
        import resource
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        m = decodelab.load({str(d)!r})
        assert m.config.max_position_embeddings == 2**22
        m.generate([1, 2, 3], max_new_tokens=4)
        grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
        assert grew < 200 * 1024, f"load and generate grew the peak by {{grew}} KiB"
    """)


def test_fork_after_generating_does_not_hang(stories_bin):
    # multiprocessing from a notebook forks a process whose OpenMP threads have already run.
    run_child(f"""
        import multiprocessing as mp
        m = decodelab.load({stories_bin!r}, threads=2)
        want = m.generate("Once upon a time", max_new_tokens=30).token_ids

        def work(q):
            q.put(m.generate("Once upon a time", max_new_tokens=30).token_ids)

        ctx = mp.get_context("fork")
        q = ctx.Queue()
        p = ctx.Process(target=work, args=(q,))
        p.start()
        got = q.get(timeout=30)
        p.join(30)
        assert p.exitcode == 0 and got == want, (p.exitcode, got, want)
    """, timeout=90)


@pytest.mark.slow
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores: one to keep busy, one to run on")
def test_auto_threads_give_way_to_a_busy_core(stories_bin, tmp_path):
    # load()'s default runs on the cores other programs leave free (benchmarks/bench_busy.py has
    # the speeds); a fixed count stays fixed. The machine's load comes from a file in
    # /proc/loadavg's format (DECODELAB_LOADAVG), so other programs running do not change it.
    loadavg = tmp_path / "loadavg"
    loadavg.write_text("0.00 0.00 0.00 0/100 1\n")
    run_child(f"""
        import pathlib
        loadavg = pathlib.Path({str(loadavg)!r})
        cores = len(os.sched_getaffinity(0))
        m = decodelab.load({stories_bin!r})
        assert m.auto_threads and m.threads == cores
        m.generate([1], max_new_tokens=50, eos_token_id=[])
        assert m._engine.threads_now == cores, m._engine.threads_now
        loadavg.write_text("0.00 0.00 0.00 1000/1100 1\\n")  # every core busy
        end = time.monotonic() + 10
        while m._engine.threads_now != 1 and time.monotonic() < end:
            m.generate([1], max_new_tokens=200, eos_token_id=[])
        assert m._engine.threads_now == 1, m._engine.threads_now
        loadavg.write_text("0.00 0.00 0.00 0/100 1\\n")  # idle again
        end = time.monotonic() + 10
        while m._engine.threads_now != cores and time.monotonic() < end:
            m.generate([1], max_new_tokens=200, eos_token_id=[])
        assert m._engine.threads_now == cores
        m.threads = cores
        assert not m.auto_threads
        fixed = decodelab.load({stories_bin!r}, threads=cores)
        assert not fixed.auto_threads and fixed._engine.threads_now == cores
    """, env={"DECODELAB_LOADAVG": str(loadavg)})