"""The owner lease and the trainer lock across real processes killed with SIGKILL.

A child Python process plays the engine (it holds the lease) or an old trainer (it holds
the trainer lock); the test process plays the trainer that checks. No model involved.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from clawrl_app.engine.core.checkpoints import Manifest, clean_unregistered, write_checkpoint
from clawrl_app.engine.training.lease import OwnerLease, hold_trainer_lock, owner_alive

ENGINE = """
import sys, time
from pathlib import Path
from clawrl_app.engine.core.checkpoints import Manifest, clean_unregistered, write_checkpoint
from clawrl_app.engine.training.lease import OwnerLease
lease = OwnerLease(Path(sys.argv[1]))
print(lease.acquire(), flush=True)
time.sleep(600)
"""
OLD_TRAINER = """
import sys, time
from pathlib import Path
from clawrl_app.engine.core.checkpoints import Manifest, clean_unregistered, write_checkpoint
from clawrl_app.engine.training.lease import hold_trainer_lock
hold_trainer_lock(Path(sys.argv[1]))
print("locked", flush=True)
time.sleep(600)
"""


@contextmanager
def child(code: str, path: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        yield proc, proc.stdout.readline().strip()
    finally:
        proc.kill()
        proc.wait(10)


def test_a_trainer_sees_its_engine_die_or_be_replaced(tmp_path: Path) -> None:
    path = tmp_path / "trainer.lease"
    assert not owner_alive(path, "anything")  # no engine ever ran
    with child(ENGINE, path) as (engine, token):
        assert len(token) == 32
        assert owner_alive(path, token)
        assert not owner_alive(path, "f" * 32)  # a trainer of an earlier engine
        engine.kill()  # kill -9: the kernel drops the lease
        engine.wait(10)
        assert not owner_alive(path, token)
    with child(ENGINE, path) as (_, newer):  # the next start takes the lease over
        assert newer != token
        assert owner_alive(path, newer) and not owner_alive(path, token)


def test_an_engine_does_not_take_a_lease_another_live_engine_holds(tmp_path: Path) -> None:
    path = tmp_path / "trainer.lease"
    with child(ENGINE, path) as (_, token):
        second = OwnerLease(path)
        assert second.acquire(wait_s=0.3) is None
        assert owner_alive(path, token)  # the first engine's trainer is untouched
    mine = OwnerLease(path)
    token = mine.acquire()
    assert token is not None and owner_alive(path, token)
    mine.release()
    assert not owner_alive(path, token)


def test_a_new_trainer_waits_until_the_old_one_is_gone(tmp_path: Path) -> None:
    path = tmp_path / "trainer.lock"
    got = threading.Event()
    fds: list[int] = []

    def new_trainer() -> None:
        fds.append(hold_trainer_lock(path, poll_s=0.05))
        got.set()

    with child(OLD_TRAINER, path) as (old, said):
        assert said == "locked"
        threading.Thread(target=new_trainer, daemon=True).start()
        assert not got.wait(1.0)  # blocked while the old trainer lives
        old.kill()
        assert got.wait(5.0)
    os.close(fds[0])


def test_a_checkpoint_the_store_never_registered_is_removed(tmp_path: Path) -> None:
    """A trainer killed between the folder's rename and the store's registration leaves a
    complete folder nothing can load; the next trainer (holding the lock) removes it."""
    root = tmp_path / "checkpoints"

    def write(step: int, version: str) -> Path:
        manifest = Manifest(version, step, None, "lora", "rl", {}, [], [step])
        return write_checkpoint(
            root, step, "lora", lambda d: (d / "w.bin").write_bytes(b"w"), {}, manifest
        )

    kept, orphan = write(1, "v1"), write(2, "v2")
    (root / "notes").mkdir()  # not a checkpoint: left alone
    assert clean_unregistered(root, [kept]) == [orphan.name]
    assert sorted(p.name for p in root.iterdir()) == [kept.name, "notes"]
    assert write(2, "v2") == orphan  # the next step 2 takes its own name again
