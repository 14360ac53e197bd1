"""From finished rollouts to what the engine records: one JSON group per task (pure).

Each model turn of an episode becomes a sample whose next state is what the environment
returned for it (the tool outputs; for the last turn, how the episode ended and what the
verifier said) and whose reward is the turn's group-relative advantage. Episodes that are
not trainable (infrastructure failures, held-out evaluation) are recorded without rewards.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from clawrl_app.envs.base import Episode, Task, TurnRecord

OBSERVATION_CHARS = 8000  # per turn, as stored (the policy saw its own capped copy)


def turn_next_state(ep: Episode, i: int) -> tuple[str, dict[str, Any]]:
    """The next state of turn `i`: its observations, its parse error, or for the last turn
    the end of the episode (reason and verifier score)."""
    turn: TurnRecord = ep.turns[i]
    parts = [o.text for o in turn.observations]
    if turn.parse_error:
        parts.append(f"[parse error] {turn.parse_error}")
    meta: dict[str, Any] = {
        "exit_codes": [o.exit_code for o in turn.observations],
        "timed_out": any(o.timed_out for o in turn.observations),
    }
    if i == len(ep.turns) - 1:
        score = ep.verdict.score if ep.verdict is not None else None
        parts.append(f"[episode {ep.status.value}: {ep.reason}; verifier score {score}]")
        meta["verdict_score"] = score
    text = "\n\n".join(p for p in parts if p)
    if len(text) > OBSERVATION_CHARS:
        half = OBSERVATION_CHARS // 2
        text = f"{text[:half]}\n[... {len(text) - 2 * half} characters cut ...]\n{text[-half:]}"
    return text, meta


def group_payload(
    task: Task,
    group_id: str,
    episodes: Sequence[Episode],
    advantages: Sequence[Sequence[float] | None],
    *,
    train: bool = True,
) -> dict[str, Any]:
    """The body of `POST /admin/env/episodes` for one rollout group of `task`."""
    out = []
    for ep, adv in zip(episodes, advantages, strict=True):
        if ep.session_id is None:
            raise ValueError("an episode without a session id was not run through the endpoint")
        turns = []
        for i, turn in enumerate(ep.turns):
            text, meta = turn_next_state(ep, i)
            reward = adv[i] if (train and adv is not None and ep.trainable) else None
            turns.append(
                {
                    "observation": text,
                    "observation_json": meta,
                    "reward": None if reward is None else max(-1.0, min(1.0, float(reward))),
                    "step_score": turn.judge_score,
                }
            )
        out.append(
            {
                "session_id": ep.session_id,
                "status": ep.status.value,
                "reason": ep.reason[:2000],
                "outcome_reward": ep.outcome_reward,
                "verdict": {
                    "score": ep.verdict.score if ep.verdict else None,
                    "success": ep.verdict.success if ep.verdict else None,
                    "infra_error": ep.verdict.infra_error if ep.verdict else None,
                },
                "duration_s": round(ep.duration_s, 3),
                "turns": turns,
            }
        )
    return {
        "env": task.env,
        "task_id": task.id,
        "group_id": group_id,
        "split": task.split if task.split in ("train", "heldout") else "train",
        "train": train,
        "episodes": out,
    }
