"""The admin API's wire format: the JSON shapes of sessions, checkpoints and metrics read from
the store. The engine's admin routes send them and the TUI's in-process client builds the same
ones, so both clients see one format. Imports the store only."""

from __future__ import annotations

from typing import Any

from clawrl_app.engine.store import ENV_SOURCE_PREFIX, DeletedSession, Store

METRIC_LIMIT = 5000  # points per metric sent to the UI


def session_summaries(store: Store, review_state: str | None = None) -> list[dict[str, Any]]:
    """Newest sessions first with turn count, mean reward and review state."""
    out = []
    for s in store.list_sessions(limit=200, review_state=review_state):
        turns = store.turns_for_session(s.id, type="main")
        scores = [
            j.score
            for sample in store.samples_for_session(s.id)
            if (j := store.get_judgment(sample.id)) is not None
        ]
        out.append(
            {
                "id": s.id,
                "source": s.source,
                "created": s.created,
                "closed": s.closed_at is not None,
                "turns": len(turns),
                "mean_reward": sum(scores) / len(scores) if scores else None,
                "review_state": s.review_state,
                "episode": env_episode(store, s.id, s.source),
            }
        )
    return out


def env_episode(store: Store, session_id: str, source: str | None) -> dict[str, Any] | None:
    """For an env rollout's session, its episode (env, task, split, status, outcome reward,
    trained); None for conversations and for rollouts not recorded yet."""
    if not (source or "").startswith(ENV_SOURCE_PREFIX):
        return None
    e = store.get_episode(session_id)
    if e is None:
        return None
    return {"env": e.env, "task_id": e.task_id, "split": e.split, "status": e.status,
            "outcome_reward": e.outcome_reward, "trained": e.trained}  # fmt: skip


def session_detail(store: Store, session_id: str) -> dict[str, Any] | None:
    """One session's turns, each with its reward, votes, hint and the checkpoint it trained."""
    s = store.get_session(session_id)
    if s is None:
        return None
    samples = {x.turn_id: x for x in store.samples_for_session(session_id)}
    turns = []
    for t in store.turns_for_session(session_id):
        sample = samples.get(t.id)
        j = store.get_judgment(sample.id) if sample is not None else None
        messages = t.request.get("messages") or []
        users = [m for m in messages if isinstance(m, dict) and m.get("role") in ("user", "tool")]
        turns.append(
            {
                "turn_id": t.id,
                "idx": t.idx,
                "type": t.type,
                "prompt": _text(users[-1].get("content")) if users else "",
                "response": t.response_text,
                "version": t.policy_version,
                "sample_state": sample.state if sample else None,
                "next_state": sample.next_state_text if sample else None,
                "reward": j.score if j else None,
                "votes": j.votes if j else [],
                "user_rating": j.user_rating if j else None,
                "hint": (j.user_hint or j.hint) if j else None,
                "trained_in": sample.trained_in if sample else None,
            }
        )
    return {
        "id": s.id,
        "source": s.source,
        "review_state": s.review_state,
        "closed": s.closed_at is not None,
        "episode": env_episode(store, s.id, s.source),
        "turns": turns,
    }


def deleted_json(gone: DeletedSession) -> dict[str, Any]:
    """What a delete removed, as the admin route and the in-process client return it."""
    return {
        "id": gone.session_id,
        "deleted": {
            "turns": gone.turns,
            "samples": gone.samples,
            "judgments": gone.judgments,
            "episodes": gone.episodes,
            "events": gone.events,
        },
        "trained_in": gone.trained_in,
    }


def checkpoint_rows(store: Store, served: str | None) -> list[dict[str, Any]]:
    """Every checkpoint (newest first) with its metrics and sessions; `served` marks one."""
    rows = sorted(store.list_checkpoints(), key=lambda c: (c.created, c.step), reverse=True)
    return [
        {
            "version": c.version,
            "parent": c.parent,
            "step": c.step,
            "created": c.created,
            "status": c.status,
            "published_at": c.published_at,
            "metrics": c.metrics,
            "sessions": c.sessions,
            "served": c.version == served,
        }
        for c in rows
    ]


def metric_series(store: Store, names: list[str]) -> dict[str, list[list[float]]]:
    """`{name: [[step, value], ...]}` as the trainer recorded them."""
    return {n: [[m.step, m.value] for m in store.metrics(n)][-METRIC_LIMIT:] for n in names}


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""
