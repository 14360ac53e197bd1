"""Rollback target choice (pure) and the served-version file."""

from __future__ import annotations

from pathlib import Path

import pytest

from clawrl_app.engine.publishing.rollback import (
    RollbackError,
    ServedState,
    choose_target,
    lineage_sessions,
    read_served,
    write_served,
)
from clawrl_app.engine.store import CheckpointRow


def ckpt(
    version: str,
    parent: str | None,
    step: int,
    sessions: list[str],
    status: str = "published",
    created: float | None = None,
) -> CheckpointRow:
    return CheckpointRow(
        version=version,
        path=f"/x/{version}",
        parent=parent,
        step=step,
        created=created if created is not None else float(step),
        metrics={},
        sessions=sessions,
        samples=[],
        status=status,
        published_at=None,
        pinned=False,
    )


# v1 <- v2 <- v3 ; after a rollback to v1 a branch v4 (step 2) continues from v1
ROWS = [
    ckpt("v1", None, 1, ["a"]),
    ckpt("v2", "v1", 2, ["b"]),
    ckpt("v3", "v2", 3, ["c"]),
    ckpt("v4", "v1", 2, ["d"], created=10.0),
]


def test_lineage_accumulates_ancestors() -> None:
    lin = lineage_sessions(ROWS)
    assert lin["v3"] == {"a", "b", "c"} and lin["v4"] == {"a", "d"} and lin["v1"] == {"a"}


def test_default_is_the_parent_of_what_is_served() -> None:
    assert choose_target(ROWS, "v3") == "v2"
    assert choose_target(ROWS, "v1") == "base"
    with pytest.raises(RollbackError, match="base"):
        choose_target(ROWS, "base")


def test_default_skips_refused_parents() -> None:
    rows = [
        ckpt("v1", None, 1, []),
        ckpt("v2", "v1", 2, [], status="refused"),
        ckpt("v3", "v2", 3, []),
    ]
    assert choose_target(rows, "v3") == "v1"


def test_before_session_picks_the_newest_clean_lineage() -> None:
    assert choose_target(ROWS, "v3", before_session="c") == "v4"  # v4 (step 2, newest) never saw c
    assert choose_target(ROWS, "v3", before_session="b") == "v4"
    assert (
        choose_target(ROWS, "v3", before_session="a") == "base"
    )  # every checkpoint descends from a
    assert choose_target(ROWS, "v3", before_session="never-trained") == "v3"


def test_explicit_version_roll_forward_and_unknown() -> None:
    assert choose_target(ROWS, "v1", version="v3") == "v3"  # roll forward
    assert choose_target(ROWS, "v3", version="base") == "base"
    with pytest.raises(RollbackError, match="known: base, v1"):
        choose_target(ROWS, "v3", version="v9")
    pruned = [ckpt("v1", None, 1, [], status="pruned")]
    with pytest.raises(RollbackError):
        choose_target(pruned, "base", version="v1")


def test_served_state_round_trip(tmp_path: Path) -> None:
    f = tmp_path / "served.json"
    assert read_served(f) is None
    write_served(f, ServedState("v3", rolled_back=True))
    assert read_served(f) == ServedState("v3", True)
    assert f.stat().st_mode & 0o777 == 0o600
    f.write_text("{garbage")
    assert read_served(f) is None
