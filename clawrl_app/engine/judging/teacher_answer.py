"""The teacher's own answer: what the model says to the turn's prompt when it reads the hint.

On-policy distillation moves the policy's sampled tokens toward the teacher's log-probs on
them; for a small model those gaps are mostly noise, and the one signal about form a
correction like "Shorter please, 25 words max." carries is where to end (issue #29,
docs/learning.md). The teacher (the base model reading the hint) can show the whole answer
instead: asked greedily, it answers "To sleep better, try to avoid screens before bedtime,
and aim for 7-8 hours of sleep." The trainer takes that answer as one more sample of the
turn, rewarded +1 beside the policy's own -1 (`TrainItem.demonstration`): the contrast of a
good and a bad answer to the same prompt, in the policy's own words where they were fine.

An answer is kept only when it ended on its own within the turn's answer budget and is not
degenerate (`clawrl_app.degeneration`): a teacher that loops or runs on under the hint
teaches nothing by example. Tool-calling turns get none (their answers are calls).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from clawrl_app.degeneration import score as form_of
from clawrl_app.engine.backends.greedy import NoRoom, greedy_tokens
from clawrl_app.engine.judging.prompts import teacher_messages
from clawrl_app.engine.store.guard import plain_chat, request_budget

if TYPE_CHECKING:
    from clawrl_app.engine.backends.base import Backend
    from clawrl_app.engine.chat.formatter import ChatFormatter
    from clawrl_app.engine.store import TurnRow


async def teacher_answer(
    backend: Backend,
    formatter: ChatFormatter,
    turn: TurnRow,
    hint: str,
    version: str | None,
    default_tokens: int,
) -> list[int] | None:
    """The teacher's greedy answer to the turn's prompt with `hint` (token ids, its end token
    included), at the budget the turn's request set (`default_tokens` when it set none);
    None when it did not end on its own, is degenerate or empty, or the turn is not plain
    chat."""
    req = turn.request
    messages = req.get("messages") or []
    if req.get("tools") or not plain_chat(messages):
        return None
    budget = request_budget(req) or default_tokens
    try:
        ids, reason = await greedy_tokens(
            backend, formatter, version or "base", teacher_messages(messages, hint), budget
        )
    except NoRoom:
        return None
    text = formatter.decode(ids)
    if reason != "stop" or not text.strip() or form_of(text).degenerate:
        return None
    return ids
