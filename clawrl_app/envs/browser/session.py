"""One browser episode: the site's loopback server, a fresh BrowserContext and its page,
the actions run on it, and the next-state observations (ENVS.md §5.7 D).

The context is made for untrusted pages and an untrusted policy: fixed viewport, no
downloads, no permissions, no service workers; every request that is not for the site
server's origin is aborted (and counted); dialogs are dismissed and popups closed, so no
page can hang an episode or open a second front. Everything here runs on the runtime's
thread (see launcher.py).
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path
from typing import Any

from clawrl_app.envs.base import Action, Observation, StepResult
from clawrl_app.envs.browser.actions import (
    ACTION_TIMEOUT_MS,
    NAV_TIMEOUT_MS,
    ActionError,
    BrowserCrashed,
    browser_gone,
    perform,
)
from clawrl_app.envs.browser.server import SiteServer
from clawrl_app.envs.browser.snapshot import REF_ATTR, Snapshot, diff_lines, take_snapshot

VIEWPORT = {"width": 1280, "height": 800}
MAX_CONSOLE = 5


class EpisodePage:
    """A site served on loopback and opened in a fresh context; `act` runs one action and
    returns the next state. `close()` is idempotent."""

    def __init__(self, browser: Any, site_dir: Path, start: str, *, screenshot: bool = False):
        self.screenshot = screenshot
        self.counters = {"aborted_requests": 0, "dialogs_dismissed": 0, "popups_closed": 0,
                         "downloads_refused": 0}  # fmt: skip
        self.notes: list[str] = []  # events since the last observation (dialogs, popups...)
        self.console: list[str] = []
        self.last: Snapshot | None = None
        self.terminated: str | None = None
        self.context: Any = None
        self.server = SiteServer(site_dir).start()
        self.origin = self.server.origin
        try:
            self._open(browser, start)
        except Exception:
            self.close()
            raise

    def _open(self, browser: Any, start: str) -> None:
        self.context = browser.new_context(
            viewport=VIEWPORT, accept_downloads=False, service_workers="block", permissions=[],
        )  # fmt: skip
        self.context.set_default_timeout(ACTION_TIMEOUT_MS)
        self.context.set_default_navigation_timeout(NAV_TIMEOUT_MS)
        # Only requests that are not for the site server reach Python (and are aborted):
        # the pattern runs in the driver, so the site's own files load without a detour.
        self.context.route(re.compile("^(?!" + re.escape(self.origin) + "/)"), self._route)
        if hasattr(self.context, "route_web_socket"):  # Playwright >= 1.48
            self.context.route_web_socket("**/*", self._route_ws)
        self.page = self.context.new_page()
        self.page.on("dialog", self._dialog)
        self.page.on("console", self._console)
        self.page.on("pageerror", lambda exc: self._log_error(f"uncaught: {exc}"))
        self.page.on("download", self._download)
        self.context.on("page", self._popup)  # after new_page: only other pages are popups
        self.start_url = self.server.url(start)
        self.page.goto(self.start_url, wait_until="load")

    # --- what the page does on its own -------------------------------------------------
    def _own(self, url: str) -> bool:
        return url == self.origin or url.startswith(self.origin + "/")

    def _route(self, route: Any) -> None:
        if self._own(route.request.url):
            route.continue_()
        else:
            self.counters["aborted_requests"] += 1
            route.abort("blockedbyclient")

    def _route_ws(self, ws: Any) -> None:
        own = "ws" + self.origin[len("http") :]
        if ws.url == own or ws.url.startswith(own + "/"):
            ws.connect_to_server()
        else:
            self.counters["aborted_requests"] += 1
            ws.close()

    def _dialog(self, dialog: Any) -> None:
        self.counters["dialogs_dismissed"] += 1
        self.notes.append(f"dismissed a {dialog.type} dialog: {dialog.message[:120]!r}")
        with contextlib.suppress(Exception):
            dialog.dismiss()

    def _console(self, msg: Any) -> None:
        if msg.type == "error":
            self._log_error(msg.text)

    def _log_error(self, text: str) -> None:
        if len(self.console) < 50:  # one line each: page text must not forge our header lines
            self.console.append(" ".join(str(text).split())[:200])

    def _download(self, download: Any) -> None:
        self.counters["downloads_refused"] += 1
        self.notes.append("a download was refused (downloads are off)")
        with contextlib.suppress(Exception):
            download.cancel()

    def _popup(self, page: Any) -> None:
        if page is self.page:
            return
        self.counters["popups_closed"] += 1
        self.notes.append("a new window was closed (stay on this page)")
        with contextlib.suppress(Exception):
            page.close()

    # --- the next state -----------------------------------------------------------------
    def _settle(self) -> Snapshot:
        """The page after an action: wait for a navigation it started, then snapshot (once
        more if the document changed under the snapshot script)."""
        for attempt in range(3):
            with contextlib.suppress(Exception):
                self.page.wait_for_load_state("load", timeout=NAV_TIMEOUT_MS)
            try:
                return take_snapshot(self.page)
            except Exception as exc:
                if browser_gone(self.page):
                    raise BrowserCrashed(f"the browser went away: {exc}") from exc
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _stay_on_site(self) -> None:
        """A navigation off the site was aborted and left Chromium's error page: go back to
        the page before it (or the start page) and say so."""
        with contextlib.suppress(Exception):
            self.page.wait_for_load_state("load", timeout=NAV_TIMEOUT_MS)
        if self._own(self.page.url):
            return
        self.notes.append("a navigation off this site was blocked")
        with contextlib.suppress(Exception):
            self.page.go_back(wait_until="load", timeout=NAV_TIMEOUT_MS)
        if not self._own(self.page.url):
            self.page.goto(self.start_url, wait_until="load")

    def observe(self, summary: str, error: str | None = None) -> Observation:
        """The next state: what was done, url, title, changes, page notes, the snapshot."""
        self._stay_on_site()
        snap = self._settle()
        changes = diff_lines(self.last, snap)
        lines = [f"error: {error}" if error else summary, f"url: {snap.url}",
                 f"title: {snap.title}"]  # fmt: skip
        if self.last is not None:
            lines.append("changes: none" if not changes else "changes:")
            lines += [f"  {c}" for c in changes]
        if self.notes:
            lines.append("notes: " + "; ".join(self.notes))
        if self.console:
            shown = self.console[-MAX_CONSOLE:]
            lines.append("console errors: " + " | ".join(shown))
        lines += ["page:", snap.text or "(no visible elements)"]
        self.notes, self.console, self.last = [], [], snap
        png = None
        if self.screenshot:
            png = self.page.screenshot(type="png", timeout=NAV_TIMEOUT_MS)
        return Observation("\n".join(lines), error=error, image_png=png, snapshot=snap.text)

    def info(self) -> dict[str, Any]:
        """Counters of the episode so far (aborted requests, dialogs, popups, downloads)."""
        return {**self.counters, "url": self.last.url if self.last else None}

    def act(self, action: Action) -> StepResult:
        """Run one action of the policy; `done` after `terminate`."""
        args = action.arguments if isinstance(action.arguments, dict) else {}
        status = args.get("status")
        if action.tool == "terminate" and status in ("success", "failure"):
            self.terminated = str(status)
            return StepResult(Observation(f"terminated: {status}"), done=True, info=self.info())
        try:
            try:
                if action.tool == "terminate":
                    raise ActionError("terminate needs status success or failure")
                summary, error = perform(self.page, str(action.tool), args, self.origin), None
            except ActionError as exc:
                summary, error = "", str(exc)
            return StepResult(self.observe(summary, error), info=self.info())
        except Exception as exc:
            if not isinstance(exc, BrowserCrashed) and not browser_gone(self.page):
                raise
            return StepResult(Observation("", infra_error=str(exc)), info=self.info())

    def ref_for(self, selector: str) -> str:
        """The snapshot ref of the first element matching a CSS `selector` (the oracle's
        rehearsal); ValueError when it has none (absent, hidden, or not listed)."""
        loc = self.page.locator(selector)
        ref = loc.first.get_attribute(REF_ATTR, timeout=ACTION_TIMEOUT_MS) if loc.count() else None
        if not ref:
            raise ValueError(f"no snapshot ref for {selector!r} on {self.page.url}")
        return str(ref)

    def close(self) -> None:
        """Idempotent: the context (and its pages), then the server."""
        ctx, self.context = self.context, None
        if ctx is not None:
            with contextlib.suppress(Exception):
                ctx.close()
        self.server.stop()
