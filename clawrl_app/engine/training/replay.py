"""The teacher's answers trained again in later steps (`train.replay_demos`; pure, no torch).

A teacher's answer to a rejected turn (`train_data.demonstration_item`) is the only sample
of a batch that shows what the user asked for; on the embedded model the teacher keeps one
for about one rejected turn in four, and each was trained once, in its own turn's step. The
replay keeps the answers of steps that were taken and puts up to `per_step` of them, the
newest first, into later batches beside the new samples, each at most `uses` more times.
They stay demonstrations (+1, the policy's current log-probs as behaviour), count in the
batch's reward baseline like its own samples, and never make a batch full: only new
samples do; their samples are not marked trained again. Rank 0 holds the replay (it builds
the batches); a restarted trainer starts with an empty one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from clawrl_app.engine.training.train_data import TrainItem

MAX_KEPT = 64
"""Most answers the replay holds (the oldest go first)."""


@dataclass
class DemoReplay:
    """Earlier demonstrations (the newest first) and how many more times each may train."""

    per_step: int
    uses: int
    kept: list[tuple[TrainItem, int]] = field(default_factory=list)

    @property
    def on(self) -> bool:
        return self.per_step > 0 and self.uses > 0

    def pick(
        self, allowed: Callable[[TrainItem], bool], exclude: Iterable[int] = ()
    ) -> list[TrainItem]:
        """Up to `per_step` kept answers, the newest first, that `allowed` lets through and
        whose sample is not in `exclude` (the batch's own), marked `replayed`; nothing is
        used up until `after_step`."""
        if not self.on:
            return []
        own = set(exclude)
        got = [it for it, _ in self.kept if it.sample_id not in own and allowed(it)]
        return [dataclasses.replace(it, replayed=True) for it in got[: self.per_step]]

    def after_step(self, batch: Iterable[TrainItem]) -> None:
        """A step was taken on `batch`: each replayed answer in it has one use fewer (gone
        at none left), and the demonstrations it trained for the first time are kept."""
        if not self.on:
            return
        batch = list(batch)
        again = {it.sample_id for it in batch if it.replayed}
        left = [(it, n - (it.sample_id in again)) for it, n in self.kept]
        fresh = [
            (dataclasses.replace(it, replayed=False), self.uses)
            for it in reversed(batch)
            if it.demonstration and not it.replayed and it.span is None
        ]
        self.kept = (fresh + [(it, n) for it, n in left if n > 0])[:MAX_KEPT]
