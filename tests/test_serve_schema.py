"""decodelab serve against its own /openapi.json: the schema describes every route's request and
response bodies, and Schemathesis, fuzzing a live server on stories260K (with a chat template, so
that chat requests reach the model), finds no 5xx, no response outside the schema (streamed
events included), no schema-invalid request accepted, and no request that hangs."""
import os
import signal
import subprocess
import sys

import pytest

from conftest import serve_cli

httpx = pytest.importorskip("httpx")
pytest.importorskip("schemathesis", reason="schemathesis is a test extra")
pytest.importorskip("uvicorn", reason="uvicorn is a test extra (decodelab[serve])")

# Per operation and phase; 8 operations. A longer run: DECODELAB_FUZZ_EXAMPLES=2000.
EXAMPLES = int(os.environ.get("DECODELAB_FUZZ_EXAMPLES", "40"))


@pytest.fixture(scope="module")
def live_server(tmp_path_factory):
    template = tmp_path_factory.mktemp("fuzz") / "story.jinja"
    template.write_text("{% for m in messages %}{{ m.content }}{% endfor %}")
    p, url = serve_cli("stories260K", "--served-model-name", "stories260K", "--chat-template", template,
                       "--request-timeout", "60")
    yield url
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=30)
    assert "Traceback" not in err, err[-3000:]


def test_the_schema_describes_every_route(live_server):
    doc = httpx.get(live_server + "/openapi.json", timeout=10).json()
    ops = {(m.upper(), p): op for p, item in doc["paths"].items() for m, op in item.items()}
    assert set(ops) == {("GET", "/"), ("GET", "/health"), ("GET", "/metrics"), ("GET", "/v1/models"),
                        ("POST", "/tokenize"), ("POST", "/detokenize"), ("POST", "/v1/completions"),
                        ("POST", "/v1/chat/completions")}
    for (method, path), op in ops.items():
        assert "422" not in op["responses"], (path, "FastAPI's 422 is never sent: bad bodies get 400")
        assert op["responses"]["503"]["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/ErrorResponse"}
        if method == "POST":
            assert op["requestBody"]["content"]["application/json"]["schema"]["$ref"].startswith(
                "#/components/schemas/")
            assert "400" in op["responses"] and "413" in op["responses"]
    schemas = doc["components"]["schemas"]
    completion = schemas["CompletionRequest"]["properties"]
    assert completion["model"]["enum"] == ["stories260K"]
    assert completion["temperature"]["anyOf"][0] == {"type": "number", "minimum": 0, "maximum": 2}
    assert schemas["ChatRequest"]["additionalProperties"] is False
    chat_200 = ops[("POST", "/v1/chat/completions")]["responses"]["200"]["content"]
    assert chat_200["application/json"]["schema"]["$ref"] == "#/components/schemas/ChatCompletion"
    assert "text/event-stream" in chat_200
    # A body the schema refuses gets OpenAI's 400, the refusal named in the message.
    r = httpx.post(live_server + "/v1/completions", json={"model": "stories260K", "prompt": "x", "n": 2.0}, timeout=10)
    assert r.status_code == 400 and r.json()["error"] == {
        "message": "n: Input should be a valid integer, got 2.0", "type": "invalid_request_error", "param": "n",
        "code": None}


@pytest.mark.slow
def test_schemathesis_finds_nothing(live_server, tmp_path):
    """Every Schemathesis check but positive_data_acceptance: a request can satisfy the schema
    and still be refused for limits of the model that JSON schema cannot state (prompt tokens plus
    max_tokens past the context, a logit_bias key outside the vocabulary)."""
    cmd = [sys.executable, "-m", "schemathesis.cli", "run", live_server + "/openapi.json",
           "--max-examples", str(EXAMPLES), "--seed", "7", "--exclude-checks", "positive_data_acceptance",
           "--request-timeout", "60", "--report", "junit", "--report-dir", str(tmp_path)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=tmp_path)  # its cache dir there
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-6000:]
    tested = [line for line in out.splitlines() if "generated" in line and "passed" in line]
    assert tested, out[-3000:]
    print(tested[-1].strip())
    assert "Schema validation mismatch" not in out, out[-3000:]  # chat must reach the model
