"""The kill part of bench/chaos.py: kill -9 the real app at random moments while a client
chats, rates and the trainer trains; restart it; then check the store and the versions.

Each cycle waits a random time, kills the app's process group with SIGKILL (every other
cycle in `mixed` mode also every descendant, the trainer included: its process group is its
own), starts `clawrl-app serve` again on the same home and port, and notes how long
/readyz took. The trainer left alive by a group kill must notice and exit by itself.
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

from chaos_table import Row

from clawrl_app.paths import app_paths
from tests.reliability.app_process import AppProcess, app_env, free_port
from tests.reliability.chat_client import ChatDriver, DriverLog
from tests.reliability.store_checks import StoreFindings, check_store, version_of

KILL_ENV = {
    "CLAWRL_TRAIN__ENABLED": "true",
    "CLAWRL_TRAIN__BATCH_SIZE": "2",  # a step after every two trainable samples
    "CLAWRL_REVIEW__GRACE_S": "0",  # judged samples are trainable at once
    "CLAWRL_SERVER__DEFAULT_MAX_TOKENS": "16",
    "CLAWRL_JUDGE__BACKEND": "heuristic",
}


def progress(msg: str) -> None:
    print(f"[kill] {msg}", file=sys.stderr, flush=True)


def run_kill(
    model_dir: Path,
    home: Path,
    *,
    cycles: int,
    min_s: float,
    max_s: float,
    mode: str,
    clients: int,
    seed: int,
    ready_timeout_s: float,
    startup_p: float = 0.2,
) -> list[Row]:
    """Run the kill cycles on `home`; returns the table rows (each check with its verdict).

    A cycle kills at a random moment `min_s`..`max_s` after the app is ready, or (with
    probability `startup_p`) at a random moment of its start-up, then starts it again."""
    rng = random.Random(seed)
    port = free_port()
    app = AppProcess(home, app_env(home, model_dir, port, KILL_ENV), port, home / "app.log")
    progress(f"home {home}, port {port}, log {app.log_path}")
    driver: ChatDriver | None = None
    versions: list[str] = []
    clean_stop: int | None = None
    try:
        first = app.start(ready_timeout_s)
        if first.ready_s is None:
            raise RuntimeError(f"the app did not start: {first.error}; see {app.log_path}")
        versions.append(first.version or "?")
        progress(f"ready in {first.ready_s:.1f} s")
        driver = ChatDriver(app.base, clients=clients, turns=3, max_tokens=12, seed=seed).start()
        for c in range(cycles):
            tree = mode == "tree" or (mode == "mixed" and c % 2 == 1)
            wait = rng.uniform(min_s, max_s)
            time.sleep(wait)
            kill = app.kill9(tree)
            if rng.random() < startup_p:  # and once more, somewhere in the next start-up
                app.spawn()
                time.sleep(rng.uniform(0.0, first.ready_s))
                app.kill9(tree, during_start=True)
            start = app.start(ready_timeout_s)
            if start.version is not None:
                versions.append(start.version)
            app.note_survivor_exits()
            progress(
                f"cycle {c + 1}/{cycles}: killed {wait:.1f} s after ready "
                f"({'tree' if tree else 'group'}; {len(kill.survivors)} outlived it"
                f"{'; killed again during start-up' if app.kills[-1].during_start else ''}), "
                + (f"ready in {start.ready_s:.1f} s" if start.ready_s else f"FAILED: {start.error}")
                + f"; {len(driver.log.answered)} answers, {len(driver.log.rated)} ratings so far"
            )
            if start.ready_s is None and not app.running():
                app.start(ready_timeout_s)  # one more try, so the run goes on
        time.sleep(min_s)  # traffic after the last restart too
        driver.stop()
        clean_stop = app.stop()
    finally:
        if driver is not None:
            driver.stop()
        leftovers = app.close()
    paths = app_paths(home)
    log = driver.log if driver is not None else DriverLog()
    versions += [version_of(a.model) for a in log.answered]
    f = check_store(paths.store_file, paths.checkpoints_dir, log.answered, log.rated, versions)
    for problem in f.problems():
        progress(f"PROBLEM: {problem}")
    return kill_rows(app, f, clean_stop, leftovers, log, cycles)


def kill_rows(
    app: AppProcess,
    f: StoreFindings,
    clean_stop: int | None,
    leftovers: list[int],
    log: DriverLog,
    cycles: int,
) -> list[Row]:
    kills = app.kills
    restarts = app.starts[1:]
    failed = [s for s in restarts if s.ready_s is None]
    ready = sorted(s.ready_s for s in restarts if s.ready_s is not None)
    lifetimes = [t for k in app.kills for t in k.survivor_lifetimes_s]
    survivors = sum(len(k.survivors) for k in app.kills)
    errors = dict(log.errors)
    p = "kill"
    return [
        Row(p, "kill -9: cycles / kills (group, tree; of which during start-up)",
            f"{cycles} / {len(kills)} ({sum(not k.tree for k in kills)}, "
            f"{sum(k.tree for k in kills)}; {sum(k.during_start for k in kills)})",
            f"{cycles} cycles", len(kills) >= cycles),
        Row(p, "restarts that failed (no /readyz 200)", str(len(failed)), "0", not failed),
        Row(p, "restart to /readyz 200, median / max",
            f"{ready[len(ready) // 2]:.1f} / {ready[-1]:.1f} s" if ready else "-", "", None),
        Row(p, "answers received in full / not in the store",
            f"{f.answered} / {len(f.missing)}", "- / 0", f.answered > 0 and not f.missing),
        Row(p, "answers recorded with other text", str(len(f.differs)), "0", not f.differs),
        Row(p, "ratings acknowledged / lost",
            f"{f.rated} / {len(f.ratings_missing)}", "- / 0", not f.ratings_missing),
        Row(p, "checkpoints / samples trained", f"{f.checkpoints} / {f.trained_samples}", "", None),
        Row(p, "samples in more than one checkpoint", str(len(f.trained_twice)), "0",
            not f.trained_twice),
        Row(p, "manifest or trained_in disagreeing with the store",
            str(len(f.manifest_mismatch) + len(f.back_pointer_mismatch)), "0",
            not f.manifest_mismatch and not f.back_pointer_mismatch),
        Row(p, "checkpoint folders left half-written / unregistered",
            f"{len(f.temp_dirs)} / {len(f.unregistered_dirs)}", "0 / 0",
            not f.temp_dirs and not f.unregistered_dirs),
        Row(p, "versions served (readyz, answers) never published",
            str(len(set(f.unpublished_served))), "0", not f.unpublished_served),
        Row(p, "versions seen", ", ".join(f.versions_seen) or "-", "", None),
        Row(p, "processes that outlived a group kill / still alive at the end",
            f"{survivors} / {len(leftovers)}", "- / 0", not leftovers),
        Row(p, "longest a survivor lived on", f"{max(lifetimes):.1f} s" if lifetimes else "-",
            "", None),
        Row(p, "client errors by kind (while the app was down)",
            ", ".join(f"{k} {v}" for k, v in sorted(errors.items())) or "0", "", None),
        Row(p, "clean stop at the end (exit code)", str(clean_stop), "0", clean_stop == 0),
    ]  # fmt: skip
