"""Explicit user feedback: a +1/-1 rating and an optional hint ("teach mode") for a turn.

A rating overrides the judge's reward; a hint becomes the OPD hint directly, with its
teacher log-probs scored right away. A rating without a hint leaves the hint to the judge:
once the turn has its next message, the judge reads it (the store sends such a sample back
to the judge), so "Too long. Fifteen words." still teaches a user who also rates. Agreement
between the judge and the user is recorded as the live metric `judge/agreement`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from clawrl_app.engine.backends.base import Backend
from clawrl_app.engine.chat.formatter import ChatFormatter
from clawrl_app.engine.chat.openai_schema import ApiError, reject_lone_surrogates
from clawrl_app.engine.core.events import EventSink, TurnRated
from clawrl_app.engine.judging.judge import teacher_logprobs, teacher_topk
from clawrl_app.engine.judging.teacher_answer import GREEDY, TeacherShowing, teacher_shows
from clawrl_app.engine.store import JudgmentRow, Store, TurnRow


@dataclass(frozen=True)
class Feedback:
    """A validated feedback request."""

    session_id: str
    rating: int
    turn_index: int | None = None
    turn_id: int | None = None
    hint: str | None = None


def parse_feedback(body: Any) -> Feedback:
    """Validate `{session_id, turn | turn_id, rating: +1|-1, hint?}`; ApiError(400) otherwise."""
    if not isinstance(body, dict):
        raise ApiError(400, "The body must be a JSON object.")
    reject_lone_surrogates(body)
    sid = body.get("session_id")
    if not isinstance(sid, str) or not sid:
        raise ApiError(400, "session_id (string) is required.", param="session_id")
    rating = body.get("rating")
    if isinstance(rating, bool) or rating not in (1, -1):
        raise ApiError(400, "rating must be 1 or -1.", param="rating")
    turn, turn_id = body.get("turn"), body.get("turn_id")
    for name, value in (("turn", turn), ("turn_id", turn_id)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ApiError(400, f"{name} must be an integer.", param=name)
    if turn is None and turn_id is None:
        turn = -1
    hint = body.get("hint")
    if hint is not None and (not isinstance(hint, str) or not hint.strip()):
        raise ApiError(400, "hint must be a non-empty string.", param="hint")
    return Feedback(sid, int(rating), turn, turn_id, hint.strip() if hint else None)


def resolve_turn(store: Store, fb: Feedback) -> TurnRow:
    """The rated turn: by id, by index (`idx` in `sessions show`), or -1 = last main turn."""
    if store.get_session(fb.session_id) is None:
        raise ApiError(
            404, f"No session {fb.session_id!r}.", code="session_not_found", param="session_id"
        )
    turns = store.turns_for_session(fb.session_id)
    if fb.turn_id is not None:
        found = [t for t in turns if t.id == fb.turn_id]
    elif fb.turn_index is not None and fb.turn_index < 0:
        mains = [t for t in turns if t.type == "main"]
        found = [mains[fb.turn_index]] if -len(mains) <= fb.turn_index else []
    else:
        found = [t for t in turns if t.idx == fb.turn_index]
    if not found:
        raise ApiError(
            404, f"No such turn in session {fb.session_id!r}.", code="turn_not_found", param="turn"
        )
    if found[0].type != "main":
        raise ApiError(400, "Side turns are never trained on; rate a main turn.", param="turn")
    return found[0]


async def apply_feedback(
    store: Store,
    backend: Backend,
    formatter: ChatFormatter,
    fb: Feedback,
    *,
    grace_s: float,
    teacher_version: str | None,
    events: EventSink | None = None,
    topk: int = 0,
    answer_tokens: int = 0,
    showing: TeacherShowing = GREEDY,
) -> JudgmentRow:
    """Record the rating (and hint with its teacher log-probs and, with `answer_tokens`,
    the +1 sample the teacher shows under it, as `showing` says); returns the judgment."""
    turn = resolve_turn(store, fb)
    sample = next(
        (s for s in store.samples_for_session(turn.session_id) if s.turn_id == turn.id), None
    )
    before = store.get_judgment(sample.id) if sample is not None else None
    row = store.set_user_rating(turn.id, fb.rating, fb.hint, eligible_at=time.time() + grace_s)
    if fb.hint and turn.response_ids:  # a redacted turn has no ids to score
        lps = await teacher_logprobs(backend, formatter, turn, fb.hint, teacher_version)
        if lps is not None:
            store.set_teacher_logprobs(row.sample_id, lps)
        top = await teacher_topk(backend, formatter, turn, fb.hint, teacher_version, topk)
        if top is not None:
            store.set_teacher_topk(row.sample_id, *top)
        # the judge's answer was to the judge's hint, not this one
        shown = await teacher_shows(
            backend,
            formatter,
            turn,
            fb.hint,
            teacher_version,
            answer_tokens,
            showing,
        )
        store.set_teacher_answer(row.sample_id, shown)
    if before is not None and before.judge_score is not None:  # live judge/user agreement
        store.add_metric(row.sample_id, "judge/agreement", float(before.judge_score == fb.rating))
    if events is not None:
        events(TurnRated(turn.session_id, turn.id, fb.rating, fb.hint))
    return store.get_judgment(row.sample_id) or row
