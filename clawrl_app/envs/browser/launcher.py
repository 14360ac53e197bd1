"""Debian's Chromium under Playwright's sync API, on a thread of its own.

Playwright's sync objects belong to the thread that started them, while the runner (and
the app, through `asyncio.to_thread`) may call an env from any thread. So a runtime owns
one worker thread; everything that touches Playwright runs there (`call`). The browser is
launched lazily and kept until `stop()`; the processes it started are remembered so that
`stop()` can make sure none outlives it, even when the browser hangs.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")
INSTALL_HINT = (
    "the browser env needs Playwright and Debian's Chromium: `pip install playwright` and "
    "`apt-get install -y chromium` (never `playwright install`; it downloads its own browser)"
)
# Chromium's own background traffic is off; nothing leaves loopback anyway (see session.py).
BASE_ARGS = [
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-default-apps",
    "--disable-extensions",
    "--mute-audio",
    # A dead proxy for everything but loopback (which Chromium never proxies): a request
    # that escaped the route filter still goes nowhere.
    "--proxy-server=http://127.0.0.1:9",
]


_LAUNCH_LOCK = threading.Lock()


def _is_driver(pid: int) -> bool:
    try:
        return b"playwright" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def _wait_gone(pids: list[int], timeout_s: float = 2.0) -> None:
    """Wait (briefly) until these killed processes have exited (gone or zombies)."""
    deadline = time.monotonic() + timeout_s
    for pid in pids:
        while time.monotonic() < deadline and stat_fields(pid)[:1] not in ([], ["Z"]):
            time.sleep(0.02)


class BrowserUnavailable(RuntimeError):
    """Playwright or Chromium is missing, or the browser would not start or answer."""


def find_chromium() -> str | None:
    """The Chromium executable: `$CLAWRL_CHROMIUM`, else `chromium` on PATH, else None."""
    explicit = os.environ.get("CLAWRL_CHROMIUM")
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return "/usr/bin/chromium" if os.access("/usr/bin/chromium", os.X_OK) else None


def playwright_available() -> bool:
    """Whether the Playwright package imports (without importing it for good)."""
    import importlib.util

    return importlib.util.find_spec("playwright") is not None


def launch_args() -> list[str]:
    """Chromium's flags; `--no-sandbox` only as root, where Chromium's sandbox cannot run."""
    return BASE_ARGS + (["--no-sandbox"] if os.geteuid() == 0 else [])


def stat_fields(pid: int | str) -> list[str]:
    """The fields of /proc/<pid>/stat after the command name (state first, then the parent
    pid); empty when the process is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return []
    return stat[stat.rfind(")") + 2 :].split()


def descendants(pid: int) -> set[int]:
    """Every live process below `pid` (from /proc; empty where there is none)."""
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir() if Path("/proc").is_dir() else []:
        if not d.name.isdigit():
            continue
        fields = stat_fields(d.name)
        if fields and fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(d.name))
    out: set[int] = set()
    todo = [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in out:
                out.add(c)
                todo.append(c)
    return out


def profile_dirs(pids: set[int]) -> set[Path]:
    """The `--user-data-dir` folders of these processes (the profile Playwright made for
    the browser in the temp folder: it removes it on a clean close, not after a kill), and
    Chromium's singleton folder each links to (`SingletonSocket`: also left by a kill)."""
    out = set()
    for pid in pids:
        try:
            args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        for a in args:
            if a.startswith(b"--user-data-dir="):
                out.add(Path(os.fsdecode(a.split(b"=", 1)[1])))
    for folder in list(out):
        with contextlib.suppress(OSError):
            sock = Path(os.readlink(folder / "SingletonSocket"))
            if sock.parent.name.startswith("org.chromium.Chromium."):
                out.add(sock.parent)
    return out


class BrowserRuntime:
    """One Chromium (and its Playwright driver) owned by one worker thread."""

    def __init__(self, executable: str | None = None, headless: bool = True) -> None:
        self.executable = executable
        self.headless = headless
        self._pool: ThreadPoolExecutor | None = None
        self._pw: Any = None
        self._browser: Any = None
        self.pids: set[int] = set()
        """The processes this runtime started (driver, browser and its helpers)."""
        self.profiles: set[Path] = set()
        """Their browser profile folders, removed once the processes are gone."""
        self.generation = 0
        """Bumped at each launch and kill: Playwright objects of an older generation are
        dead (and belong to another thread's event loop): never touch them again."""
        self._lock = threading.Lock()

    @property
    def running(self) -> bool:
        """Whether a browser is up (until `stop()` or a kill)."""
        return self._browser is not None

    def call(
        self, fn: Callable[..., T], *args: Any, timeout_s: float = 60.0, launch: bool = True
    ) -> T:
        """`fn(browser, *args)` on the runtime's thread, launching the browser first if
        needed (`launch`; else `browser` may be None). BrowserUnavailable when it cannot
        start or does not answer in time."""
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(1, thread_name_prefix="browser")
            pool = self._pool
        future = pool.submit(self._in_thread, fn, args, launch)
        try:
            return future.result(timeout=timeout_s)
        except FutureTimeout:
            self._kill()  # a hung browser: its thread is stuck in a call that never returns
            raise BrowserUnavailable(f"the browser did not answer in {timeout_s:g} s") from None

    def _in_thread(self, fn: Callable[..., T], args: tuple[Any, ...], launch: bool) -> T:
        if launch and (self._browser is None or not self._browser.is_connected()):
            self._launch()
        return fn(self._browser, *args)

    def _launch(self) -> None:
        self._close_in_thread()
        try:
            from playwright.sync_api import sync_playwright
        except ImportError as exc:
            raise BrowserUnavailable(INSTALL_HINT) from exc
        exe = self.executable or find_chromium()
        if exe is None:
            raise BrowserUnavailable(f"no chromium found; {INSTALL_HINT}")
        self.generation += 1
        with _LAUNCH_LOCK:  # one launch at a time, so the new processes are this one's
            before = descendants(os.getpid())
            try:
                self._pw = sync_playwright().start()
                self._browser = self._pw.chromium.launch(
                    executable_path=exe, headless=self.headless, args=launch_args(),
                    handle_sigint=False, handle_sigterm=False, handle_sighup=False,
                )  # fmt: skip
            except Exception as exc:
                self._close_in_thread()
                raise BrowserUnavailable(f"chromium did not start: {exc}") from exc
            finally:
                new = descendants(os.getpid()) - before
                drivers = {p for p in new if _is_driver(p)}
                self.pids |= drivers | {p for d in drivers for p in descendants(d)}
                self.profiles |= profile_dirs(self.pids)

    def processes(self) -> set[int]:
        """The live processes of this runtime: its driver and everything below it."""
        mine = descendants(os.getpid())
        live = self.pids & mine
        return live | {p for d in live for p in descendants(d)}

    def _close_in_thread(self) -> None:
        browser, pw = self._browser, self._pw
        self._browser = self._pw = None
        with contextlib.suppress(Exception):
            if browser is not None:
                browser.close()
        with contextlib.suppress(Exception):
            if pw is not None:
                pw.stop()

    def _kill(self) -> None:
        """SIGKILL what is left of this runtime's processes, without its thread's help."""
        self.generation += 1
        victims = sorted(self.processes())
        self.profiles |= profile_dirs(set(victims))
        for pid in victims:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        self.pids.clear()
        if self.profiles:  # a killed browser leaves its profile behind: remove it once
            _wait_gone(victims)  # nothing writes there any more
            for folder in self.profiles:
                shutil.rmtree(folder, ignore_errors=True)
            self.profiles.clear()
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
        self._browser = self._pw = None

    def stop(self, timeout_s: float = 15.0) -> None:
        """Idempotent: close the browser and the driver, then kill any process left."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            # Hung or crashed: the kill below is what counts.
            with contextlib.suppress(Exception):
                pool.submit(self._close_in_thread).result(timeout=timeout_s)
            pool.shutdown(wait=False, cancel_futures=True)
        self._kill()
