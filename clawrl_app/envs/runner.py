"""The episode runner (ENVS.md §5.3): policy -> actions -> env -> next state, turn by turn.

`run_episode` builds the messages (the env's system prompt, the task as the user's
message), calls the policy, parses its actions, runs them, and feeds the observations back
(`tool` messages for OpenAI tool calls, one user message of `<tool_response>` blocks for
calls written as text). It stops when the policy finishes (a `done` step, or a reply
without a tool call), at the step limit or the episode deadline (TRUNCATED), after
`max_parse_errors` unreadable replies (FAILED), or when the policy or the sandbox fails
(ABORTED: an infrastructure failure, never trained on). Each model turn is recorded with
exactly the messages it was sent. Then the verifier runs once (not for ABORTED episodes),
and the env is always closed.
"""

from __future__ import annotations

import copy
import json
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from clawrl_app.envs.base import (
    Env,
    Episode,
    EpisodeStatus,
    Observation,
    Policy,
    PolicyReply,
    Task,
    TurnRecord,
    Verdict,
)
from clawrl_app.envs.judge import StepJudge
from clawrl_app.envs.parsing import ParseResult, parse_reply
from clawrl_app.envs.sandbox.base import SandboxError


@dataclass(frozen=True)
class EpisodeLimits:
    max_steps: int | None = None  # None: the task's own
    max_parse_errors: int = 3
    deadline_s: float = 300.0
    context_chars: int = 24_000  # about 6k tokens at ~4 characters per token
    head_share: float = 0.3  # of the turns kept when the context is cut: 30% head, 70% tail


class _Abort(Exception):
    """An infrastructure failure: the episode ends ABORTED with this reason."""


def _size(messages: list[dict[str, Any]]) -> int:
    return sum(len(json.dumps(m, ensure_ascii=False)) for m in messages)


def fit_context(
    messages: list[dict[str, Any]], budget: int, head_share: float = 0.3
) -> list[dict[str, Any]] | None:
    """`messages` within `budget` characters: the system prompt and the task stay, whole
    turns (an assistant message and the results after it) are dropped from the middle
    (keeping ~30% of the turns at the head, the rest at the tail) with a marker saying how
    many. None when even the task alone does not fit."""
    if _size(messages) <= budget:
        return messages
    head, rest = messages[:2], messages[2:]
    units: list[list[dict[str, Any]]] = []
    for m in rest:
        if m.get("role") == "assistant" or not units:
            units.append([m])
        else:
            units[-1].append(m)
    for dropped in range(1, len(units) + 1):
        kept = len(units) - dropped
        n_head = int(kept * head_share)
        keep = units[:n_head] + units[len(units) - (kept - n_head) :]
        marker = {"role": "user", "content": f"[{dropped} earlier turns omitted]"}
        out = head + [m for u in keep[:n_head] for m in u] + [marker]
        out += [m for u in keep[n_head:] for m in u]
        if _size(out) <= budget:
            return out
    return None


def _tool_messages(
    calls: list[dict[str, Any]], observations: list[Observation]
) -> list[dict[str, Any]]:
    out = []
    for i, call in enumerate(calls):
        text = observations[i].text if i < len(observations) else "(not run: the episode ended)"
        out.append({"role": "tool", "tool_call_id": call.get("id") or f"call_{i}", "content": text})
    return out


def _text_results(actions: list[Any], observations: list[Observation]) -> dict[str, Any]:
    blocks = [
        f'<tool_response name="{a.tool}">\n{o.text}\n</tool_response>'
        for a, o in zip(actions, observations, strict=False)
    ]
    return {"role": "user", "content": "\n".join(blocks)}


def run_episode(
    env: Env,
    task: Task,
    policy: Policy,
    *,
    session_id: str | None = None,
    limits: EpisodeLimits | None = None,
    judge: StepJudge | None = None,
    seed: int | None = None,
    on_turn: Callable[[TurnRecord], None] | None = None,
) -> Episode:
    """Run one episode of `task` in `env` (closed at the end, whatever happens)."""
    lim = limits or EpisodeLimits()
    sid = session_id or f"env-{env.name}-{uuid.uuid4().hex[:16]}"
    ep = Episode(env.name, task.id, EpisodeStatus.COMPLETED, session_id=sid, seed=seed)
    t0 = time.monotonic()
    pool = ThreadPoolExecutor(1, thread_name_prefix="step-judge") if judge else None
    scores: list[tuple[TurnRecord, Future[float | None]]] = []
    try:
        try:
            _loop(env, task, policy, sid, lim, ep, t0, judge, pool, scores, on_turn, seed)
        except (_Abort, SandboxError) as exc:
            ep.status, ep.reason = EpisodeStatus.ABORTED, str(exc) or type(exc).__name__
        for rec, fut in scores:
            try:
                rec.judge_score = fut.result(timeout=max(1.0, lim.deadline_s))
            except Exception:
                rec.judge_score = None  # a judge failure is no opinion
        if ep.status is not EpisodeStatus.ABORTED:
            try:
                verdict = env.evaluate()
            except Exception as exc:  # our verifier's failure, not the policy's
                verdict = Verdict(0.0, False, infra_error=f"{type(exc).__name__}: {exc}")
            ep.verdict = verdict
            if verdict.infra_error:
                ep.status = EpisodeStatus.ABORTED
                ep.reason = f"verifier failed: {verdict.infra_error}"
            else:
                ep.outcome_reward = env.outcome_reward(verdict)
    finally:
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
        try:
            env.close()
        finally:
            ep.duration_s = time.monotonic() - t0
    return ep


def _loop(
    env: Env,
    task: Task,
    policy: Policy,
    sid: str,
    lim: EpisodeLimits,
    ep: Episode,
    t0: float,
    judge: StepJudge | None,
    pool: ThreadPoolExecutor | None,
    scores: list[tuple[TurnRecord, Future[float | None]]],
    on_turn: Callable[[TurnRecord], None] | None,
    seed: int | None,
) -> None:
    first = env.reset(task, seed=seed)
    if first.infra_error:
        raise _Abort(f"the env could not start: {first.infra_error}")
    specs = env.tool_specs(task)
    tools = [s.openai() for s in specs]
    fences = getattr(env, "fence_tools", None)
    # an env with its own reply format (swe's text protocol: one ```bash block per reply)
    own_parser: Callable[[PolicyReply], ParseResult] | None = getattr(env, "parse_reply", None)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": env.system_prompt(task)},
        {"role": "user", "content": first.text},
    ]
    parse_errors = 0
    for step in range(lim.max_steps or task.max_steps):
        if time.monotonic() - t0 > lim.deadline_s:
            ep.status, ep.reason = EpisodeStatus.TRUNCATED, f"deadline of {lim.deadline_s:g} s"
            return
        sent = fit_context(messages, lim.context_chars, lim.head_share)
        if sent is None:
            ep.status, ep.reason = EpisodeStatus.TRUNCATED, "context budget"
            return
        try:
            reply = policy(copy.deepcopy(sent), tools, session_id=sid)
        except Exception as exc:
            raise _Abort(f"the policy failed: {type(exc).__name__}: {exc}") from exc
        rec = TurnRecord(step, sent, reply.text, meta=dict(reply.meta))
        ep.turns.append(rec)
        parsed = own_parser(reply) if own_parser else parse_reply(reply, specs, fences)
        assistant: dict[str, Any] = {"role": "assistant", "content": reply.text}
        if parsed.native and reply.tool_calls:
            assistant["tool_calls"] = reply.tool_calls
        messages.append(assistant)
        if parsed.error:
            parse_errors += 1
            rec.parse_error = parsed.error
            note = (
                parsed.error
                if own_parser
                else f"Error: {parsed.error}. Call one of the tools with valid JSON arguments."
            )
            if parsed.native:
                messages += _tool_messages(reply.tool_calls, [Observation(note)] * 99)
            else:
                messages.append({"role": "user", "content": note})
            _after(rec, task, ep, judge, pool, scores, on_turn)
            if parse_errors >= lim.max_parse_errors:
                ep.status = EpisodeStatus.FAILED
                ep.reason = f"{parse_errors} unreadable replies"
                return
            continue
        if not parsed.actions:
            result = env.final_answer(reply.text)
            if result is not None:
                rec.observations.append(result.observation)
            ep.reason = "final answer" if result is not None else "reply without a tool call"
            _after(rec, task, ep, judge, pool, scores, on_turn)
            return
        done = False
        for action in parsed.actions:
            out = env.step(action)
            if out.observation.infra_error:
                raise _Abort(out.observation.infra_error)
            rec.actions.append(action)
            rec.observations.append(out.observation)
            if out.done:
                done = True
                break
        if parsed.native:
            messages += _tool_messages(reply.tool_calls, rec.observations)
        elif not specs and len(rec.observations) == 1:  # a text protocol: the output as is
            messages.append({"role": "user", "content": rec.observations[0].text})
        else:
            messages.append(_text_results(rec.actions, rec.observations))
        _after(rec, task, ep, judge, pool, scores, on_turn)
        if done:
            ep.reason = "finished"
            return
    ep.status, ep.reason = EpisodeStatus.TRUNCATED, "step limit"


def _after(
    rec: TurnRecord,
    task: Task,
    ep: Episode,
    judge: StepJudge | None,
    pool: ThreadPoolExecutor | None,
    scores: list[tuple[TurnRecord, Future[float | None]]],
    on_turn: Callable[[TurnRecord], None] | None,
) -> None:
    if judge is not None and pool is not None:  # judged beside the rollout, collected at the end
        history = list(ep.turns[:-1])
        scores.append((rec, pool.submit(judge.score, task, history, rec)))
    if on_turn is not None:
        on_turn(rec)


def run_group(
    make_env: Callable[[], Env],
    task: Task,
    policy: Policy,
    n: int = 4,
    *,
    concurrency: int = 2,
    limits: EpisodeLimits | None = None,
    judge: StepJudge | None = None,
    seed: int = 0,
    session_prefix: str | None = None,
    on_turn: Callable[[str, TurnRecord], None] | None = None,
    on_episode: Callable[[Episode], None] | None = None,
) -> list[Episode]:
    """`n` episodes of `task` (a GRPO group), each with its own env, session and seed.
    `on_turn(session_id, turn)` and `on_episode(episode)` report progress as it happens
    (called from the rollout threads)."""

    def one(i: int) -> Episode:
        env = make_env()
        sid = f"{session_prefix or 'env-' + env.name}-{uuid.uuid4().hex[:16]}"
        report = None if on_turn is None else (lambda rec: on_turn(sid, rec))
        ep = run_episode(
            env, task, policy, session_id=sid, limits=limits, judge=judge, seed=seed + i,
            on_turn=report,
        )  # fmt: skip
        if on_episode is not None:
            on_episode(ep)
        return ep

    with ThreadPoolExecutor(max(1, min(concurrency, n)), thread_name_prefix="rollout") as ex:
        return list(ex.map(one, range(n)))
