"""Staleness is counted in the trainer's own steps, not in version numbers."""

from __future__ import annotations

from pathlib import Path

import pytest

from clawrl_app.engine.store import Store
from clawrl_app.engine.training.train_data import policy_age
from clawrl_app.models import ResolvedModel
from tests.engine.training.rank_fixtures import judged_store
from tests.engine.training.test_no_harm import make_trainer


def test_policy_age_is_the_trainers_steps_past_the_answering_version() -> None:
    steps = {"v1": 1, "v2": 2, "v7": 1, "v9": 3}
    assert policy_age(3, "v9", steps) == 0
    assert policy_age(3, "v1", steps) == 2
    assert policy_age(3, "base", steps) == 3
    assert policy_age(1, "v7", steps) == 0  # v7: a refused version's number, step 1
    assert policy_age(2, "gone", steps) == 2  # an unknown version counts as the base
    assert policy_age(1, "v9", steps) == 0  # a version off the trainer's lineage: never < 0


@pytest.mark.slow
def test_the_bases_answers_stay_fresh_while_the_guard_refuses_versions(
    tmp_path: Path, embedded_model: ResolvedModel
) -> None:
    """The base keeps serving while the guard refuses v1..v9 (the trainer retreated each
    time, so it is at step 1): its answers are one training step old, not nine versions,
    and are trained on. Counted in version numbers they were all skipped as stale
    (max_staleness 8), and the trainer starved for as long as the base served."""
    ids = judged_store(tmp_path / "s.sqlite3", 4, rewards=[-1.0, 1.0, -1.0, 1.0])
    with Store(tmp_path / "s.sqlite3") as store:
        parent = None
        for k in range(1, 10):
            name = f"v{k}"
            path = tmp_path / name
            path.mkdir()
            store.register_checkpoint(name, path, parent, 1 + k % 3, {}, [], [])
            store.set_checkpoint_status(name, "refused")
            parent = name if k % 3 else None
    tr = make_trainer(tmp_path, embedded_model, max_staleness=8)
    tr.step = 1
    assert sorted(it.sample_id for it in tr.next_batch()) == sorted(ids)
    tr.step = 10  # a lineage 10 steps long: the base's answers are stale now
    assert tr.next_batch() == []
    with Store(tmp_path / "s.sqlite3") as store:
        reasons = {s.skip_reason for k in range(4) for s in store.samples_for_session(f"rank-{k}")}
    assert reasons == {"stale: policy base is 10 training steps old (train.max_staleness = 8)"}
