"""The loopback static server of one browser episode: it serves the files of one site folder
on `127.0.0.1:<random port>` and nothing else.

Only GET and HEAD; no directory listing (a folder serves its `index.html` or 404); no
symlinks anywhere on the path; no `..` (also percent-encoded), no hidden files; the real
path must stay inside the site folder. The browser env allows requests to this origin only.
"""

from __future__ import annotations

import mimetypes
import os
import posixpath
import stat
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

MAX_PATH_CHARS = 2048
MAX_FILE_BYTES = 8 * 1024 * 1024


def resolve_site_path(root: Path, raw_path: str) -> Path | None:
    """The file under `root` that the request path `raw_path` names, or None when the path
    is refused (traversal, hidden or symlinked component, not a regular file)."""
    if len(raw_path) > MAX_PATH_CHARS:
        return None
    path = unquote(urlsplit(raw_path).path)
    if "\\" in path or "\x00" in path or not path.startswith("/"):
        return None
    parts = [p for p in path.split("/") if p]
    if any(p == ".." or p.startswith(".") for p in parts):
        return None
    current = root
    for part in parts:  # lstat each step: a symlink anywhere on the way is refused
        current = current / part
        try:
            if stat.S_ISLNK(os.lstat(current).st_mode):
                return None
        except OSError:
            return None
    if current.is_dir():
        current = current / "index.html"
        if current.is_symlink():
            return None
    real = Path(os.path.realpath(current))
    if not real.is_relative_to(root) or not real.is_file():
        return None
    return real


class _Handler(BaseHTTPRequestHandler):
    server_version = "clawrl-site"
    sys_version = ""
    root: Path  # set on the subclass made per server

    def log_message(self, format: str, *args: object) -> None:
        pass  # an episode's page loads are not worth a log line each

    def _refuse(self, code: HTTPStatus) -> None:
        self.send_response(code)
        self.send_header("Content-Length", "0")
        self.send_header("Connection", "close")
        if code == HTTPStatus.METHOD_NOT_ALLOWED:
            self.send_header("Allow", "GET, HEAD")
        self.end_headers()

    def _serve(self, body: bool) -> None:
        target = resolve_site_path(self.root, self.path)
        if target is None:
            self._refuse(HTTPStatus.NOT_FOUND)
            return
        try:
            fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW)
            with os.fdopen(fd, "rb") as f:
                data = f.read(MAX_FILE_BYTES + 1)
        except OSError:
            self._refuse(HTTPStatus.NOT_FOUND)
            return
        if len(data) > MAX_FILE_BYTES:
            self._refuse(HTTPStatus.NOT_FOUND)
            return
        ctype = mimetypes.guess_type(target.name)[0] or "application/octet-stream"
        if ctype.startswith("text/") or ctype in ("application/javascript", "application/json"):
            ctype += "; charset=utf-8"
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.end_headers()
        if body:
            self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 (the name http.server dispatches to)
        self._serve(body=True)

    def do_HEAD(self) -> None:  # noqa: N802
        self._serve(body=False)

    def _not_allowed(self) -> None:
        self._refuse(HTTPStatus.METHOD_NOT_ALLOWED)

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _not_allowed  # noqa: N815


class SiteServer:
    """A threaded static server for one site folder; `start()` then `origin`, `stop()`."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(os.path.realpath(root))
        if not self.root.is_dir():
            raise FileNotFoundError(f"no site folder {self.root}")
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def origin(self) -> str:
        """`http://127.0.0.1:<port>` (no trailing slash)."""
        assert self._httpd is not None, "origin before start()"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def url(self, path: str) -> str:
        """The absolute URL of a site-relative path (already checked by the caller)."""
        return self.origin + posixpath.join("/", path.lstrip("/"))

    def start(self) -> SiteServer:
        """Bind a random loopback port and serve in a daemon thread."""
        handler = type("SiteHandler", (_Handler,), {"root": self.root})
        httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        httpd.daemon_threads = True
        self._httpd = httpd
        # A short poll interval: stop() waits for the loop to notice, once per episode.
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True,
            name="browser-site-server",
        )  # fmt: skip
        self._thread.start()
        return self

    def stop(self) -> None:
        """Idempotent."""
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=2)
            self._thread = None
