"""Terminal UI benchmark on the embedded model (CPU), and the README screenshots.

1. `clawrl-app launch` in a pseudo-terminal (140x40), model already converted: seconds from
   the command to a usable UI (the loading screen is drawn and takes keys), to a ready
   endpoint (GET /readyz answers 200) and to the dashboard; then ctrl+q and the seconds
   until the process exits, checking that no trainer process is left behind.
2. UI responsiveness while the engine answers and trains: the real app (Textual, headless)
   on an in-process engine with the trainer on (batch 2). A probe in the UI's event loop
   asks for a 50 ms timer again and again; the lag (how late it fires) is the time the UI
   could not draw or react. Lags are split by what the engine was doing: nothing, answering
   a chat request, or running a training step (StepStarted -> StepFinished events).
3. Screenshots (`docs/screenshots/*.svg`) of the dashboard and of a session, rendered by
   Textual from that same app after training.

Run: `CLAWRL_HOME=<home with the converted model> .venv/bin/python bench/tui.py`
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import os
import select
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from clawrl_app.config import load_settings  # noqa: E402
from clawrl_app.engine.core.events import StepFinished, StepStarted  # noqa: E402
from clawrl_app.engine.engine_thread import EngineThread  # noqa: E402
from clawrl_app.models import resolve_model  # noqa: E402
from clawrl_app.paths import app_paths  # noqa: E402

COLS, ROWS = 140, 40
REPLIES = ("No, that's wrong. Try again, shorter.", "Thanks, that's right!")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- 1. launch in a pseudo-terminal --------------------------------------------------------


class PtyReader(threading.Thread):
    """Collects everything the program draws; notes when a text first appears."""

    def __init__(self, fd: int, marks: dict[str, str]) -> None:
        super().__init__(daemon=True)
        self.fd = fd
        self.marks = marks  # name -> text to look for
        self.seen: dict[str, float] = {}
        self.buffer = b""
        self.closed = False

    def run(self) -> None:
        while True:
            try:
                ready, _, _ = select.select([self.fd], [], [], 0.05)
                if not ready:
                    continue
                chunk = os.read(self.fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            self.buffer = (self.buffer + chunk)[-200_000:]
            now = time.monotonic()
            for name, text in self.marks.items():
                if name not in self.seen and text.encode() in self.buffer:
                    self.seen[name] = now
        self.closed = True


def launch_once(model_dir: Path, timeout_s: float) -> dict[str, Any]:
    home = tempfile.mkdtemp(prefix="clawrl-bench-tui-")
    port = free_port()
    env = {
        **os.environ,
        "CLAWRL_HOME": home,
        "CLAWRL_MODEL__PATH": str(model_dir),
        "CLAWRL_SERVER__PORT": str(port),
        "TERM": "xterm-256color",
        "COLUMNS": str(COLS),
        "LINES": str(ROWS),
    }
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLS, 0, 0))
    exe = Path(sys.executable).with_name("clawrl-app")
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [str(exe), "launch"],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env,
        start_new_session=True,
        close_fds=True,
    )
    os.close(slave)
    reader = PtyReader(master, {"ui": "Starting the engine", "dashboard": "samples pending"})
    reader.start()
    ready_at = None
    url = f"http://127.0.0.1:{port}"
    with httpx.Client(timeout=2) as c:
        while time.monotonic() - t0 < timeout_s and proc.poll() is None:
            try:
                if c.get(f"{url}/readyz").status_code == 200:
                    ready_at = time.monotonic()
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
    deadline = time.monotonic() + 60
    while "dashboard" not in reader.seen and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(2.0)  # let the trainer process start, as a user would before quitting
    children = [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
    q0 = time.monotonic()
    os.write(master, b"\x11")  # ctrl+q
    try:
        rc = proc.wait(60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        rc = proc.wait()
    quit_s = time.monotonic() - q0
    time.sleep(0.5)
    orphans = [pid for pid in children if psutil.pid_exists(pid)]
    os.close(master)

    def since(t: float | None) -> float | None:
        return None if t is None else t - t0

    return {
        "usable_ui_s": since(reader.seen.get("ui")),
        "ready_endpoint_s": since(ready_at),
        "dashboard_s": since(reader.seen.get("dashboard")),
        "quit_s": quit_s,
        "exit_code": rc,
        "children_before_quit": len(children),
        "orphans": orphans,
    }


# --- 2. responsiveness, 3. screenshots ------------------------------------------------------


class Activity:
    """What the engine was doing, over time: chat requests and training steps."""

    def __init__(self) -> None:
        self.steps: list[tuple[float, float]] = []
        self.chats: list[tuple[float, float]] = []
        self._step_open: float | None = None

    def on_event(self, ev: Any) -> None:
        if isinstance(ev, StepStarted):
            self._step_open = time.monotonic()
        elif isinstance(ev, StepFinished) and self._step_open is not None:
            self.steps.append((self._step_open, time.monotonic()))
            self._step_open = None

    @staticmethod
    def _inside(spans: list[tuple[float, float]], t0: float, t1: float) -> bool:
        return any(a < t1 and t0 < b for a, b in spans)

    def label(self, t0: float, t1: float) -> str:
        if self._inside(self.steps, t0, t1):
            return "training step"
        if self._inside(self.chats, t0, t1):
            return "answering"
        return "idle"


def converse(url: str, n: int, tag: str, activity: Activity) -> None:
    """Two-reply conversations (corrected, then thanked): 2 judged samples each."""
    with httpx.Client(timeout=300) as c:
        for k in range(n):
            msgs: list[dict[str, Any]] = [
                {"role": "user", "content": f"Tell me one fact about topic {k} ({tag})."}
            ]
            for i in range(3):
                headers = {"X-Session-Id": f"{tag}-{k}"}
                if i == 2:
                    headers["X-Session-Done"] = "1"
                t0 = time.monotonic()
                r = c.post(
                    f"{url}/chat/completions",
                    headers=headers,
                    json={"model": "clawrl", "messages": msgs, "max_tokens": 24},
                )
                activity.chats.append((t0, time.monotonic()))
                r.raise_for_status()
                answer = r.json()["choices"][0]["message"]["content"]
                if i < 2:
                    msgs = [
                        *msgs,
                        {"role": "assistant", "content": answer},
                        {"role": "user", "content": REPLIES[i]},
                    ]
                time.sleep(0.5)


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


async def drive_ui(et: EngineThread, activity: Activity, args: argparse.Namespace) -> Any:
    from clawrl_app.tui.app import ClawrlApp
    from clawrl_app.tui.client import LocalClient
    from clawrl_app.tui.screens.sessions import SessionsScreen

    app = ClawrlApp(LocalClient(et), capture_logs=False)
    lags: list[tuple[float, float, float]] = []  # (start, end, lag)
    stop = asyncio.Event()

    async def probe() -> None:
        while not stop.is_set():
            t0 = time.monotonic()
            await asyncio.sleep(0.05)
            t1 = time.monotonic()
            lags.append((t0, t1, t1 - t0 - 0.05))

    async with app.run_test(size=(COLS, ROWS)) as pilot:
        task = asyncio.create_task(probe())
        talk = threading.Thread(
            target=converse, args=(et.url, args.sessions, "tui", activity), daemon=True
        )
        talk.start()
        store = et.engine.store
        t_end = time.monotonic() + args.timeout
        want = args.sessions  # batch 2, two samples per session: one step per session
        while time.monotonic() < t_end:
            await pilot.pause(0.5)
            done = [c for c in store.list_checkpoints() if c.status == "published"]
            if not talk.is_alive() and len(done) >= want:
                break
        await pilot.pause(3.0)  # the dashboard refreshes its curves
        stop.set()
        await task
        out_dir = ROOT / "docs" / "screenshots"
        out_dir.mkdir(parents=True, exist_ok=True)
        app.save_screenshot("dashboard.svg", str(out_dir))
        await pilot.press("2")
        screen = app.screen
        assert isinstance(screen, SessionsScreen)
        await pilot.pause(2.0)
        await pilot.press("down")
        await pilot.pause(2.0)
        app.save_screenshot("session.svg", str(out_dir))
    return lags


def responsiveness(model_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    env = {
        "CLAWRL_MODEL__PATH": str(model_dir),
        "CLAWRL_SERVER__PORT": "0",
        "CLAWRL_TRAIN__BATCH_SIZE": "2",
        "CLAWRL_REVIEW__GRACE_S": "0",
    }
    activity = Activity()
    home = tempfile.mkdtemp(prefix="clawrl-bench-tui-ui-")
    et = EngineThread(
        load_settings(env=env).settings, app_paths(home), events=activity.on_event
    ).start()
    try:
        lags = asyncio.run(drive_ui(et, activity, args))
    finally:
        et.stop()
    groups: dict[str, list[float]] = {"idle": [], "answering": [], "training step": []}
    for t0, t1, lag in lags:
        groups[activity.label(t0, t1)].append(lag * 1000)
    return {
        "steps": len(activity.steps),
        "groups": {
            k: {
                "n": len(v),
                "p50": statistics.median(v) if v else None,
                "p95": pct(v, 0.95) if v else None,
                "max": max(v) if v else None,
            }
            for k, v in groups.items()
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--launches", type=int, default=3, help="timed `clawrl-app launch` runs")
    ap.add_argument("--sessions", type=int, default=3, help="conversations (one step each)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds for the UI part")
    ap.add_argument("--skip-launch", action="store_true", help="only the in-process part")
    args = ap.parse_args()
    model = resolve_model(None, app_paths())
    launches = []
    if not args.skip_launch:
        for i in range(args.launches):
            r = launch_once(model.path, 300)
            launches.append(r)
            print(f"launch {i + 1}/{args.launches}: {r}", flush=True)
    ui = responsiveness(model.path, args)
    print(f"responsiveness: {ui}", flush=True)

    print("\n| measure | median | runs |")
    print("|---|---|---|")
    for key, label in (
        ("usable_ui_s", "`clawrl-app launch` -> usable UI (loading screen drawn)"),
        ("ready_endpoint_s", "`clawrl-app launch` -> endpoint ready (/readyz 200)"),
        ("dashboard_s", "`clawrl-app launch` -> dashboard shown"),
        ("quit_s", "ctrl+q -> process exited (engine and trainer stopped)"),
    ):
        vals = [r[key] for r in launches if r[key] is not None]
        if vals:
            runs = ", ".join(f"{v:.2f}" for v in vals)
            print(f"| {label} | {statistics.median(vals):.2f} s | {runs} |")
    if launches:
        orphans = sum(len(r["orphans"]) for r in launches)
        print(f"| processes left after quitting | {orphans} | |")
    print(f"\nUI event-loop lag (50 ms timer), {ui['steps']} training steps:\n")
    print("| engine doing | samples | p50 | p95 | max |")
    print("|---|---|---|---|---|")
    for k, g in ui["groups"].items():
        if g["n"]:
            print(f"| {k} | {g['n']} | {g['p50']:.1f} ms | {g['p95']:.1f} ms | {g['max']:.1f} ms |")


if __name__ == "__main__":
    main()
