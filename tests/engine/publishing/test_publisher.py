"""Publisher ordering for backends that can only score a version once it is served.

Contract test: SGLang full-weight checkpoints need a GPU, so the backend here is a small
stand-in with that one property (score() refuses a version that is not active); the store,
the checkpoint folders and the publisher are real.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import save_file

from clawrl_app.engine.backends.base import BackendError, BackendInfo
from clawrl_app.engine.core.checkpoints import MANIFEST
from clawrl_app.engine.publishing.publisher import Publisher
from clawrl_app.engine.store import Store
from clawrl_app.engine.wire.admin import checkpoint_rows


class ServedOnlyScoring:
    def __init__(self) -> None:
        self.active = "base"
        self.versions = ["base"]
        self.calls: list[str] = []

    @property
    def active_version(self) -> str:
        return self.active

    def info(self) -> BackendInfo:
        return BackendInfo("m", 8192, (2,), list(self.versions))

    async def load_adapter(self, version: str, path: Path) -> None:
        self.calls.append(f"load {version}")
        self.versions.append(version)

    async def activate(self, version: str) -> None:
        self.calls.append(f"activate {version}")
        self.active = version

    async def unload_adapter(self, version: str) -> None:
        self.calls.append(f"unload {version}")
        self.versions.remove(version)

    async def score(
        self,
        prompt_ids: list[int],
        response_ids: list[int],
        version: str | None = None,
        *,
        urgent: bool = False,
    ) -> list[float]:
        if version != self.active:
            raise BackendError(f"{version} is not served yet")
        return [-0.5] * len(response_ids)


def checkpoint(
    tmp: Path,
    store: Store,
    version: str,
    canary_lp: float,
    parent: str | None = None,
    step: int = 1,
) -> Any:
    d = tmp / version
    d.mkdir()
    manifest = {
        "version": version,
        "step": 1,
        "parent": None,
        "mode": "full",
        "method": "combine",
        "metrics": {},
        "sessions": [],
        "samples": [],
        "canary": [{"prompt_ids": [1, 2], "response_ids": [3, 4], "logprobs": [canary_lp] * 2}],
    }
    (d / MANIFEST).write_text(json.dumps(manifest))
    save_file({"w": np.zeros(4, dtype=np.float32)}, str(d / "model.safetensors"))
    return store.register_checkpoint(version, d, parent, step, {}, [], [])


def test_full_version_is_activated_then_checked(tmp_path: Path) -> None:
    with Store(tmp_path / "s.sqlite3") as store:
        be = ServedOnlyScoring()
        pub = Publisher(store, be)  # type: ignore[arg-type]
        assert asyncio.run(pub.publish(checkpoint(tmp_path, store, "v1", -0.5)))
        assert be.calls == ["load v1", "activate v1"] and be.active == "v1"
        assert store.get_checkpoint("v1").status == "published"  # type: ignore[union-attr]
        (row,) = checkpoint_rows(store, be.active)  # what GET /admin/checkpoints sends
        assert row["served"] and row["published_at"] >= row["created"]


def test_failed_canary_after_activation_restores_the_previous_version(tmp_path: Path) -> None:
    with Store(tmp_path / "s.sqlite3") as store:
        be = ServedOnlyScoring()
        pub = Publisher(store, be)  # type: ignore[arg-type]
        assert not asyncio.run(pub.publish(checkpoint(tmp_path, store, "v1", -0.1)))
        assert be.calls == ["load v1", "activate v1", "activate base", "unload v1"]
        assert be.active == "base" and store.get_checkpoint("v1").status == "refused"  # type: ignore[union-attr]
        assert "canary" in (pub.last_error or "")


def test_a_refused_publish_is_logged_with_its_numbers_and_shown_by_doctor(
    tmp_path: Path, caplog: Any
) -> None:
    """On the H100, QLoRA refusals were visible only as a store event: now the log, the
    event feed (UI) and `clawrl-app doctor` all carry the gap and the tolerance."""
    import logging

    from clawrl_app.engine.collecting.event_log import EventLog
    from clawrl_app.engine.core.events import Event, PublishRefused
    from clawrl_app.paths import app_paths

    paths = app_paths(tmp_path / "home")
    paths.ensure()
    events: list[Event] = []
    with Store(paths.store_file) as store:
        log_events = EventLog(store)
        be = ServedOnlyScoring()
        pub = Publisher(
            store,
            be,  # type: ignore[arg-type]
            tolerance=0.05,
            events=lambda e: (events.append(e), log_events(e)),  # type: ignore[func-returns-value]
        )
        with caplog.at_level(logging.WARNING, logger="clawrl.publisher"):
            assert not asyncio.run(pub.publish(checkpoint(tmp_path, store, "v1", -1.77)))
        log_events.close()
    refused = [e for e in events if isinstance(e, PublishRefused)]
    assert len(refused) == 1 and refused[0].version == "v1"
    assert refused[0].gap == 1.27 and refused[0].tolerance == 0.05  # |-1.77 - -0.5|
    assert any(
        "differ from the trainer's by 1.27 (tolerance 0.05)" in r.message for r in caplog.records
    )

    import subprocess
    import sys

    env = {**__import__("os").environ, "CLAWRL_HOME": str(tmp_path / "home")}
    out = subprocess.run(
        [sys.executable, "-m", "clawrl_app.cli", "doctor", "--no-model"],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "Publishing" in out.stdout and "v1 not published" in out.stdout
    assert "by 1.27 (tolerance 0.05)" in out.stdout


class RefusingGuard:
    """Stand-in for the regression guard (its scoring needs a model): refuses `bad`."""

    def __init__(self, *bad: str) -> None:
        self.bad = set(bad)
        self.last_error: str | None = None

    async def check(self, name: str, served: str, step: int) -> Any:
        from clawrl_app.engine.publishing.guard import GuardVerdict, VersionScores

        ok = name not in self.bad
        return GuardVerdict(
            VersionScores(name, general=0.7 if ok else 0.3, general_n=40),
            VersionScores(served, general=0.6, general_n=40),
            ok,
            [] if ok else ["general score 0.30 < 0.60"],
        )

    def due(self) -> bool:
        return True

    def was_deferred(self, version: str) -> bool:
        return False

    def waiting(self, version: str) -> bool:
        return False

    def forget_deferred(self, keep: Any = lambda v: False) -> list[str]:
        return []

    def status(self) -> dict[str, Any]:
        return {"enabled": True}


class DeferringGuard(RefusingGuard):
    """Stand-in for the guard's deferral (its own test, with the real model, is in
    test_guard_degeneration.py): `defer` are deferred until `prompts` reaches 24 (a
    refusal resting on one answer with too few prompts to confirm it), then pass; `bad`
    are refused; `is_due` False: a candidate is not due (`every`), re-checks always are."""

    def __init__(self, defer: list[str], bad: list[str]) -> None:
        super().__init__(*bad)
        self.defer = set(defer)
        self.deferred: dict[str, int] = {}
        self.prompts = 16
        self.is_due = True
        self.checks: list[str] = []

    async def check(self, name: str, served: str, step: int) -> Any:
        self.checks.append(name)
        verdict = await super().check(name, served, step)
        if name in self.defer and self.prompts < 24:
            self.deferred[name] = 24
            return replace(verdict, passed=False, reasons=["loops on 1 of 16"], deferred_until=24)
        self.deferred.pop(name, None)
        return verdict

    def due(self) -> bool:
        return self.is_due

    def was_deferred(self, version: str) -> bool:
        return version in self.deferred

    def waiting(self, version: str) -> bool:
        return version in self.deferred and self.prompts < self.deferred[version]

    def forget_deferred(self, keep: Any = lambda v: False) -> list[str]:
        gone = sorted(v for v in self.deferred if not keep(v))
        for v in gone:
            del self.deferred[v]
        return gone


def test_a_deferred_check_neither_serves_nor_refuses_and_is_checked_again(
    tmp_path: Path,
) -> None:
    """Contract test (stand-in guard). v2's check is deferred at 16 of the user's prompts:
    v2 stays `ready` and unserved, the refusal run does not grow, and the publisher does
    not pick it again while the prompts are missing (it would re-check it on every pass).
    At 24 prompts it is checked again, though no check is due (`every`), and served.
    Then v4 (on top of v3, refused) is deferred and the trainer goes back after v5 and v6
    are refused (retreat_after 3, v4 not counted): v4, left on the old branch, is refused
    with them and not checked again when the prompts come."""
    with Store(tmp_path / "s.sqlite3") as store:
        be = ServedOnlyScoring()
        guard = DeferringGuard(["v2", "v4"], ["v3", "v5", "v6"])
        restarts: list[str] = []

        async def trainer_restarts(served: str) -> None:
            restarts.append(served)

        pub = Publisher(store, be, guard=guard, on_guard_refused=trainer_restarts,  # type: ignore[arg-type]
                        retreat_after=3)  # fmt: skip

        async def go() -> None:
            assert await pub.publish(lineage(tmp_path, store, "v1", None, 1))
            assert not await pub.publish(lineage(tmp_path, store, "v2", "v1", 2))
            assert (be.active, pub.refused_in_row, pub.newest_ready()) == ("v1", 0, None)
            assert "v2" not in be.versions  # released
            guard.prompts, guard.is_due = 24, False
            nxt = pub.newest_ready()
            assert nxt is not None and nxt.version == "v2"
            assert await pub.publish(nxt)  # checked again (the guard was not due)
            assert be.active == "v2" and guard.checks == ["v1", "v2", "v2"]
            guard.prompts, guard.is_due = 16, True
            assert not await pub.publish(lineage(tmp_path, store, "v3", "v2", 3))
            assert not await pub.publish(lineage(tmp_path, store, "v4", "v3", 4))
            assert pub.refused_in_row == 1 and guard.deferred == {"v4": 24}
            assert not await pub.publish(lineage(tmp_path, store, "v5", "v4", 5))
            assert not await pub.publish(lineage(tmp_path, store, "v6", "v5", 6))
            guard.prompts = 30
            assert pub.newest_ready() is None

        asyncio.run(go())
        assert restarts == ["v2"] and guard.deferred == {}
        status = {r.version: r.status for r in store.list_checkpoints()}
        assert status == {"v1": "published", "v2": "published", "v3": "refused",
                          "v4": "refused", "v5": "refused", "v6": "refused"}  # fmt: skip


def lineage(tmp: Path, store: Store, version: str, parent: str | None, step: int) -> Any:
    return checkpoint(tmp, store, version, -0.5, parent, step)


def guarded(
    store: Store, bad: list[str], retreat_after: int = 1
) -> tuple[Publisher, ServedOnlyScoring, list[str]]:
    """A publisher whose guard refuses `bad`; the list records where the trainer was sent."""
    be = ServedOnlyScoring()
    restarts: list[str] = []

    async def trainer_restarts(served: str) -> None:
        restarts.append(served)

    pub = Publisher(
        store,
        be,  # type: ignore[arg-type]
        guard=RefusingGuard(*bad),  # type: ignore[arg-type]
        on_guard_refused=trainer_restarts,
        retreat_after=retreat_after,
    )
    return pub, be, restarts


def test_checkpoints_built_on_a_guard_refused_version_are_never_published(
    tmp_path: Path,
) -> None:
    """v2 is refused by the guard while the old trainer had already made v3 on top of it;
    the trainer goes back to v1 and makes v4 from there. v3 (a descendant of v1 too, and of
    a higher step than v4) must be refused, so the publisher serves v4 next, and nothing of
    the trainer's new branch is left behind (seen in bench/learn.py: v5 of a refused branch
    was published, then every new checkpoint stayed `ready` forever)."""
    with Store(tmp_path / "s.sqlite3") as store:
        pub, be, restarts = guarded(store, ["v2"])

        async def go() -> Any:
            assert await pub.publish(lineage(tmp_path, store, "v1", None, 1))
            v2 = lineage(tmp_path, store, "v2", "v1", 2)
            lineage(tmp_path, store, "v3", "v2", 3)  # the old branch, before the restart
            assert not await pub.publish(v2)
            lineage(tmp_path, store, "v4", "v1", 2)  # the restarted trainer's first
            nxt = pub.newest_ready()
            assert nxt is not None
            return nxt.version, await pub.publish(nxt)

        assert asyncio.run(go()) == ("v4", True)
        assert restarts == ["v1"]
        status = {r.version: r.status for r in store.list_checkpoints()}
        assert status == {"v1": "published", "v2": "refused", "v3": "refused", "v4": "published"}
        assert be.active == "v4"


def test_the_trainer_goes_on_past_a_refused_version_until_retreat_after_in_a_row(
    tmp_path: Path,
) -> None:
    """retreat_after=3: v1 (a first step that loops, say) is refused and never served, but
    the trainer is not sent back: it trains on from v1, and v2 on top of it passes and is
    served. Later v3 and v4 (descending from v2) and v5 are refused: at the third refusal in
    a row the trainer goes back to v2, and v6, ready on top of v3 (an older step than v5's
    but a descendant of the first refused), is refused with them, never published."""
    with Store(tmp_path / "s.sqlite3") as store:
        pub, be, restarts = guarded(store, ["v1", "v3", "v4", "v5"], retreat_after=3)

        async def go() -> list[bool]:
            done = [await pub.publish(lineage(tmp_path, store, "v1", None, 1))]
            assert (pub.refused_in_row, restarts, be.active) == (1, [], "base")
            done.append(await pub.publish(lineage(tmp_path, store, "v2", "v1", 2)))
            assert pub.refused_in_row == 0 and be.active == "v2"
            done.append(await pub.publish(lineage(tmp_path, store, "v3", "v2", 3)))
            done.append(await pub.publish(lineage(tmp_path, store, "v4", "v3", 4)))
            lineage(tmp_path, store, "v6", "v3", 4)  # another branch on top of v3
            assert restarts == [] and pub.status()["refused_in_row"] == 2
            done.append(await pub.publish(lineage(tmp_path, store, "v5", "v4", 5)))
            return done

        assert asyncio.run(go()) == [False, True, False, False, False]
        assert restarts == ["v2"] and pub.refused_in_row == 0 and be.active == "v2"
        status = {r.version: r.status for r in store.list_checkpoints()}
        assert status == {"v1": "refused", "v2": "published", "v3": "refused",
                          "v4": "refused", "v5": "refused", "v6": "refused"}  # fmt: skip
        assert pub.newest_ready() is None


def test_descendants_follow_parents_and_survive_cycles() -> None:
    from clawrl_app.engine.publishing.publisher import descendants

    class Row:
        def __init__(self, version: str, parent: str | None) -> None:
            self.version, self.parent = version, parent

    rows = [Row("v1", None), Row("v2", "v1"), Row("v3", "v2"), Row("v4", "v1"),
            Row("x", "y"), Row("y", "x")]  # fmt: skip
    assert descendants(rows, "v2") == {"v3"}  # type: ignore[arg-type]
    assert descendants(rows, "v1") == {"v2", "v3", "v4"}  # type: ignore[arg-type]
    assert descendants(rows, "v3") == set()  # type: ignore[arg-type]


def test_a_rollback_is_not_undone_by_checkpoints_the_old_trainer_left_ready(
    tmp_path: Path,
) -> None:
    """Served v2, v3 ready (not yet published); the user rolls back to v1 and the old
    trainer registers v4 on top of v3 while it stops. Both descend from v1, so before the
    fix the next pass published v3 right after the rollback. Now they are refused and the
    restarted trainer's first checkpoint (v5, from v1) is what gets published next."""
    with Store(tmp_path / "s.sqlite3") as store:
        be = ServedOnlyScoring()
        pub = Publisher(store, be)  # type: ignore[arg-type]

        async def old_trainer_stops() -> None:
            lineage(tmp_path, store, "v4", "v3", 4)  # its last step lands during the stop

        async def go() -> Any:
            assert await pub.publish(lineage(tmp_path, store, "v1", None, 1))
            assert await pub.publish(lineage(tmp_path, store, "v2", "v1", 2))
            lineage(tmp_path, store, "v3", "v2", 3)
            assert await pub.roll_back_to("v1", old_trainer_stops) == "v2"
            assert pub.newest_ready() is None  # nothing of the abandoned branch
            lineage(tmp_path, store, "v5", "v1", 2)  # the restarted trainer's first
            nxt = pub.newest_ready()
            return nxt.version if nxt else None

        assert asyncio.run(go()) == "v5"
        status = {r.version: r.status for r in store.list_checkpoints()}
        assert (status["v3"], status["v4"], status["v5"]) == ("refused", "refused", "ready")
        assert be.active == "v1"
