"""The documentation site: built with `mkdocs build --strict` from the lessons the notebook tests
execute (one run of each, shared), every public name in its API reference, the pytest page's
example run as a test file, and the built site browsed in headless Chromium with no request
leaving it and no console error. The guide's code blocks run through pytest-markdown-docs."""
import http.server
import os
import shutil
import subprocess
import sys
import threading
import time
import zlib
from urllib.parse import urlparse

import pytest

from conftest import ROOT
from test_public_api import COMPAT, PUBLIC, resolve

pytestmark = [pytest.mark.docs, pytest.mark.slow]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="session")
def site(executed_lessons, tmp_path_factory):
    """The site built once per session, with the lessons already executed by the suite."""
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "DECODELAB_DOCS_NOTEBOOKS": executed_lessons(), "NO_MKDOCS_2_WARNING": "1"}
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", os.path.join(ROOT, "mkdocs.yml"),
                        "-d", str(out)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-6000:]
    print(f"mkdocs build --strict: {time.perf_counter() - t0:.1f} s, "
          f"{sum(1 for _ in out.rglob('index.html'))} pages")
    return out


def _inventory(site):
    """The names in the site's objects.inv (Sphinx inventory v2: four header lines, then zlib)."""
    raw = (site / "objects.inv").read_bytes()
    body = raw.split(b"\n", 4)[4]
    return {line.split(" ", 1)[0] for line in zlib.decompress(body).decode().splitlines() if line}


def test_every_public_name_has_a_reference_entry(site):
    """Each name in tests/public_api.txt outside private modules is documented, under its own path
    or, for a re-export, under the parent package that exports the same object."""
    names = _inventory(site)
    compat = {old for old, _ in COMPAT}
    missing = []
    for path in PUBLIC:
        if "._" in path or path in compat or path in names or path == "decodelab.__version__":
            continue
        obj, parts = resolve(path), path.split(".")
        parents = [".".join(parts[:i]) + "." + parts[-1] for i in range(len(parts) - 2, 0, -1)]
        if not any(p in names and resolve(p) is obj for p in parents):
            missing.append(path)
    assert not missing, f"public names without an API entry: {missing}"


def test_pytest_page_example_passes(tmp_path):
    """The pytest page's example test file runs through the installed plugin (its fixtures), in a
    fresh pytest process."""
    with open(os.path.join(ROOT, "docs", "guide", "pytest-plugin.md"), encoding="utf-8") as f:
        text = f.read()
    section = text.split("## An example test file", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    assert code.startswith("# test_my_samplers.py")
    (tmp_path / "test_my_samplers.py").write_text(code, encoding="utf-8")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "6 passed" in r.stdout, r.stdout[-2000:]


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="no chromium on this machine (apt-get install chromium); the site "
                                            "is still built and its API entries checked")
def test_site_in_a_browser(site):
    """Search for top_p, follow the result to the samplers page, see a lesson's figure and formula,
    open an exercise's collapsed solution, an API page and the benchmarks plot; nothing is fetched from outside the site and the console
    shows no error."""
    playwright = pytest.importorskip("playwright.sync_api", reason="playwright is a test extra")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), lambda *a: _Quiet(*a, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    outside, errors = [], []
    try:
        with playwright.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_page()
            page.on("request", lambda r: outside.append(r.url)
                    if urlparse(r.url).scheme in ("http", "https") and not r.url.startswith(base) else None)
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(base)
            page.keyboard.press("/")  # Material's shortcut: opens the search box
            page.fill("input.md-search__input", "top_p")
            first = page.locator(".md-search-result__item a[href*='guide/samplers/']").first
            first.wait_for(timeout=30000)
            first.click()
            page.wait_for_url("**/guide/samplers/**")
            assert "Samplers" in page.locator("h1").first.text_content()

            page.goto(base + "lessons/02_temperature/")
            figure = page.locator("img[src^='data:image/png']").first
            figure.wait_for(timeout=30000)
            assert figure.evaluate("img => img.naturalWidth") > 100
            page.locator(".MathJax_Display").first.wait_for(timeout=30000)  # the formula, typeset
            solution = page.locator("details:has(summary:text-is('Solution'))").first  # an exercise's
            assert not solution.evaluate("d => d.open")  # worked solution starts collapsed
            solution.locator("summary").click()
            assert solution.evaluate("d => d.open") and solution.locator("pre").first.is_visible()

            page.goto(base + "api/decodelab.samplers/")
            page.locator("[id='decodelab.samplers.TopP']").wait_for(timeout=30000)
            page.goto(base + "benchmarks/")
            assert page.locator("img[src$='benchmarks-ratios.svg']").first.evaluate("img => img.naturalWidth") > 100
            browser.close()
    finally:
        server.shutdown()
        server.server_close()
    assert not outside, f"requests outside the site: {outside[:5]}"
    assert not errors, f"console errors: {errors[:5]}"
