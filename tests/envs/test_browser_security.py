"""Security of the browser env with real Chromium (ENVS.md §5.9, browser row): `goto`
refuses anything but a site path, nothing leaves the site's origin (other loopback ports
included), downloads are refused, dialogs and popups cannot hang an episode, and the
static server serves only regular files under the site folder, with GET and HEAD."""

from __future__ import annotations

import http.client
import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from clawrl_app.envs.base import Action
from clawrl_app.envs.browser.env import BrowserEnv
from clawrl_app.envs.browser.launcher import find_chromium, playwright_available, profile_dirs
from clawrl_app.envs.browser.server import SiteServer

if not playwright_available():
    pytest.skip("Playwright is missing: pip install playwright", allow_module_level=True)
if find_chromium() is None:
    pytest.skip("Chromium is missing: apt-get install -y chromium", allow_module_level=True)

# The hung-browser test abandons its stuck thread's event loop: a coroutine left unawaited.
pytestmark = pytest.mark.filterwarnings("ignore:coroutine .* was never awaited:RuntimeWarning")
DOWNLOAD = "clawrl-download-probe-7f3a.bin"


class _Counting(BaseHTTPRequestHandler):
    hits: list[str] = []

    def do_GET(self) -> None:  # noqa: N802
        self.hits.append(self.path)
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def other_origin() -> Iterator[tuple[str, list[str]]]:
    """Another loopback server (a different origin): the page must never reach it."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Counting)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", _Counting.hits
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="module")
def env(
    tmp_path_factory: pytest.TempPathFactory, other_origin: tuple[str, list[str]]
) -> Iterator[BrowserEnv]:
    other = other_origin[0]
    root = tmp_path_factory.mktemp("pack")
    site = root / "sites" / "evil"
    site.mkdir(parents=True)
    (site / "index.html").write_text(f"""<!doctype html><title>Evil</title><h1>Evil page</h1>
<img src="http://example.com/pixel.png"><img src="{other}/img.png">
<script src="http://example.com/lib.js"></script>
<script>
  fetch("{other}/fetch").catch(() => {{}});
  fetch("http://203.0.113.7/x").catch(() => {{}});
  new Image().src = "https://example.org/p.gif";
</script>
<a id="dl" href="{DOWNLOAD}" download>Download the file</a>
<a id="file" href="file:///etc/passwd">Passwords</a>
<a id="offsite" href="{other}/page.html">Off-site page</a>
<button id="dialogs" onclick="alert('hi'); document.getElementById('out').textContent =
  'confirm=' + confirm('sure?') + ' prompt=' + prompt('name?')">Dialogs</button>
<button id="popup" onclick="window.open('index.html')">Popup</button>
<button id="hang" onclick="while (true) {{}}">Hang</button>
<p id="out">nothing yet</p>""")
    (site / DOWNLOAD).write_bytes(b"\0secret" * 100)
    line = {"id": "evil-01", "site": "evil", "family": "security", "instruction": "Look.",
            "evaluator": {"conj": "and", "checks": [{"getter": "dom_exists", "selector": "h1",
                                                     "metric": "equals", "expected": True}]}}  # fmt: skip
    (root / "tasks.jsonl").write_text(json.dumps(line) + "\n")
    e = BrowserEnv(data_dir=root, keep_browser=True)
    yield e
    e.shutdown()


def _ref(text: str, needle: str) -> str:
    line = next(x for x in text.splitlines() if needle in x)
    return line.split("]")[0].lstrip("[")


def test_goto_refuses_anything_but_a_site_path(env: BrowserEnv) -> None:
    env.reset(env.tasks()[0])
    for path in ["file:///etc/passwd", "chrome://version", "javascript:alert(1)",
                 " JaVaScRiPt:alert(1)", "data:text/html,<h1>x</h1>", "http://example.com",
                 "https://example.com/", "//example.com", "/\\example.com", "\\\\example.com",
                 "http:example.com", "view-source:/index.html", "about:blank", ""]:  # fmt: skip
        out = env.step(Action("goto", {"path": path}))
        assert out.observation.error and out.observation.infra_error is None, path
        assert "url: /index.html" in out.observation.text, path
    page_url = env._call(lambda _b: env._page.page.url)
    assert page_url.startswith(env._page.origin + "/index.html")
    ok = env.step(Action("goto", {"path": "index.html?x=1"}))
    assert ok.observation.error is None and "url: /index.html?x=1" in ok.observation.text
    env.close()


def test_no_request_leaves_the_site_origin(
    env: BrowserEnv, other_origin: tuple[str, list[str]]
) -> None:
    first = env.reset(env.tasks()[0])
    env.step(Action("wait", {"seconds": 0.3}))
    for needle in ('link "Off-site page"', 'link "Passwords"'):
        out = env.step(Action("click", {"ref": _ref(first.text, needle)}))
        assert out.observation.infra_error is None
        assert "url: /index.html" in out.observation.text  # still on the site
    info = env._page.info()
    assert info["aborted_requests"] >= 6, info  # 2 images, script, 2 fetches, image, link
    assert other_origin[1] == []  # the other loopback server never saw a request
    verdict = env.evaluate()
    assert verdict.details["aborted_requests"] == info["aborted_requests"]
    env.close()


def _files_named(name: str, bases: list[Path]) -> list[str]:
    found = []
    for base in bases:  # os.walk skips what vanishes under it (other tests' temp dirs)
        for folder, _dirs, files in os.walk(base, onerror=lambda _e: None):
            found += [os.path.join(folder, f) for f in files if f == name]
    return found


def test_downloads_are_refused_and_nothing_is_written(env: BrowserEnv) -> None:
    first = env.reset(env.tasks()[0])
    out = env.step(Action("click", {"ref": _ref(first.text, 'link "Download the file"')}))
    later = env.step(Action("wait", {"seconds": 0.5}))
    assert out.observation.infra_error is None
    notes = out.observation.text + later.observation.text
    assert "a download was refused" in notes
    assert env._page.info()["downloads_refused"] == 1
    env.close()
    bases = [Path("/tmp"), Path.home(), Path(os.environ.get("TMPDIR", "/tmp"))]
    served = f"/sites/evil/{DOWNLOAD}"  # the site's own copy (this and earlier test runs)
    assert [f for f in _files_named(DOWNLOAD, bases) if not f.endswith(served)] == []


def test_dialogs_are_dismissed_and_popups_closed(env: BrowserEnv) -> None:
    first = env.reset(env.tasks()[0])
    out = env.step(Action("click", {"ref": _ref(first.text, 'button "Dialogs"')}))
    assert 'text "confirm=false prompt=null"' in out.observation.text
    assert "dismissed a alert dialog" in out.observation.text
    assert "dismissed a confirm dialog" in out.observation.text
    out = env.step(Action("click", {"ref": _ref(first.text, 'button "Popup"')}))
    env.step(Action("wait", {"seconds": 0.3}))
    info = env._page.info()
    assert info["dialogs_dismissed"] == 3 and info["popups_closed"] == 1, info
    pages = env._call(lambda _b: len(env._page.context.pages))
    assert pages == 1
    env.close()


@pytest.fixture()
def served(tmp_path: Path) -> Iterator[tuple[SiteServer, Path]]:
    site = tmp_path / "site"
    (site / "sub").mkdir(parents=True)
    (site / "index.html").write_text("<h1>home</h1>")
    (site / "sub" / "page.html").write_text("<p>sub</p>")
    (site / "nolist").mkdir()
    (site / "nolist" / "a.txt").write_text("a")
    (site / ".secret").write_text("hidden")
    (tmp_path / "outside.txt").write_text("outside")
    os.symlink("/etc/passwd", site / "passwd.html")
    os.symlink(tmp_path, site / "up")
    server = SiteServer(site).start()
    yield server, site
    server.stop()
    server.stop()  # idempotent


def _get(server: SiteServer, path: str, method: str = "GET") -> tuple[int, bytes]:
    port = int(server.origin.rsplit(":", 1)[1])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    conn.putrequest(method, path, skip_host=False, skip_accept_encoding=True)
    conn.endheaders()
    r = conn.getresponse()
    body = r.read()
    conn.close()
    return r.status, body


def test_the_static_server_serves_only_regular_files_in_the_site(
    served: tuple[SiteServer, Path],
) -> None:
    server, _ = served
    assert _get(server, "/index.html") == (200, b"<h1>home</h1>")
    assert _get(server, "/") == (200, b"<h1>home</h1>")
    assert _get(server, "/sub/page.html")[0] == 200
    assert _get(server, "/index.html", "HEAD")[0] == 200
    for path in ["/../outside.txt", "/sub/../../outside.txt", "/%2e%2e/outside.txt",
                 "/..%2foutside.txt", "/%2E%2E%2Foutside.txt", "/sub/%2e%2e/%2e%2e/outside.txt",
                 "/passwd.html", "/up/outside.txt", "/.secret", "/nolist/", "/nolist",
                 "/..\\outside.txt", "/index.html%00.txt", "/missing.html"]:  # fmt: skip
        status, body = _get(server, path)
        assert status == 404 and b"outside" not in body and b"root:" not in body, path
    for method in ["POST", "PUT", "DELETE", "PATCH", "OPTIONS"]:
        assert _get(server, "/index.html", method)[0] == 405, method
    assert _get(server, "/index.html", "TRACE")[0] == 501


def test_a_crashed_or_hung_browser_is_an_infra_error_and_the_next_episode_starts_afresh(
    env: BrowserEnv,
) -> None:
    task = env.tasks()[0]
    crashy = BrowserEnv(data_dir=env.data_dir, call_timeout_s=4)
    try:
        first = crashy.reset(task)
        procs = crashy.runtime.processes()
        profiles = profile_dirs(procs)  # Playwright's profile, Chromium's singleton folder
        assert profiles and all(p.is_dir() for p in profiles)
        assert any(p.name.startswith("org.chromium.Chromium.") for p in profiles)
        for pid in procs:  # the browser dies under the episode
            comm = (
                Path(f"/proc/{pid}/comm").read_text() if Path(f"/proc/{pid}/comm").exists() else ""
            )
            if "chrom" in comm:
                os.kill(pid, signal.SIGKILL)
        out = crashy.step(Action("click", {"ref": _ref(first.text, 'button "Dialogs"')}))
        assert out.observation.infra_error, out.observation.text
        crashy.close()
        assert not any(p.exists() for p in profiles)  # the killed browser's folders too
        first = crashy.reset(task)  # a new browser
        assert first.infra_error is None
        t0 = time.monotonic()  # a page that never yields: the call times out, the browser is killed
        out = crashy.step(Action("click", {"ref": _ref(first.text, 'button "Hang"')}))
        assert out.observation.infra_error and time.monotonic() - t0 < 15
        assert crashy.reset(task).infra_error is None
    finally:
        crashy.close()
