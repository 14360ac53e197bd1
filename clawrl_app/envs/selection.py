"""Keep the best checkpoint of env training by a validation split (issue #27).

Held-out success does not rise monotonically over rounds (the toolcall curriculum went 11/18
after round 4, then 8/18 after round 8, on one seed), so the last checkpoint is not the one
to keep. A few of the train split's tasks per family are set aside (never rolled out for
training) and answered greedily whenever the served version changes; when env training
ends, the engine serves the version that solved most of them, if it beats the served one.
The held-out split stays untouched, so it still measures what was kept.

The validation tasks share templates with the train tasks (the held-out split is the one
split by template and values): they choose among checkpoints, they do not prove transfer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from clawrl_app.envs.base import Task

if TYPE_CHECKING:
    from clawrl_app.envs.engine_client import EngineClient

MIN_TRAIN_SHARE = 0.75
"""A family keeps at least this share of its train tasks for training."""


def validation_split(tasks: Sequence[Task], per_family: int) -> tuple[list[Task], list[Task]]:
    """(train, validation) of train-split `tasks`: per family, up to `per_family` tasks and
    at most a quarter of the family, spread over it (every k-th by id), for validation; the
    rest for training. Deterministic; disjoint; `per_family` 0 keeps all for training."""
    if per_family <= 0:
        return list(tasks), []
    families: dict[str, list[Task]] = {}
    for t in sorted(tasks, key=lambda t: t.id):
        families.setdefault(t.family, []).append(t)
    chosen: set[str] = set()
    for members in families.values():
        n = min(per_family, int(len(members) * (1 - MIN_TRAIN_SHARE)))
        if n <= 0:
            continue
        step = len(members) / n
        chosen.update(members[int(i * step + step / 2)].id for i in range(n))
    return [t for t in tasks if t.id not in chosen], [t for t in tasks if t.id in chosen]


def best_to_keep(scores: Sequence[tuple[str, float]], served: str) -> str | None:
    """The version to serve instead of `served`: the highest-scoring one (the later of
    equals) when it scores strictly more than `served`; None to keep `served` (also when
    `served` was never scored: nothing to compare it with)."""
    by_version = dict(scores)
    if served not in by_version:
        return None
    best, top = max(reversed(scores), key=lambda s: s[1])  # max keeps the first: the later
    return best if top > by_version[served] else None


def served_version(client: EngineClient) -> str:
    return str(client.checkpoints().get("served") or "base")


@dataclass
class Validation:
    """Validation success of each served version, as env training goes."""

    tasks: list[Task]
    scores: list[tuple[str, float]] = field(default_factory=list)
    """(version, share of the validation tasks solved), in the order checked."""

    def check(
        self, client: EngineClient, answer: Callable[[list[Task]], Any]
    ) -> tuple[str, float] | None:
        """Score the served version once: `answer(tasks)` plays one greedy episode per task,
        recorded, never trained (`training.check_validation`), and returns a report with
        `successes` and `episodes`. None when the version was scored before, or when the
        served version changed while the tasks were answered (not all one version's)."""
        if not self.tasks:
            return None
        served = served_version(client)
        if served in dict(self.scores):
            return None
        rep = answer(self.tasks)
        if served_version(client) != served or rep.episodes < len(self.tasks):
            return None
        scored = (served, rep.successes / rep.episodes)
        self.scores.append(scored)
        return scored

    def keep_best(self, client: EngineClient) -> str | None:
        """Serve the best version when it beats the served one (a rollback: the trainer
        goes on from it too); the version now served, or None when nothing changed."""
        target = best_to_keep(self.scores, served_version(client))
        if target is None:
            return None
        client.rollback(target)
        return target

    def line(self) -> str:
        """The scores for a person: "validation (9 tasks): base 0.33, v2 0.56, v4 0.44"."""
        shown = ", ".join(f"{v} {s:.2f}" for v, s in self.scores)
        return f"validation ({len(self.tasks)} tasks): {shown or 'none scored'}"
