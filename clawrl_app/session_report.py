"""Text views of recorded sessions for `clawrl-app sessions` (list and show)."""

from __future__ import annotations

from typing import Any

from clawrl_app.engine.store import JudgmentRow, SampleRow, Store


def _judgments(store: Store, session_id: str) -> dict[int, tuple[SampleRow, JudgmentRow | None]]:
    """turn id -> (sample, judgment) for a session."""
    return {s.turn_id: (s, store.get_judgment(s.id)) for s in store.samples_for_session(session_id)}


def session_list(store: Store, limit: int = 50) -> str:
    """One line per session: id, source, turn counts, judged count, mean reward, review state."""
    rows = store.list_sessions(limit=limit)
    if not rows:
        return "No sessions recorded yet."
    out = [
        f"{'session':40s} {'source':9s} {'main':>4s} {'side':>4s} {'judged':>6s} {'reward':>6s}  review    state"
    ]
    for sess in rows:
        turns = store.turns_for_session(sess.id)
        mains = sum(1 for t in turns if t.type == "main")
        scores = [j.score for _, j in _judgments(store, sess.id).values() if j is not None]
        mean = f"{sum(scores) / len(scores):+.2f}" if scores else "  -"
        out.append(
            f"{sess.id:40s} {sess.source:9s} {mains:4d} {len(turns) - mains:4d} "
            f"{len(scores):6d} {mean:>6s}  {sess.review_state:9s} {sess.close_reason or 'open'}"
        )
    return "\n".join(out)


def _clip(text: Any, n: int = 300) -> str:
    s = str(text or "").replace("\n", " ")
    return s if len(s) <= n else s[: n - 1] + "…"


def session_detail(store: Store, session_id: str) -> str | None:
    """A session with each turn's next state, votes, reward and hint; None if unknown."""
    sess = store.get_session(session_id)
    if sess is None:
        return None
    out = [
        f"session {sess.id}  source={sess.source}  review={sess.review_state}  "
        f"closed={sess.close_reason or 'open'}"
    ]
    judged = _judgments(store, session_id)
    for t in store.turns_for_session(session_id):
        last = (t.request.get("messages") or [{}])[-1]
        out.append(
            f"\n[{t.idx}] {t.type} turn #{t.id}, policy {t.policy_version}, "
            f"{t.completion_tokens} tokens, {t.latency_ms:.0f} ms"
        )
        out.append(f"  {last.get('role', '?')}: {_clip(last.get('content'))}")
        out.append(f"  assistant: {_clip(t.response_text)}")
        sample, j = judged.get(t.id, (None, None))
        if sample is None:
            continue
        if sample.next_state_role:
            out.append(
                f"  next state ({sample.next_state_role}): {_clip(sample.next_state_text, 200)}"
            )
        out.append(
            f"  sample {sample.id}: {sample.state}"
            + (f" ({sample.skip_reason})" if sample.skip_reason else "")
            + (f", trained in {sample.trained_in}" if sample.trained_in else "")
        )
        if j is None:
            continue
        votes = ", ".join(f"{v.get('kind')}={v.get('score')}" for v in j.votes)
        out.append(
            f"  reward {j.score:+g} by {j.backend}"
            + (
                f" (judge said {j.judge_score:+g}, user rated {j.user_rating:+d})"
                if j.user_rating is not None and j.judge_score is not None
                else ""
            )
            + (f"; votes: {votes}" if votes else "")
        )
        hint = j.user_hint or j.hint
        if hint:
            source = "user" if j.user_hint else (j.hint_rule or "judge")
            out.append(
                f"  hint [{source}]: {_clip(hint, 200)}"
                + ("  (teacher log-probs stored)" if j.teacher_logprobs else "")
            )
    return "\n".join(out)
