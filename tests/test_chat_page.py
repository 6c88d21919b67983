"""The chat page in a real browser: headless Chromium from Debian's packages, driven by Playwright
with executable_path (no browser download is possible here; .ci/run installs chromium with apt-get).
Typing a message shows the reply streamed token by token, each with its probability."""
import os
import shutil

import pytest

import decodelab

from conftest import MODELS, _need

pytestmark = pytest.mark.browser
playwright = pytest.importorskip("playwright.sync_api", reason="playwright is a test extra")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SMOLLM = os.path.join(MODELS, "smollm2-135m-instruct", "SmolLM2-135M-Instruct.Q4_1.gguf")


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium on this machine (apt-get install chromium); the page's "
                                            "HTML and the API it calls are tested in test_serve.py")
def test_typing_a_message_streams_a_reply_with_probabilities(tmp_path):
    from test_serve import _serve

    model = decodelab.load(_need(SMOLLM), dtype="int8")
    server, thread, url = _serve(model, "smollm2")
    try:
        with playwright.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_page()
            page.goto(url.replace("/v1", "/"))
            page.wait_for_function("document.getElementById('model').textContent === 'smollm2'")
            page.fill("#temperature", "0")
            page.fill("#msg", "What is the capital of France? Answer in one word.")
            page.press("#msg", "Enter")
            page.wait_for_function("!document.getElementById('send').disabled && "
                                   "document.querySelectorAll('.assistant .tok').length > 0", timeout=60000)
            tokens = page.eval_on_selector_all(".assistant .tok", "els => els.map(e => [e.textContent, e.title, "
                                                                  "e.style.background])")
            page.screenshot(path=str(tmp_path / "chat.png"))
            browser.close()
    finally:
        server.should_exit = True
        thread.join(10)
    text = "".join(t for t, _, _ in tokens)
    assert "Paris" in text
    for t, title, background in tokens:
        assert "p=" in title and title.count("\n") >= 1 and background.startswith("rgb(")
    assert os.path.getsize(tmp_path / "chat.png") > 1000
