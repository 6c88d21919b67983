"""decodelab on a Ray cluster (decodelab.integrations.ray): a head and two worker nodes, each its
own raylet process on the loopback address, one CPU each. Seeded rows give the tokens a single
process gives, whatever the replicas and batch sizes; bad rows become error rows; a replica killed
mid-run loses and duplicates nothing. Ray starts slowly: one cluster serves the module."""
import os

import pytest

# Every node on 127.0.0.1: otherwise Ray maps the loopback address to the machine's outward one,
# which these machines do not route. Read when Ray is imported; the nodes inherit it.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
ray = pytest.importorskip("ray", reason="needs Ray Data: pip install \"decodelab[ray]\"")

import decodelab  # noqa: E402
from decodelab.integrations.ray import ProcessorConfig, RayBackend, build_processor  # noqa: E402

pytestmark = pytest.mark.slow

PROMPTS = ["Once upon a time", "The little dog", "Lily found a", "One day, Tom", "The sun was", "A big red"]


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster

    node = {"num_cpus": 1, "object_store_memory": 80 << 20, "node_ip_address": "127.0.0.1"}
    c = Cluster(initialize_head=True, head_node_args=dict(node))
    for _ in range(2):
        c.add_node(**node)
    ray.init(address=c.address, _node_ip_address="127.0.0.1", log_to_driver=False)
    yield c
    ray.shutdown()
    c.shutdown()


@pytest.fixture(scope="module")
def local():
    return decodelab.load("stories260K")


def rows():
    return [{"id": i, "prompt": p, "sampling_params": {"seed": 100 + i, "temperature": 0.9, "top_p": 0.95}}
            for i, p in enumerate(PROMPTS)] + [{"id": 90, "prompt": PROMPTS[0], "sampling_params": {"n": 3, "seed": 7,
                                                                                                     "temperature": 1.0}}]


def given(params):
    """A row's sampling_params as given: Arrow fills a struct's missing keys with None."""
    return {k: v for k, v in params.items() if v is not None}


def test_a_cluster_run_equals_the_single_process_run(cluster, local):
    """Two replicas on two nodes, batches of 2: every seeded row's tokens, and the n=3 samples of
    one seed, equal Model.generate's in this process."""
    config = ProcessorConfig(model="stories260K", concurrency=2, batch_size=2,
                             generate_options={"max_new_tokens": 24})
    out = build_processor(config)(ray.data.from_items(rows())).take_all()
    assert sorted(r["id"] for r in out) == sorted(r["id"] for r in rows())
    for r in out:
        assert r["error"] is None
        params = given(r["sampling_params"])
        n = params.pop("n", 1)
        want = local.generate(r["prompt"], max_new_tokens=24, n=n, **params)
        if n == 1:
            assert r["generated_token_ids"] == want.token_ids
            assert r["generated_text"] == want.text and r["num_generated_tokens"] == len(want.token_ids)
        else:  # the samples in the order of their sequence numbers; generate lists them best first
            assert sorted(r["generated_texts"]) == sorted(s.text for s in want.sequences)
            assert len(set(r["generated_texts"])) > 1


def test_bad_rows_become_error_rows(cluster, local):
    """An empty prompt, a prompt past the context and a bad option give an error row each; the
    rows beside them in the same batch run as usual."""
    long = "Once upon a time " * local.config.max_position_embeddings
    data = [{"id": 0, "prompt": "Once upon a time", "sampling_params": {"seed": 1}},
            {"id": 1, "prompt": "", "sampling_params": {"seed": 1}},
            {"id": 2, "prompt": long, "sampling_params": {"seed": 1}},
            {"id": 3, "prompt": "The dog", "sampling_params": {"seed": 1, "temperature": -2.0}}]
    config = ProcessorConfig(model="stories260K", batch_size=4, generate_options={"max_new_tokens": 8})
    out = {r["id"]: r for r in build_processor(config)(ray.data.from_items(data)).take_all()}
    assert out[0]["error"] is None
    assert out[0]["generated_token_ids"] == local.generate("Once upon a time", max_new_tokens=8, seed=1).token_ids
    assert "empty" in out[1]["error"]
    assert out[2]["error"].startswith("ValueError") and "context" in out[2]["error"]
    assert out[3]["error"].startswith("ValueError") and "temperature" in out[3]["error"]
    assert out[1]["generated_text"] is None


def test_a_killed_replica_loses_and_duplicates_nothing(cluster, local, tmp_path):
    """The replica that reaches row 3 first kills its own process (SIGKILL), once; Ray restarts it
    and runs the batch again: every row comes out once, with the single-process tokens."""
    flag = str(tmp_path / "killed")

    def maybe_die(row):  # fused into the replicas' stage: it runs in the replica's process
        if row["id"] == 3 and not os.path.exists(flag):
            with open(flag, "w") as f:
                f.write("actor" if ray.get_runtime_context().get_actor_id() else "task")
            os.kill(os.getpid(), 9)
        return row

    config = ProcessorConfig(model="stories260K", concurrency=2, batch_size=2,
                             generate_options={"max_new_tokens": 16})
    out = build_processor(config, preprocess=maybe_die)(ray.data.from_items(rows()[:6])).take_all()
    with open(flag) as f:
        assert f.read() == "actor"
    assert sorted(r["id"] for r in out) == list(range(6))
    for r in out:
        want = local.generate(r["prompt"], max_new_tokens=16, **given(r["sampling_params"]))
        assert r["generated_token_ids"] == want.token_ids


def test_score_and_perplexity_tasks(cluster, local):
    pairs = [{"prompt": "Once upon a time", "continuation": " there was"}, {"prompt": "The dog", "continuation": " ran"}]
    out = build_processor(ProcessorConfig(model="stories260K", task="score"))(ray.data.from_items(pairs)).take_all()
    got = {r["prompt"]: r["logprob"] for r in out}
    for p in pairs:
        assert got[p["prompt"]] == local.score(p["prompt"], p["continuation"]).total
    texts = [{"text": "Once upon a time there was a dog."}, {"text": ""}]
    out = build_processor(ProcessorConfig(model="stories260K", task="perplexity"))(ray.data.from_items(texts)).take_all()
    by = {r["text"]: r for r in out}
    assert by[texts[0]["text"]]["perplexity"] == local.perplexity(texts[0]["text"])
    assert by[""]["error"] is not None


def test_compare_on_the_cluster_equals_the_local_table(cluster, local):
    """compare(backend=RayBackend(replicas=2)): 3 strategies x 3 seeds on two replicas give the
    local table in every column but tokens_per_second."""
    from decodelab.eval.metrics import compare

    strategies = {"greedy": {}, "t=0.8": {"temperature": 0.8}, "top_p=0.9": {"temperature": 1.0, "top_p": 0.9}}
    prompts = ["Once upon a time", "The little dog"]
    kw = dict(n=3, max_new_tokens=12, progress=False, bleu=False)
    here = compare(local, prompts, strategies, **kw)
    there = compare(local, prompts, strategies, backend=RayBackend(replicas=2), **kw)
    cols = [c for c in here.columns if c != "tokens_per_second"]
    assert here[cols].equals(there[cols])
    assert here.loc["top_p=0.9", "distinct_2"] != here.loc["greedy", "distinct_2"]


def test_lm_eval_on_the_cluster_equals_the_local_run(cluster, local):
    """DecodelabLM(backend=RayBackend(replicas=2)): the three request types give the local adapter's
    results, a text longer than the context (several rolling windows) included."""
    pytest.importorskip("lm_eval", reason="the adapter needs lm-evaluation-harness (pip install lm_eval)")
    from lm_eval.api.instance import Instance

    from decodelab.integrations.lm_eval import DecodelabLM

    def reqs(kind, args):
        return [Instance(request_type=kind, doc={}, arguments=a, idx=i) for i, a in enumerate(args)]

    here, there = DecodelabLM(local), DecodelabLM(local, backend=RayBackend(replicas=2))
    pairs = reqs("loglikelihood", [("Once upon a time", " there was"), ("The dog", " ran"), ("Lily", " saw a cat")])
    assert there.loglikelihood(pairs) == here.loglikelihood(pairs)
    long = " ".join(["Once upon a time there was a little dog named Max."] * 60)
    texts = reqs("loglikelihood_rolling", [(long,), ("The sun was hot.",)])
    assert len(local.tokenizer.encode(long)) > local.config.max_position_embeddings
    assert there.loglikelihood_rolling(texts) == here.loglikelihood_rolling(texts)
    gens = reqs("generate_until", [("Once upon a time", {"until": ["."], "max_gen_toks": 12}),
                                   ("Lily saw a", {"until": [" named"], "max_gen_toks": 8}),
                                   ("The little dog", {"max_gen_toks": 6})])
    assert there.generate_until(gens) == here.generate_until(gens)
    with pytest.raises(ValueError, match="backend must be None or have a run"):
        DecodelabLM(local, backend="ray")


def test_config_checks_each_field():
    with pytest.raises(ValueError, match="task must be one of generate, score, perplexity"):
        ProcessorConfig(model="stories260K", task="embed")
    with pytest.raises(ValueError, match="threads_per_replica must be an integer >= 1, got 0"):
        ProcessorConfig(model="stories260K", threads_per_replica=0)
    with pytest.raises(ValueError, match="load_options must not set threads"):
        ProcessorConfig(model="stories260K", load_options={"threads": 2})
    with pytest.raises(ValueError, match="config must be a ProcessorConfig"):
        build_processor({"model": "stories260K"})
