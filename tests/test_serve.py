"""decodelab serve through the official openai client (sync, async, streaming): completions and
chat on stories260K and SmolLM2, n > 1, stop strings, logprobs, seeds, usage; and OpenAI's error
JSON for bad requests. The server runs in a thread of this process on a free port."""
import asyncio
import json
import os
import threading
import time

import pytest

import decodelab

openai = pytest.importorskip("openai", reason="the openai client is a test extra")
uvicorn = pytest.importorskip("uvicorn", reason="uvicorn is a test extra (decodelab[serve])")
httpx = pytest.importorskip("httpx")

from conftest import MODELS, _need, free_port, serve_cli  # noqa: E402

SMOLLM = os.path.join(MODELS, "smollm2-135m-instruct", "SmolLM2-135M-Instruct.Q4_1.gguf")


def _serve(model, name):
    from decodelab.serve import create_app

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(model, name), host="127.0.0.1", port=port, log_level="error"))
    t = threading.Thread(target=server.run, daemon=True)
    t.start()
    for _ in range(200):
        if server.started:
            break
        time.sleep(0.05)
    assert server.started
    return server, t, f"http://127.0.0.1:{port}/v1"


@pytest.fixture(scope="module")
def stories_server():
    model = decodelab.load("stories260K")
    server, t, url = _serve(model, "stories260K")
    yield model, url
    server.should_exit = True
    t.join(10)


@pytest.fixture(scope="module")
def smollm_server():
    model = decodelab.load(_need(SMOLLM), dtype="int8")
    server, t, url = _serve(model, "smollm2")
    yield model, url
    server.should_exit = True
    t.join(10)


def test_completions_equal_generate(stories_server):
    model, url = stories_server
    with openai.OpenAI(base_url=url, api_key="none") as client:
        _completions(model, client)


def _completions(model, client):
    assert [m.id for m in client.models.list().data] == ["stories260K"]
    r = client.completions.create(model="stories260K", prompt="Once upon a time", max_tokens=20, temperature=0)
    want = model.generate("Once upon a time", max_new_tokens=20)
    assert r.choices[0].text == want.text and r.choices[0].finish_reason == "length"
    assert r.usage.prompt_tokens == len(want.prompt_token_ids) and r.usage.completion_tokens == 20
    # Seeds: the same seed gives the same text; n > 1 gives n choices, each with logprobs.
    a = client.completions.create(model="stories260K", prompt="Once", max_tokens=12, temperature=1.0, seed=5)
    b = client.completions.create(model="stories260K", prompt="Once", max_tokens=12, temperature=1.0, seed=5)
    assert a.choices[0].text == b.choices[0].text
    n = client.completions.create(model="stories260K", prompt="Once", max_tokens=8, temperature=1.0, seed=5, n=3,
                                  logprobs=2)
    assert len(n.choices) == 3 and n.usage.completion_tokens >= sum(len(c.logprobs.tokens) for c in n.choices)
    for c in n.choices:
        assert "".join(c.logprobs.tokens) == c.text
        assert all(len(top) <= 2 and lp <= 0 for top, lp in zip(c.logprobs.top_logprobs, c.logprobs.token_logprobs))
    # Stop strings are cut from the text.
    s = client.completions.create(model="stories260K", prompt="Once upon a time", max_tokens=40, temperature=0,
                                  stop=[","])
    assert "," not in s.choices[0].text and s.choices[0].finish_reason == "stop"
    # Extra sampling fields, as vLLM accepts them.
    e = client.completions.create(model="stories260K", prompt="Once", max_tokens=8, temperature=0.8, seed=1,
                                  extra_body={"top_k": 5, "min_p": 0.1, "order": "llama.cpp"})
    assert e.choices[0].text == model.generate("Once", max_new_tokens=8, temperature=0.8, seed=1, top_k=5,
                                               min_p=0.1, order="llama.cpp").text


def test_streaming_joins_to_the_whole_text(stories_server):
    model, url = stories_server
    pieces, usage, reasons = [], None, []
    with openai.OpenAI(base_url=url, api_key="none") as client:
        with client.completions.create(model="stories260K", prompt="Once upon a time", max_tokens=30, temperature=0.9,
                                       seed=3, stream=True, stream_options={"include_usage": True}) as stream:
            for chunk in stream:
                if chunk.usage:
                    usage = chunk.usage
                for c in chunk.choices:
                    pieces.append(c.text)
                    reasons.append(c.finish_reason)
    want = model.generate("Once upon a time", max_new_tokens=30, temperature=0.9, seed=3)
    assert "".join(pieces) == want.text and reasons[-1] == "length"
    assert usage.completion_tokens == 30


def test_async_client_and_chat_on_smollm2(smollm_server):
    model, url = smollm_server
    messages = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]

    async def run():
        async with openai.AsyncOpenAI(base_url=url, api_key="none") as client:
            r = await client.chat.completions.create(model="smollm2", messages=messages, temperature=0, max_tokens=20,
                                                     logprobs=True, top_logprobs=3)
            chunks = []
            stream = await client.chat.completions.create(model="smollm2", messages=messages, temperature=0,
                                                          max_tokens=20, stream=True)
            async with stream:
                async for ch in stream:
                    chunks.extend(c.delta.content or "" for c in ch.choices)
            return r, "".join(chunks)

    r, streamed = asyncio.run(run())
    text = r.choices[0].message.content
    assert "Paris" in text and r.choices[0].finish_reason == "stop" and streamed == text
    lps = r.choices[0].logprobs.content
    assert "".join(e.token for e in lps) == text
    assert all(len(e.top_logprobs) == 3 and e.top_logprobs[0].logprob >= e.logprob - 1e-6 for e in lps)
    assert r.usage.completion_tokens == len(lps) + 1  # the end-of-turn token is counted, not shown


def test_response_format_constrains_chat(smollm_server):
    """OpenAI's response_format: json_schema (through the client's structured-output form) and
    json_object give parseable JSON; a bad one is a 400 naming response_format."""
    pytest.importorskip("llguidance", reason="constrained decoding needs llguidance (decodelab[constrained])")
    model, url = smollm_server
    client = openai.OpenAI(base_url=url, api_key="none")
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                               "country": {"enum": ["France", "Italy", "Spain"]}},
              "required": ["city", "country"], "additionalProperties": False}
    messages = [{"role": "user", "content": "Name the capital of France as JSON."}]
    r = client.chat.completions.create(model="smollm2", messages=messages, temperature=0, max_tokens=60,
                                       response_format={"type": "json_schema",
                                                        "json_schema": {"name": "place", "schema": schema}})
    out = json.loads(r.choices[0].message.content)
    assert set(out) == {"city", "country"} and out["country"] in ("France", "Italy", "Spain")
    echo = [{"role": "user", "content": 'Reply with exactly this JSON: {"answer": "Paris"}'}]
    r = client.chat.completions.create(model="smollm2", messages=echo, temperature=0, max_tokens=60,
                                       response_format={"type": "json_object"})
    assert json.loads(r.choices[0].message.content) == {"answer": "Paris"}
    for rf in ({"type": "yaml"}, {"type": "json_schema", "json_schema": {"name": "x"}}):
        bad = httpx.post(url + "/chat/completions", json={"model": "smollm2", "messages": messages,
                                                          "response_format": rf}, timeout=30)
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "response_format", bad.text


@pytest.mark.parametrize("body,status,param", [
    ({"model": "stories260K", "prompt": "x", "temperature": 3}, 400, "temperature"),
    ({"model": "stories260K", "prompt": "x", "frobnicate": 1}, 400, "frobnicate"),
    ({"model": "stories260K", "prompt": "x", "echo": True}, 400, "echo"),
    ({"model": "stories260K", "prompt": "x", "max_tokens": 0}, 400, "max_tokens"),
    ({"model": "stories260K", "prompt": "x", "logit_bias": {"99999": 1}}, 400, "logit_bias"),
    ({"model": "gpt-4", "prompt": "x"}, 404, "model"),
    ({"model": "stories260K", "prompt": "x", "max_tokens": 600}, 400, "max_tokens"),  # more than the context
    ({"model": "stories260K", "prompt": "Once upon a time " * 120, "max_tokens": 100}, 400, "prompt"),  # past it
    ({"model": "stories260K", "messages": [{"role": "user", "content": "hi"}]}, 400, "messages"),  # no template
])
def test_bad_requests_get_openai_errors(stories_server, body, status, param):
    _, url = stories_server
    path = "/chat/completions" if "messages" in body else "/completions"
    r = httpx.post(url + path, json=body, timeout=30)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["param"] == param and err["message"]
    r = httpx.post(url + "/completions", content=b"{not json", timeout=30)
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]
    assert httpx.get(url.replace("/v1", "/health"), timeout=30).json() == {"status": "ok"}


def test_tokenize_and_detokenize(stories_server):
    model, url = stories_server
    base = url.replace("/v1", "")
    r = httpx.post(base + "/tokenize", json={"prompt": "Once upon a time"}, timeout=30).json()
    assert r["tokens"] == model.tokenizer.encode("Once upon a time") and r["count"] == len(r["tokens"])
    d = httpx.post(base + "/detokenize", json={"tokens": r["tokens"]}, timeout=30).json()
    assert d["prompt"] == "Once upon a time"
    bad = httpx.post(base + "/detokenize", json={"tokens": [-1]}, timeout=30)
    assert bad.status_code == 400 and json.loads(bad.text)["error"]["param"] == "tokens"


def test_the_cli_serves_and_stops_on_sigterm(tmp_path):
    """decodelab serve with --chat-template FILE: stories260K has no template of its own, so the
    chat route answers only with the file's."""
    import signal

    template = tmp_path / "story.jinja"
    template.write_text("{% for m in messages %}{{ m.content }}{% endfor %}")
    p, base = serve_cli("stories260K", "--served-model-name", "tiny", "--chat-template", template)
    try:
        r = httpx.get(base + "/v1/models", timeout=5).json()
        assert [m["id"] for m in r["data"]] == ["tiny"]
        r = httpx.post(base + "/v1/chat/completions", timeout=30,
                       json={"model": "tiny", "messages": [{"role": "user", "content": "Once upon a time"}],
                             "max_tokens": 4, "temperature": 0}).json()
        assert r["usage"] == {"prompt_tokens": 4, "completion_tokens": 4, "total_tokens": 8}, r
    finally:
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=30)
    assert p.returncode == 0, err[-2000:]  # SIGTERM drains, then exits 0
    assert "Traceback" not in err, err[-2000:]
    assert err.index("[loading stories260K") < err.index("serving stories260K as 'tiny'")


def test_sigterm_lets_running_streams_finish_and_turns_new_requests_away(tmp_path):
    """SIGTERM with a stream in flight: new requests get 503 with OpenAI's error JSON, the stream
    runs to its last token and [DONE], and the process exits 0."""
    import signal

    p, base = serve_cli(_need(SMOLLM), "--served-model-name", "smol", "--dtype", "int8", "--shutdown-grace", "60")
    try:
        body = {"model": "smol", "prompt": "The history of the city", "max_tokens": 200, "temperature": 0,
                "ignore_eos": True, "stream": True}
        reasons, tokens = [], 0
        with httpx.stream("POST", base + "/v1/completions", json=body, timeout=120) as r:
            lines = r.iter_lines()
            assert next(lines).startswith("data: ")  # the stream is running
            p.send_signal(signal.SIGTERM)
            time.sleep(0.1)
            turned = httpx.post(base + "/v1/completions", json=dict(body, stream=False), timeout=30)
            assert turned.status_code == 503, turned.text
            assert turned.json()["error"] == {"message": "the server is shutting down", "type": "service_unavailable",
                                              "param": None, "code": None}
            last = None
            for line in lines:
                if line.startswith("data: ") and line != "data: [DONE]":
                    chunk = json.loads(line[6:])
                    reasons += [c["finish_reason"] for c in chunk["choices"] if c["finish_reason"]]
                    tokens += 1
                last = line or last
        assert reasons == ["length"] and last == "data: [DONE]" and tokens >= 190
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode == 0 and "Traceback" not in err, err[-2000:]


def test_limits_body_size_timeout_cors_and_key(stories):
    """413 for a body over max_body_bytes (told by Content-Length or not); 504 for a request past
    request_timeout, and a stream past it ends with finish_reason "length" and an error event, its
    blocks freed; CORS headers only for the origins given; the API key checked."""
    from decodelab.serve import create_app
    from fastapi.testclient import TestClient

    body = dict(model="stories260K", prompt="Once upon a time", max_tokens=400, temperature=1.0, seed=1,
                ignore_eos=True)
    app = create_app(stories, "stories260K", max_body_bytes=1000, request_timeout=0.001, api_key="k1",
                     cors_origins=["http://lab.example"])
    key = {"Authorization": "Bearer k1"}
    with TestClient(app) as client:
        idle = {k: v["blocks_in_use"] for k, v in stories.memory_report().items()}
        big = dict(body, prompt="x" * 2000)
        r = client.post("/v1/completions", json=big, headers=key)
        assert r.status_code == 413 and r.json()["error"]["message"] == \
            "the request body is larger than the server's limit of 1000 bytes"
        chunks = (json.dumps(big)[i:i + 100].encode() for i in range(0, 2100, 100))  # no Content-Length
        assert client.post("/v1/completions", content=chunks, headers=key).status_code == 413
        r = client.post("/v1/completions", json=body, headers=key)
        assert r.status_code == 504 and r.json()["error"]["type"] == "timeout_error", r.text
        with client.stream("POST", "/v1/completions", json=dict(body, stream=True), headers=key) as r:
            events = [json.loads(ln[6:]) for ln in r.iter_lines() if ln.startswith("data: ") and ln != "data: [DONE]"]
        assert events[-2]["choices"][0]["finish_reason"] == "length"
        assert events[-1]["error"]["type"] == "timeout_error"
        for _ in range(100):
            now = {k: v["blocks_in_use"] for k, v in stories.memory_report().items()}
            if all(now.get(k, 0) <= v for k, v in idle.items()):
                break
            time.sleep(0.05)
        assert all(now.get(k, 0) <= v for k, v in idle.items()), (idle, now)
        assert client.post("/v1/completions", json=dict(body, max_tokens=1),
                           headers={"Authorization": "Bearer k2"}).status_code == 401
        allowed = client.get("/v1/models", headers={"Origin": "http://lab.example"})
        assert allowed.headers["access-control-allow-origin"] == "http://lab.example"
        other = client.get("/v1/models", headers={"Origin": "http://elsewhere.example"})
        assert "access-control-allow-origin" not in other.headers
    with TestClient(create_app(stories, "stories260K")) as client:  # CORS is off by default
        assert "access-control-allow-origin" not in client.get("/v1/models", headers={"Origin": "http://a.b"}).headers
    for bad, says in [(dict(max_body_bytes=0), "max_body_bytes"), (dict(request_timeout=-1), "request_timeout"),
                      (dict(cors_origins="*"), "cors_origins")]:
        with pytest.raises(ValueError, match=says):
            create_app(stories, "stories260K", **bad)


def test_health_is_503_while_the_model_loads(stories):
    """Given a loader, the app answers at once: /health and model calls 503 until the model is in,
    then 200; a load that fails stays 503 with the reason and calls on_load_error."""
    from decodelab.serve import create_app
    from fastapi.testclient import TestClient

    gate = threading.Event()

    def slow_load():
        gate.wait(30)
        return stories

    body = dict(model="stories260K", prompt="Once", max_tokens=3, temperature=0)
    with TestClient(create_app(slow_load, "stories260K")) as client:
        r = client.get("/health")
        assert r.status_code == 503 and r.json()["error"]["message"] == "the model is still loading"
        assert client.post("/v1/completions", json=body).status_code == 503
        gate.set()
        for _ in range(200):
            if client.get("/health").status_code == 200:
                break
            time.sleep(0.02)
        assert client.post("/v1/completions", json=body).json()["usage"]["completion_tokens"] == 3

    heard = []

    def bad_load():
        raise ValueError("not a model file")

    with TestClient(create_app(bad_load, "x", on_load_error=heard.append)) as client:
        for _ in range(200):
            if heard:
                break
            time.sleep(0.02)
        r = client.get("/health")
        assert r.status_code == 503 and "failed to load: ValueError: not a model file" in r.json()["error"]["message"]
    assert isinstance(heard[0], ValueError)


def test_the_cli_exits_with_the_reason_when_the_model_does_not_load(tmp_path):
    import subprocess
    import sys

    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 20)
    port = free_port()
    p = subprocess.run([sys.executable, "-m", "decodelab", "serve", str(bad), "--port", str(port)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "could not load" in p.stderr and "Traceback" not in p.stderr, p.stderr[-2000:]


@pytest.mark.parametrize("flag, value, says", [
    ("--request-timeout", "0", "--request-timeout must be a number of seconds > 0, got 0.0"),
    ("--max-body-mib", "-1", "--max-body-mib must be a number of MiB > 0, got -1.0"),
    ("--shutdown-grace", "-2", "--shutdown-grace must be a number of seconds >= 0, got -2.0")])
def test_the_cli_names_a_bad_limit(flag, value, says):
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "decodelab", "serve", "stories260K", flag, value],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and says in p.stderr and "Traceback" not in p.stderr, p.stderr[-2000:]


def test_metrics_count_tokens_and_times(stories_server):
    _, url = stories_server
    base = url.replace("/v1", "")
    httpx.post(url + "/completions", json={"model": "stories260K", "prompt": "Once", "max_tokens": 5,
                                           "temperature": 0}, timeout=30)
    text = httpx.get(base + "/metrics", timeout=30).text
    values = {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
              if line and not line.startswith("#")}
    assert values["decodelab_generation_tokens_total"] >= 5 and values["decodelab_prompt_tokens_total"] >= 2
    assert values["decodelab_time_to_first_token_seconds_count"] >= 1
    assert values["decodelab_requests_running"] == 0 and values["decodelab_requests_waiting"] == 0
    assert "decodelab_kv_blocks_in_use" in values


def test_stream_tokens_carry_the_tokens_and_logprobs_of_each_piece(stories_server):
    model, _ = stories_server
    want = model.generate("Once upon a time", max_new_tokens=25, temperature=0.8, seed=2, logprobs=3)
    it = model.stream_tokens("Once upon a time", max_new_tokens=25, temperature=0.8, seed=2, logprobs=3)
    pieces = list(it)
    assert "".join(p.text for p in pieces) == want.text
    ids = [t for p in pieces for t in p.token_ids]
    assert ids == want.token_ids[:len(ids)]
    lps = [lp for p in pieces for lp in p.logprobs]
    assert [(lp.token, lp.logprob, lp.top) for lp in lps] == [(lp.token, lp.logprob, lp.top)
                                                            for lp in want.logprobs[:len(lps)]]


def test_streamed_chat_carries_logprobs(smollm_server):
    _, url = smollm_server
    body = {"model": "smollm2", "messages": [{"role": "user", "content": "Name a colour."}], "temperature": 0,
            "max_tokens": 12, "stream": True, "logprobs": True, "top_logprobs": 2}
    text, entries = "", []
    with httpx.stream("POST", url + "/chat/completions", json=body, timeout=60) as r:
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ch = json.loads(line[6:])
            for c in ch["choices"]:
                text += c["delta"].get("content") or ""
                if c["logprobs"]:
                    entries += c["logprobs"]["content"]
    assert text and "".join(e["token"] for e in entries) == text
    assert all(len(e["top_logprobs"]) == 2 for e in entries)


def test_the_chat_page_is_self_contained(stories_server):
    _, url = stories_server
    r = httpx.get(url.replace("/v1", "/"), timeout=30)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    page = r.text
    assert "/v1/chat/completions" in page and "top_logprobs" in page and "AbortController" in page
    assert "http://" not in page and "https://" not in page and "<script src" not in page  # no CDN


def test_64_concurrent_streams_are_complete_and_equal_their_runs_alone_among_bad_requests(stories_server):
    model, url = stories_server
    prompts = ["Once upon a time", "The little dog", "Lily and Tom", "One day, a bird"]
    reqs = [dict(model="stories260K", prompt=prompts[i % 4], max_tokens=8 + (i * 7) % 40, temperature=0.9,
                 seed=1000 + i, stream=True, stream_options={"include_usage": True}) for i in range(64)]

    async def one(client, body):
        text, usage, reasons = "", None, []
        async with client.stream("POST", url + "/completions", json=body) as r:
            assert r.status_code == 200
            async for line in r.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                ch = json.loads(line[6:])
                usage = ch.get("usage") or usage
                for c in ch["choices"]:
                    text += c["text"]
                    reasons.append(c["finish_reason"])
        return text, usage, reasons

    # Bad requests mixed into the load: each gets its 400 naming the parameter, and the streams go on.
    bad = [(b"{not json", None), (json.dumps(dict(reqs[0], frobnicate=1)).encode(), "frobnicate"),
           (json.dumps(dict(reqs[0], temperature=-1)).encode(), "temperature"),
           (json.dumps(dict(reqs[0], prompt="Once upon a time " * 120, max_tokens=100)).encode(), "prompt")]

    async def refused(client, content, param):
        r = await client.post(url + "/completions", content=content, headers={"content-type": "application/json"})
        assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
        return None

    async def run_all():
        async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=80)) as client:
            jobs = [one(client, b) for b in reqs] + [refused(client, c, p) for c, p in bad * 2]
            return (await asyncio.gather(*jobs))[:len(reqs)]

    results = asyncio.run(run_all())
    # Each alone on the idle server, one after another: the same text to the character.
    with openai.OpenAI(base_url=url, api_key="none") as client:
        for body, (text, usage, reasons) in zip(reqs, results):
            alone = client.completions.create(model="stories260K", prompt=body["prompt"], max_tokens=body["max_tokens"],
                                              temperature=0.9, seed=body["seed"])
            assert text == alone.choices[0].text and usage["completion_tokens"] == alone.usage.completion_tokens
            assert reasons[-1] == alone.choices[0].finish_reason
    assert httpx.get(url.replace("/v1", "/health"), timeout=30).status_code == 200


def test_n_streams_interleave_their_choices(stories_server):
    """n = 3 with stream: each choice's pieces carry its index and join to that choice of the same
    request without stream; the usage counts all three."""
    model, url = stories_server
    body = dict(model="stories260K", prompt="Once", max_tokens=15, temperature=1.0, seed=8, n=3)
    with openai.OpenAI(base_url=url, api_key="none") as client:
        whole = client.completions.create(**body)
        texts, reasons, usage = ["", "", ""], [None] * 3, None
        for ch in client.completions.create(**body, stream=True, stream_options={"include_usage": True}):
            usage = ch.usage or usage
            for c in ch.choices:
                texts[c.index] += c.text
                reasons[c.index] = c.finish_reason or reasons[c.index]
    assert texts == [c.text for c in whole.choices] and len(set(texts)) == 3
    assert reasons == [c.finish_reason for c in whole.choices]
    assert usage.completion_tokens == whole.usage.completion_tokens


def test_a_full_queue_answers_429(stories):
    """One running request and no waiting room: a second request at the same time gets 429 with
    OpenAI's rate-limit error, and the server goes on."""
    from decodelab.serve import create_app
    from fastapi.testclient import TestClient

    app = create_app(stories, "stories260K", max_running=1, max_waiting=0)
    body = dict(model="stories260K", prompt="Once", max_tokens=400, temperature=1.0, seed=1, stream=True)
    with TestClient(app) as client:
        for _ in range(5):  # the first may, rarely, finish its 400 tokens before the second arrives
            with client.stream("POST", "/v1/completions", json=body) as first:
                next(first.iter_lines())  # running now
                r = client.post("/v1/completions", json=dict(body, stream=False))
            if r.status_code == 429:
                break
        assert r.status_code == 429 and r.json()["error"]["type"] == "rate_limit_error", r.text
        for _ in range(100):  # the first one is cancelled at the engine's next step
            ok = client.post("/v1/completions", json=dict(body, stream=False, max_tokens=5))
            if ok.status_code != 429:
                break
            time.sleep(0.05)
        assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] == 5


def test_a_client_that_goes_away_frees_its_blocks(stories_server):
    model, url = stories_server

    def generated():
        text = httpx.get(url.replace("/v1", "/metrics"), timeout=30).text
        return float(next(ln.split()[1] for ln in text.splitlines()
                          if ln.startswith("decodelab_generation_tokens_total")))

    idle = {k: v["blocks_in_use"] for k, v in model.memory_report().items()}
    before = generated()
    body = dict(model="stories260K", prompt="Once upon a time", max_tokens=500, temperature=1.0, seed=1,
                stream=True, extra_body=None)
    body.pop("extra_body")
    with httpx.stream("POST", url + "/completions", json=body, timeout=60) as r:
        for i, _ in enumerate(r.iter_lines()):
            if i > 4:
                break  # leave mid-stream
    for _ in range(100):
        now = {k: v["blocks_in_use"] for k, v in model.memory_report().items()}
        if all(now.get(k, 0) <= v for k, v in idle.items()) and all(v == 0 for k, v in now.items() if k not in idle):
            break
        time.sleep(0.05)
    assert all(now.get(k, 0) <= v for k, v in idle.items()), (idle, now)
    metrics = httpx.get(url.replace("/v1", "/metrics"), timeout=30).text
    assert "decodelab_requests_running 0.0" in metrics
    assert generated() == before  # ended early: the 500 tokens were never generated


def test_bad_words_and_sequence_bias_as_transformers_and_vllm_name_them(stories):
    """generate(bad_words_ids=, sequence_bias=) build BadWords and SequenceBias stages in the hf
    order (bad words in the vllm order too); the server's bad_words field bans each word's tokens."""
    from decodelab import samplers as S
    from decodelab.serve import create_app
    from fastapi.testclient import TestClient

    greedy = stories.generate("Once upon a time", max_new_tokens=12)
    first, second = greedy.token_ids[0], greedy.token_ids[1]
    banned = stories.generate("Once upon a time", max_new_tokens=12, bad_words_ids=[[first, second]])
    by_chain = stories.generate("Once upon a time", max_new_tokens=12,
                                sampler=S.Chain([S.BadWords([[first, second]], [2]), S.Greedy()]))
    assert banned.token_ids == by_chain.token_ids and banned.token_ids[:2] != [first, second]
    biased = stories.generate("Once upon a time", max_new_tokens=12, sequence_bias={(first,): float("-inf")})
    assert biased.token_ids[0] != first
    assert S.build_chain(order="vllm", temperature=0, bad_words_ids=[[5]]).stages[0].bad_words_ids == [[5]]
    with pytest.raises(ValueError, match="sequence_bias is not part of the 'vllm' sampler order"):
        stories.generate("Once", sequence_bias={(5,): 1.0}, order="vllm")
    with pytest.raises(ValueError, match="bad_words token id 99999 is outside the vocabulary"):
        stories.generate("Once", bad_words_ids=[[99999]])
    word = stories.tokenizer.decode([greedy.token_ids[5]]).strip()  # a word of the greedy story
    body = dict(model="stories260K", prompt="Once upon a time", max_tokens=12, temperature=0)
    with TestClient(create_app(stories, "stories260K")) as client:
        free = client.post("/v1/completions", json=body).json()["choices"][0]["text"]
        r = client.post("/v1/completions", json=dict(body, bad_words=[word])).json()["choices"][0]["text"]
        bad = client.post("/v1/completions", json=dict(body, bad_words="x"))
    assert word in free and word not in r.split()
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "bad_words"
