"""Keeping the best env-training checkpoint by a validation split: which train tasks are set
aside, and which version is served at the end (pure parts; the engine parts are in
tests/envs/test_env_rollouts_e2e.py and tests/engine/training/test_training.py)."""

from __future__ import annotations

from collections import Counter

from clawrl_app.envs import make_env
from clawrl_app.envs.base import Task
from clawrl_app.envs.selection import Validation, best_to_keep, validation_split
from clawrl_app.envs.training import split_tasks


def _tasks(family: str, n: int) -> list[Task]:
    return [Task(id=f"{family}-{i:03d}", env="toolcall", family=family, instruction="x")
            for i in range(n)]  # fmt: skip


def test_validation_tasks_are_set_aside_per_family_and_never_trained_on() -> None:
    tasks = _tasks("a", 18) + _tasks("b", 5) + _tasks("c", 3)
    train, valid = validation_split(tasks, 3)
    assert Counter(t.family for t in valid) == {"a": 3, "b": 1}  # b: a quarter of 5; c: none
    assert not {t.id for t in train} & {t.id for t in valid}
    assert len(train) + len(valid) == len(tasks)
    assert [t.id for t in valid if t.family == "a"] == ["a-003", "a-009", "a-015"]  # spread
    assert validation_split(list(reversed(tasks)), 3)[1] == sorted(valid, key=lambda t: t.id)[::-1]
    assert validation_split(tasks, 0) == (tasks, [])


def test_the_shipped_toolcall_curriculum_keeps_three_of_eighteen_per_family() -> None:
    families = ("calc_one", "lookup_one", "calc_two")
    train = split_tasks(make_env("toolcall").tasks(), "train", families)
    rest, valid = validation_split(train, 3)
    assert Counter(t.family for t in valid) == dict.fromkeys(families, 3)
    assert len(rest) == 45 and all(t.split == "train" for t in valid)


def test_the_best_version_is_served_only_when_it_beats_the_served_one() -> None:
    scores = [("base", 0.33), ("v2", 0.56), ("v4", 0.44), ("v6", 0.56)]
    assert best_to_keep(scores, "v4") == "v6"  # the later of equals
    assert best_to_keep(scores, "v6") is None and best_to_keep(scores, "v2") is None
    assert best_to_keep([("base", 0.5), ("v1", 0.2)], "v1") == "base"
    assert best_to_keep(scores, "v7") is None  # the served one was never scored
    assert best_to_keep([], "base") is None


def test_the_validation_line_names_each_version_scored() -> None:
    v = Validation(_tasks("a", 9), [("base", 1 / 3), ("v2", 5 / 9)])
    assert v.line() == "validation (9 tasks): base 0.33, v2 0.56"
    assert Validation([]).line() == "validation (0 tasks): none scored"
