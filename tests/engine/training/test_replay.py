"""The teacher's answers of earlier steps trained again (`train.replay_demos`, issue #29).

The pure rules of `replay.py` (newest first, `per_step` at a time, `uses` each, never the
batch's own sample, never an excluded session), then the real trainer on a real SQLite
store and the embedded model: a batch of rejections only, which has no contrast and is
skipped without the replay, trains beside the earlier step's teacher answer; that sample is
not marked trained again, its session is named in the new version, and it is gone once
used up.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from clawrl_app.engine.store import Store
from clawrl_app.engine.training.replay import MAX_KEPT, DemoReplay
from clawrl_app.engine.training.train_data import TrainItem
from clawrl_app.models import ResolvedModel
from tests.engine.training.rank_fixtures import judged_store
from tests.engine.training.test_no_harm import make_trainer


def demo(k: int, session: str = "s") -> TrainItem:
    return TrainItem(k, session, [1, 2], [3, 2], [], 1.0, 1.0, True, None, "base",
                     demonstration=True)  # fmt: skip


def own(k: int) -> TrainItem:
    return TrainItem(k, "s", [1, 2], [4, 5], [-1.0, -1.0], 1.0, -1.0, True, None, "base")


def every(_: TrainItem) -> bool:
    return True


def test_answers_come_back_newest_first_a_few_per_step_until_used_up() -> None:
    r = DemoReplay(per_step=2, uses=2)
    assert r.pick(every) == []
    r.after_step([own(1), demo(1), own(2), demo(2), own(3), demo(3)])
    picked = r.pick(every)
    assert [it.sample_id for it in picked] == [3, 2] and all(it.replayed for it in picked)
    assert r.pick(every) == picked  # nothing is used up before a step is taken
    r.after_step([own(4), *picked])
    assert [(it.sample_id, n) for it, n in r.kept] == [(3, 1), (2, 1), (1, 2)]
    r.after_step([own(5), *r.pick(every)])
    assert [(it.sample_id, n) for it, n in r.kept] == [(1, 2)]
    r.after_step([own(6), demo(6), *r.pick(every)])  # a new one goes first
    assert [(it.sample_id, n) for it, n in r.kept] == [(6, 2), (1, 1)]
    assert not any(it.replayed for it, _ in r.kept)


def test_never_the_batch_own_sample_an_excluded_session_a_stop_pair_or_when_off() -> None:
    r = DemoReplay(per_step=4, uses=1)
    cut = dataclasses.replace(demo(9), span=(1, 2), centred=True)  # a stop pair's half
    r.after_step([demo(1, "gone"), demo(2), cut])
    assert [it.sample_id for it in r.pick(every)] == [2, 1]
    assert [it.sample_id for it in r.pick(every, exclude=[2])] == [1]
    assert [it.sample_id for it in r.pick(lambda it: it.session_id != "gone")] == [2]
    off = DemoReplay(per_step=0, uses=2)
    off.after_step([demo(1)])
    assert off.pick(every) == [] and off.kept == []
    many = DemoReplay(per_step=1, uses=1)
    many.after_step([demo(k) for k in range(MAX_KEPT + 5)])
    assert len(many.kept) == MAX_KEPT and many.kept[0][0].sample_id == MAX_KEPT + 4


@pytest.mark.slow
def test_a_batch_of_rejections_trains_beside_an_earlier_teacher_answer(
    tmp_path: Path, embedded_model: ResolvedModel
) -> None:
    store_path = tmp_path / "s.sqlite3"
    ids = judged_store(store_path, 8, rewards=[-1.0] * 8, teacher_every=0)
    with Store(store_path) as store:
        store.set_teacher_answer(ids[0], [300, 301, 2])
        for k in ids[4:]:
            store.set_sample_state(k, "skipped", "held back by the test")
    tr = make_trainer(tmp_path, embedded_model, replay_demos=2, replay_uses=1, max_steps=1,
                      poll_s=0.01)  # fmt: skip
    tr.run()  # step 1: four rejections and the teacher's answer to the first
    assert tr.step == 1 and [it.sample_id for it, _ in tr.replay.kept] == [ids[0]]
    with Store(store_path) as store:
        for k in ids[4:]:
            store.set_sample_state(k, "judged")
    verdict, items = tr.decide()
    assert verdict == "train" and len(items) == 5
    assert [it.sample_id for it in items if it.replayed] == [ids[0]]
    assert tr.carries_contrast(items)
    assert not tr.carries_contrast([it for it in items if not it.replayed])  # skipped without
    tr.cfg = dataclasses.replace(tr.cfg, max_steps=2)
    tr.run()
    assert tr.step == 2 and tr.replay.kept == []  # used up (replay_uses 1)
    with Store(store_path) as store:
        v1, v2 = store.list_checkpoints()
        assert v2.metrics["samples/replayed"] == 1.0
        assert sorted(v2.samples) == sorted(ids[4:]) and "rank-0" in v2.sessions
        first = store.get_sample(ids[0])
        assert first is not None and first.trained_in == v1.version
