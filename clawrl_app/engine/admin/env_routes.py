"""Admin routes for agentic-environment rollouts (`clawrl-app env train|eval`).

An env rollout talks to the endpoint like any client, with `X-Session-Id` and
`X-Session-Source: env:<name>`, so each of its model turns is recorded with the prompt
ids, sampled ids and behaviour log-probs the endpoint produced. When a rollout group ends,
its client posts the episodes here: the store then gives each recorded turn its sample
(the env's observation as next state, the group-relative advantage as reward) in one
transaction, or records them as not trainable (infrastructure failures, held-out
evaluation). The judge and the collector never see env sessions.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Annotated, Any, Literal, TypeVar

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from clawrl_app.engine.admin.engine_view import EngineView
from clawrl_app.engine.chat.openai_schema import ApiError
from clawrl_app.engine.environments.jobs import EnvJobs, JobRefused, JobRequest
from clawrl_app.engine.serving.request_body import read_json
from clawrl_app.engine.serving.sessions import ENV_NAME
from clawrl_app.engine.store import (
    EpisodeRefused,
    EpisodeRow,
    Store,
    TurnSignal,
)

log = logging.getLogger("clawrl.env_api")
TURNS_WAIT_S = 5.0  # a turn is written just before its answer ends: allow for the race


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


_M = TypeVar("_M", bound=BaseModel)


class TurnIn(_Strict):
    observation: str = Field(max_length=200_000)
    observation_json: Any = None
    reward: float | None = Field(default=None, ge=-1.0, le=1.0)
    step_score: float | None = Field(default=None, ge=-1.0, le=1.0)


class EpisodeIn(_Strict):
    session_id: str = Field(min_length=1, max_length=200)
    status: Literal["completed", "truncated", "failed", "aborted"]
    reason: str = Field(default="", max_length=2000)
    outcome_reward: float | None = Field(default=None, ge=-1.0, le=1.0)
    verdict: dict[str, Any] = Field(default_factory=dict)
    duration_s: float = Field(default=0.0, ge=0.0)
    turns: list[TurnIn] = Field(max_length=1000)


class GroupIn(_Strict):
    env: str = Field(pattern=ENV_NAME.pattern)
    task_id: str = Field(min_length=1, max_length=200)
    group_id: str = Field(min_length=1, max_length=200)
    split: Literal["train", "heldout"] = "train"
    train: bool = True
    episodes: list[EpisodeIn] = Field(min_length=1, max_length=64)


class JobIn(_Strict):
    """A job started from the Environments screen (see `EnvJobs`)."""

    kind: Literal["train", "eval"]
    env: str = Field(pattern=ENV_NAME.pattern)
    steps: int = Field(default=2, ge=1, le=1000)
    split: Literal["train", "heldout"] = "heldout"
    limit: int = Field(default=0, ge=0, le=100_000)
    group_size: int | None = Field(default=None, ge=1, le=64)
    """Episodes per task; empty: `[envs] group_size`."""
    tasks_per_round: int | None = Field(default=None, ge=1, le=64)
    """Tasks per round; empty: `[envs] tasks_per_round`."""
    max_tokens: int | None = Field(default=None, ge=1, le=32_768)
    max_rounds: int = Field(default=50, ge=1, le=100_000)
    seed: int = Field(default=0, ge=0, le=2**31)
    families: list[Annotated[str, Field(min_length=1, max_length=100)]] = Field(
        default_factory=list, max_length=64
    )
    """Only these task families (`GET /admin/env/overview` lists them); empty: all."""


def _validated(model: type[_M], body: Any, what: str) -> _M:
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        msg = first.get("msg")
        raise ApiError(400, f"Invalid {what}: {where}: {msg}.", param=where) from None


def _parse(body: Any) -> GroupIn:
    return _validated(GroupIn, body, "episode group")


def _skip_reason(group: GroupIn, ep: EpisodeIn) -> str:
    if not group.train:
        return f"env {group.split} evaluation: not trained on"
    if ep.status == "aborted" or ep.outcome_reward is None:
        return f"env infrastructure failure: {ep.reason or 'no outcome'}"
    return "no reward for this turn"


def record_one(store: Store, group: GroupIn, ep: EpisodeIn, eligible_at: float) -> dict[str, Any]:
    """Record one episode of `group` (one transaction)."""
    trainable = group.train and ep.status != "aborted" and ep.outcome_reward is not None
    row = EpisodeRow(
        session_id=ep.session_id, env=group.env, task_id=group.task_id,
        group_id=group.group_id, split=group.split, status=ep.status, reason=ep.reason,
        outcome_reward=ep.outcome_reward, verdict=ep.verdict, trained=trainable,
        turns=len(ep.turns), duration_s=ep.duration_s, created=0.0,
    )  # fmt: skip
    signals = [
        TurnSignal(t.observation, t.observation_json, t.reward if trainable else None,
                   t.step_score)
        for t in ep.turns
    ]  # fmt: skip
    ids = store.record_episode(
        row, signals, f"env:{group.env}", eligible_at, _skip_reason(group, ep)
    )
    trained = sum(s.reward is not None for s in signals)
    return {"session_id": ep.session_id, "samples": len(ids), "trainable": trained}


def env_router(engine: EngineView, max_body_bytes: int = 8 * 1024 * 1024) -> APIRouter:
    router = APIRouter(prefix="/admin/env")

    def store() -> Store:
        if engine.store is None:
            raise ApiError(503, "The engine is not started.", type="server_error")
        return engine.store

    @router.post("/episodes")
    async def post_episodes(request: Request) -> dict[str, Any]:
        """Record a rollout group: {env, task_id, group_id, split, train, episodes: [...]}."""
        group = _parse(await read_json(request, max_body_bytes))
        s = store()
        eligible_at = time.time() + engine.settings.review.grace_s
        deadline = time.monotonic() + TURNS_WAIT_S
        recorded = []
        for ep in group.episodes:  # each all or nothing; a refused one stops the rest
            while True:
                try:
                    recorded.append(await asyncio.to_thread(record_one, s, group, ep, eligible_at))
                    break
                except EpisodeRefused as exc:
                    if exc.waiting and time.monotonic() < deadline:
                        await asyncio.sleep(0.1)  # its last turn may be on its way in
                        continue
                    done = f" ({len(recorded)} earlier episodes were recorded)" if recorded else ""
                    raise ApiError(409, f"{exc}{done}.", type="invalid_request_error") from exc
        log.info("recorded %d %s episodes of %s", len(recorded), group.env, group.task_id)
        return {"data": recorded}

    @router.get("/episodes")
    async def get_episodes(env: str | None = None, split: str | None = None) -> dict[str, Any]:
        rows = store().list_episodes(env=env, split=split)
        return {
            "data": [
                {
                    "session_id": r.session_id, "env": r.env, "task_id": r.task_id,
                    "group_id": r.group_id, "split": r.split, "status": r.status,
                    "reason": r.reason, "outcome_reward": r.outcome_reward,
                    "trained": r.trained, "turns": r.turns, "created": r.created,
                }
                for r in rows
            ]
        }  # fmt: skip

    def jobs() -> EnvJobs:
        if engine.env_jobs is None:
            raise ApiError(503, "The engine is not started.", type="server_error")
        return engine.env_jobs

    @router.get("/overview")
    async def get_overview() -> dict[str, Any]:
        """Envs with task families and counts, and whether the sandbox/browser work here."""
        return await asyncio.to_thread(jobs().overview)

    @router.get("/job")
    async def get_job() -> dict[str, Any]:
        """The running or last env job (`job` null when none ran)."""
        return {"job": jobs().status()}

    @router.post("/job")
    async def post_job(request: Request) -> dict[str, Any]:
        """Start an env-training or evaluation job: {kind, env, steps | split, limit, families, ...}."""
        body = _validated(JobIn, await read_json(request, max_body_bytes), "env job")
        try:
            fields = body.model_dump()
            fields["families"] = tuple(fields["families"])
            job = await asyncio.to_thread(jobs().start, JobRequest(**fields))
        except JobRefused as exc:
            raise ApiError(409, f"{exc}.", type="invalid_request_error") from exc
        return {"job": job}

    @router.post("/job/stop")
    async def post_job_stop() -> dict[str, Any]:
        """Stop the running job (episodes in flight are aborted, never trained on)."""
        return {"job": jobs().stop()}

    return router
