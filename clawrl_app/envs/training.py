"""Env training and evaluation against a running engine (`clawrl-app env train|eval`).

Training: rounds of rollout groups on train-split tasks (n episodes per task at
temperature 1, through the endpoint), each group's advantages from `rewards.turn_advantages`
(outcome + step-judge scores), posted to the engine, which records them as samples; the
engine's trainer then learns from them with the same losses, checkpoints, publishing,
review and rollback as conversations. It goes on until the trainer has made `steps` new
checkpoints. Evaluation: each task of a split once, greedy, recorded but never trained.

Each round reports the share of its groups with any variance (some advantage not 0): a
group whose episodes all scored the same teaches nothing. When no group of the first
`NO_SIGNAL_ROUNDS` rounds had any, training stops with `NoSignal` (NO_SIGNAL) instead of
rolling out for a trainer that has nothing to learn from.
"""

from __future__ import annotations

import functools
import random
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from clawrl_app.envs import make_env
from clawrl_app.envs.base import Episode, Task, TurnRecord
from clawrl_app.envs.endpoint_policy import EndpointPolicy
from clawrl_app.envs.engine_client import EngineClient
from clawrl_app.envs.recording import group_payload
from clawrl_app.envs.selection import Validation, validation_split

NO_SIGNAL = "every group scored the same: this model gets no signal from this env"
NO_SIGNAL_ROUNDS = 5
"""Rounds without any varied group after which `train_env` gives up (NoSignal)."""


class NoSignal(RuntimeError):
    """Training found no group with any variance: nothing for the trainer to learn from."""


@dataclass
class RolloutSettings:
    group_size: int = 8  # the app's defaults: `EnvsSettings` (config.py)
    tasks_per_round: int = 6
    temperature: float = 1.0
    max_tokens: int | None = 256  # None: the endpoint's default
    concurrency: int = 2
    judge: str = "none"  # "heuristic" (per-turn scores) or "none" (outcome only)
    reward_mode: str = "step"  # "sequence" or "step" (ENVS.md §5.4)
    prm_coef: float = 0.5
    seed: int = 0
    max_steps: int | None = None  # None: each task's own limit
    env_settings: dict[str, Any] = field(default_factory=dict)
    families: tuple[str, ...] = ()  # only these task families (empty: all)
    validation_per_family: int = 0  # train tasks set aside to pick the best version (selection.py)


def _never() -> bool:
    return False


@dataclass
class RolloutHooks:
    """What a rollout job reports as it goes, and how it is stopped (the Environments
    screen's job). Called from the rollout threads; all optional."""

    on_turn: Callable[[Task, str, TurnRecord], None] | None = None
    """(task, session id, turn) after each model turn."""
    on_episode: Callable[[Task, Episode], None] | None = None
    """(task, episode) when an episode has ended and been verified."""
    should_stop: Callable[[], bool] = _never
    """Checked before each rollout group and round: True ends the job there."""


NO_HOOKS = RolloutHooks()


def _bind(hook: Callable[..., None] | None, task: Task) -> Callable[..., None] | None:
    """`hook` with the task as its first argument (None stays None)."""
    return None if hook is None else functools.partial(hook, task)


@dataclass
class RoundReport:
    episodes: int = 0
    successes: int = 0
    aborted: int = 0
    samples: int = 0
    trainable: int = 0
    signal: int = 0  # samples whose advantage is not 0 (what the trainer can learn from)
    boxed: int = 0  # episodes whose final answer was in the asked form (toolcall)
    groups: int = 0  # rollout groups (training rounds only)
    varied: int = 0  # groups with any variance: some advantage not 0
    outcome_varied: int = 0  # of those, groups whose outcomes differ (some solved, some not)
    checkpoints: int = 0
    seconds: float = 0.0
    validated: tuple[str, float] | None = None  # (version, validation success) after the round
    kept: str | None = None  # the version served at the end instead of the last (totals)

    def add(self, other: RoundReport) -> None:
        names = ("episodes", "successes", "aborted", "samples", "trainable", "signal", "boxed",
                 "groups", "varied", "outcome_varied")  # fmt: skip
        for name in names:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    @property
    def varied_share(self) -> float | None:
        """Share of the groups with any variance (None: no training group)."""
        return self.varied / self.groups if self.groups else None


def group_varied(advantages: Sequence[Sequence[float] | None]) -> bool:
    """Whether a group's advantages carry any signal (one value not 0)."""
    return any(a != 0 for adv in advantages if adv for a in adv)


def split_tasks(tasks: list[Task], split: str, families: tuple[str, ...] = ()) -> list[Task]:
    """The tasks of `split` (of `families` when given)."""
    chosen = [t for t in tasks if t.split == split and (not families or t.family in families)]
    if not chosen:
        known = ", ".join(sorted({t.family for t in tasks}))
        wanted = f" of families {', '.join(families)}" if families else ""
        raise ValueError(f"no {split} tasks{wanted} in this env's packs (families: {known})")
    return chosen


def _judge(kind: str) -> Any:
    if kind == "none":
        return None
    from clawrl_app.envs.judge import HeuristicJudge

    return HeuristicJudge()


def _success(ep: Episode) -> bool:
    return ep.verdict is not None and ep.verdict.success and ep.trainable


def outcomes_differ(group: Sequence[Episode]) -> bool:
    """Whether some trainable episodes of a group solved the task and some did not (a group
    whose episodes all failed can still vary by the step judge's scores alone)."""
    return len({_success(ep) for ep in group if ep.trainable}) > 1


def run_round(
    env_name: str,
    tasks: list[Task],
    client: EngineClient,
    policy_for: Callable[[int], EndpointPolicy],
    cfg: RolloutSettings,
    *,
    train: bool = True,
    round_index: int = 0,
    hooks: RolloutHooks = NO_HOOKS,
) -> RoundReport:
    """One rollout group per task, recorded by the engine (stops early when
    `hooks.should_stop()`)."""
    from clawrl_app.envs.rewards import turn_advantages
    from clawrl_app.envs.runner import EpisodeLimits, run_group

    report = RoundReport()
    t0 = time.monotonic()
    judge = _judge(cfg.judge) if train else None
    n = cfg.group_size if train else 1
    for k, task in enumerate(tasks):
        if hooks.should_stop():
            break
        seed = cfg.seed * 1_000_003 + round_index * 1009 + k
        group = run_group(
            lambda: make_env(env_name, **cfg.env_settings), task, policy_for(seed), n=n,
            concurrency=cfg.concurrency, judge=judge, seed=seed,
            session_prefix=f"env-{env_name}", limits=EpisodeLimits(max_steps=cfg.max_steps),
            on_turn=_bind(hooks.on_turn, task), on_episode=_bind(hooks.on_episode, task),
        )  # fmt: skip
        advantages = (
            turn_advantages(group, mode=cfg.reward_mode, coef=cfg.prm_coef)
            if train
            else [None] * len(group)
        )
        recorded = client.record_group(
            group_payload(task, f"g-{uuid.uuid4().hex[:12]}", group, advantages, train=train)
        )
        report.episodes += len(group)
        report.successes += sum(_success(ep) for ep in group)
        report.aborted += sum(not ep.trainable for ep in group)
        report.samples += sum(r["samples"] for r in recorded)
        report.signal += sum(1 for adv in advantages if adv for a in adv if a != 0)
        if train:
            report.groups += 1
            report.varied += group_varied(advantages)
            # the rest differ by the step judge's scores only: they teach a call's form
            report.outcome_varied += outcomes_differ(group)
        report.boxed += sum(bool(ep.verdict and ep.verdict.details.get("boxed")) for ep in group)
        report.trainable += sum(r["trainable"] for r in recorded)
    report.seconds = time.monotonic() - t0
    return report


def checkpoint_count(client: EngineClient) -> int:
    return len(client.checkpoints().get("data", []))


DECIDED = ("published", "refused", "pruned")
DECIDE_WAIT_S = 180.0
"""Longest wait at the end of env training for the last checkpoint to be published or
refused before the versions are compared (a checkpoint held for review stays "ready")."""


def wait_decided(client: EngineClient, wait_s: float, poll_s: float = 2.0) -> bool:
    """Wait up to `wait_s` until the newest checkpoint is published or refused (the
    publisher decides a moment after the trainer saves); whether it was."""
    deadline = time.monotonic() + wait_s
    while True:
        rows = client.checkpoints().get("data", [])
        if not rows or rows[0].get("status") in DECIDED:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll_s)


def train_env(
    env_name: str,
    client: EngineClient,
    policy_for: Callable[[int], EndpointPolicy],
    steps: int,
    cfg: RolloutSettings,
    *,
    on_round: Callable[[int, RoundReport, int], None] | None = None,
    max_rounds: int = 1000,
    wait_s: float = 600.0,
    hooks: RolloutHooks = NO_HOOKS,
    greedy_for: Callable[[int], EndpointPolicy] | None = None,
) -> RoundReport:
    """Roll out until the engine's trainer has made `steps` new checkpoints; returns the
    totals (`checkpoints` = new ones). Stops with RuntimeError when the trainer makes no
    checkpoint within `wait_s` of rollouts that gave it trainable samples.

    With `cfg.validation_per_family` and `greedy_for` (a temperature-0 policy), that many
    train tasks per family are never rolled out but answered by each served version; at
    the end the best of them is served if it beats the last (`selection.Validation`)."""
    env = make_env(env_name, **cfg.env_settings)
    per_family = cfg.validation_per_family if greedy_for is not None else 0
    tasks, held = validation_split(split_tasks(env.tasks(), "train", cfg.families), per_family)
    validation = Validation(held)
    quiet = RolloutHooks(should_stop=hooks.should_stop)  # not the round's episodes
    if greedy_for is not None:
        check_validation(validation, env_name, client, greedy_for, cfg, quiet)
    rng = random.Random(cfg.seed)
    start = checkpoint_count(client)
    total = RoundReport()
    last_progress = time.monotonic()
    made = 0
    for r in range(max_rounds):
        batch = rng.sample(tasks, min(cfg.tasks_per_round, len(tasks)))
        rep = run_round(env_name, batch, client, policy_for, cfg, round_index=r, hooks=hooks)
        total.add(rep)
        now_made = checkpoint_count(client) - start
        if now_made > made:
            made, last_progress = now_made, time.monotonic()
        if greedy_for is not None:
            rep.validated = check_validation(validation, env_name, client, greedy_for, cfg, quiet)
        if on_round is not None:
            on_round(r, rep, made)
        if made >= steps or hooks.should_stop():
            break
        if r + 1 >= NO_SIGNAL_ROUNDS and not total.varied:
            raise NoSignal(
                f"{NO_SIGNAL} ({total.groups} groups in {r + 1} rounds, {total.successes} of "
                f"{total.episodes} episodes solved). Try an easier task family, a larger "
                "--group-size, or a model that calls tools."
            )
        if time.monotonic() - last_progress > wait_s and total.signal:
            raise RuntimeError(
                f"the trainer made no checkpoint in {wait_s:.0f} s although "
                f"{total.signal} samples with a signal were recorded: is training enabled "
                "(train.enabled) and the review mode auto? See `clawrl-app doctor`."
            )
    total.checkpoints = made
    if greedy_for is not None and validation.tasks and not hooks.should_stop():
        wait_decided(client, min(wait_s, DECIDE_WAIT_S))  # the last checkpoint scored too
        check_validation(validation, env_name, client, greedy_for, cfg, quiet)
        total.kept = validation.keep_best(client)
    return total


def check_validation(
    validation: Validation,
    env_name: str,
    client: EngineClient,
    greedy_for: Callable[[int], EndpointPolicy],
    cfg: RolloutSettings,
    hooks: RolloutHooks = NO_HOOKS,
) -> tuple[str, float] | None:
    """`validation.check` with its tasks played greedily once each (recorded, not trained)."""
    return validation.check(
        client,
        lambda tasks: run_round(env_name, tasks, client, greedy_for, cfg, train=False, hooks=hooks),
    )


def evaluate_env(
    env_name: str,
    client: EngineClient,
    policy_for: Callable[[int], EndpointPolicy],
    cfg: RolloutSettings,
    split: str = "heldout",
    limit: int = 0,
    hooks: RolloutHooks = NO_HOOKS,
) -> tuple[float, RoundReport]:
    """Success rate of one greedy episode per task of `split` (recorded, never trained)."""
    env = make_env(env_name, **cfg.env_settings)
    tasks = split_tasks(env.tasks(), split, cfg.families)
    if limit:
        tasks = tasks[:limit]
    rep = run_round(env_name, tasks, client, policy_for, cfg, train=False, hooks=hooks)
    return (rep.successes / rep.episodes if rep.episodes else 0.0), rep
