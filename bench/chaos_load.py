"""The load part of bench/chaos.py: `clients` concurrent streaming clients (the `openai`
SDK, multi-turn sessions with feedback and ratings) against the real app for `seconds`,
with the trainer stepping on what they produce.

Reports errors by kind, the app process's RSS (after the first minute, or the first third
of a shorter run, against the end), time to the first token (p50/p99), output tokens/s,
and the training steps and checkpoints of the run; then the same store checks as the kill
part (every answer recorded, no sample trained twice, only published versions served).
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
from pathlib import Path

import psutil
from chaos_kill import KILL_ENV
from chaos_table import Row

from clawrl_app.engine.store import Store
from clawrl_app.paths import app_paths
from tests.reliability.app_process import AppProcess, app_env, free_port
from tests.reliability.chat_client import ChatDriver, DriverLog
from tests.reliability.store_checks import StoreFindings, check_store, version_of

RSS_GOAL = 0.05
WARM_VERSIONS = 3


def progress(msg: str) -> None:
    print(f"[load] {msg}", file=sys.stderr, flush=True)


class RssSampler:
    """RSS of one process (and of the trainer tree beside it) once a second."""

    def __init__(self, app: AppProcess) -> None:
        self.app = app
        self.samples: list[tuple[float, int, int]] = []  # (t, app rss, trainer rss)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss", daemon=True)
        self.wall0 = time.time()

    def start(self) -> RssSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        t0 = time.monotonic()
        self.wall0 = time.time()
        while not self._stop.wait(1.0):
            procs = self.app.processes()
            if not procs:
                continue
            try:
                own = procs[0].memory_info().rss
                others = sum(p.memory_info().rss for p in procs[1:])
            except psutil.Error:
                continue
            self.samples.append((time.monotonic() - t0, own, others))

    def write(self, path: Path) -> None:
        """The samples as a table (seconds, app RSS, trainer RSS in MiB), for a closer look."""
        rows = [f"{t:.0f}\t{a / 2**20:.0f}\t{b / 2**20:.0f}" for t, a, b in self.samples]
        path.write_text("t_s\tapp_mib\ttrainer_mib\n" + "\n".join(rows) + "\n")

    def growth(self, warm_s: float) -> tuple[float, float, float]:
        """(RSS at warm_s, RSS at the end, growth) in MiB; median of 5 samples around each."""
        if not self.samples:
            return 0.0, 0.0, 0.0
        after = [s for s in self.samples if s[0] >= warm_s] or self.samples[-5:]
        first = statistics.median(s[1] for s in after[:5]) / 2**20
        last = statistics.median(s[1] for s in self.samples[-5:]) / 2**20
        return first, last, (last - first) / first


def run_load(
    model_dir: Path,
    home: Path,
    *,
    seconds: float,
    clients: int,
    tokens: int,
    seed: int,
    ready_timeout_s: float,
) -> list[Row]:
    """Drive the app for `seconds`; returns the table rows."""
    port = free_port()
    app = AppProcess(home, app_env(home, model_dir, port, KILL_ENV), port, home / "app.log")
    driver: ChatDriver | None = None
    sampler = RssSampler(app)
    clean_stop: int | None = None
    try:
        start = app.start(ready_timeout_s)
        if start.ready_s is None:
            raise RuntimeError(f"the app did not start: {start.error}; see {app.log_path}")
        progress(f"ready in {start.ready_s:.1f} s at {app.base} (home {home})")
        sampler.start()
        t0 = time.monotonic()
        driver = ChatDriver(
            app.base, clients=clients, turns=3, max_tokens=tokens, stream=True, seed=seed,
            rate_p=0.3, timeout_s=600,
        ).start()  # fmt: skip
        while (left := seconds - (time.monotonic() - t0)) > 0:
            time.sleep(min(30.0, left))
            with Store(app_paths(home).store_file) as store:
                steps = len(store.list_checkpoints())
            progress(
                f"{time.monotonic() - t0:.0f} s: {len(driver.log.answered)} answers, "
                f"{dict(driver.log.errors) or 'no'} errors, {steps} checkpoints"
            )
        log = driver.stop()
        elapsed = time.monotonic() - t0
        sampler.stop()
        clean_stop = app.stop()
    finally:
        if driver is not None:
            driver.stop()
        sampler.stop()
        leftovers = app.close()
    paths = app_paths(home)
    versions = [version_of(a.model) for a in log.answered]
    f = check_store(paths.store_file, paths.checkpoints_dir, log.answered, log.rated, versions)
    for problem in f.problems():
        progress(f"PROBLEM: {problem}")
    with Store(paths.store_file) as store:
        steps = len({m.step for m in store.metrics("loss")})
    with Store(paths.store_file) as store:
        published = sorted(
            r.published_at for r in store.list_checkpoints() if r.published_at is not None
        )
    warm = warm_up_s(seconds, [t - sampler.wall0 for t in published])
    sampler.write(home / "rss.tsv")
    return load_rows(log, elapsed, sampler.growth(warm), warm, steps, f, clean_stop, leftovers)


def warm_up_s(seconds: float, published_s: list[float], versions: int = WARM_VERSIONS) -> float:
    """Where the RSS comparison starts: after the first minute (a third of a shorter run)
    and after the `versions`-th publish, when the copies the plan reserves for versions
    (served, being checked, draining) have all been made once; never past 60% of the run."""
    warm = min(60.0, seconds / 3)
    if len(published_s) >= versions:
        warm = max(warm, published_s[versions - 1] + 5.0)
    return min(warm, 0.6 * seconds)


def load_rows(
    log: DriverLog,
    elapsed: float,
    rss: tuple[float, float, float],
    warm: float,
    steps: int,
    f: StoreFindings,
    clean_stop: int | None,
    leftovers: list[int],
) -> list[Row]:
    p = "load"
    ttft = sorted(t.ttft_s for t in log.timings if t.ttft_s is not None)
    tokens = sum(t.tokens for t in log.timings)
    errors = sum(log.errors.values())
    first, last, growth = rss
    problems = f.problems()

    def pct(q: float) -> str:
        return f"{ttft[min(len(ttft) - 1, int(q * len(ttft)))]:.2f}" if ttft else "-"

    return [
        Row(p, "streamed answers in full", f"{len(log.answered)} in {elapsed:.0f} s"),
        Row(p, "errors by kind", ", ".join(f"{k} {v}" for k, v in sorted(log.errors.items()))
            or "0", "0", errors == 0),
        Row(p, "time to first token, p50 / p99", f"{pct(0.5)} / {pct(0.99)} s"),
        Row(p, "output tokens/s (all clients)", f"{tokens / max(elapsed, 1e-9):.1f}"),
        Row(p, f"app RSS after warm-up ({warm:.0f} s: 1 min, {WARM_VERSIONS} versions) -> end", f"{first:.0f} -> {last:.0f} MiB "
            f"({growth:+.1%})", f"< {RSS_GOAL:.0%}", growth < RSS_GOAL),
        Row(p, "training steps / checkpoints during the run",
            f"{steps} / {f.checkpoints}", "> 0", steps > 0),
        Row(p, "store checks (answers recorded, no double training, published versions)",
            "; ".join(problems) or "all hold", "all hold", not problems),
        Row(p, "clean stop (exit code) / processes left", f"{clean_stop} / {len(leftovers)}",
            "0 / 0", clean_stop == 0 and not leftovers),
    ]  # fmt: skip
