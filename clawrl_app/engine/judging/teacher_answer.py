"""The teacher's own answer: what the model says to the turn's prompt when it reads the hint.

On-policy distillation moves the policy's sampled tokens toward the teacher's log-probs on
them; for a small model those gaps are mostly noise, and the one signal about form a
correction like "Shorter please, 25 words max." carries is where to end (issue #29,
docs/learning.md). The teacher (the base model reading the hint) can show the whole answer
instead: asked greedily, it answers "To sleep better, try to avoid screens before bedtime,
and aim for 7-8 hours of sleep." The trainer takes that answer as one more sample of the
turn, rewarded +1 beside the policy's own -1 (`TrainItem.demonstration`): the contrast of a
good and a bad answer to the same prompt, in the policy's own words where they were fine.

An answer is kept only when it ended on its own within the turn's answer budget, is not
degenerate (`clawrl_app.degeneration`), says something (`length_request.says_something`: not
a lead-in ending on a colon or quoting its words after "the answer is", not the question
repeated back), does what a request for less
asks of the rejected answer (`length_request.does_what_was_asked`: shorter, within the limit
the request states), carries the hint and does not quote it:
- *carries the hint*: the teacher's mean log-prob of its answer with the hint exceeds the
  same model's without it by at least MIN_HINT_GAIN nats per token. A small model often
  answers as if it had not read the hint ("Keep it to about a dozen words" and a 52-word
  answer: gain -0.01); rewarding that answer +1 would teach the opposite of the request.
  Measured on the embedded model (`bench/collapse.py` users, 24 prompts): answers that
  follow the hint 0.32-0.91, those that ignore it -0.02-0.14;
- *does not quote it*: no 3-word phrase of the hint ("Sure, here's a more concise version:
  'Shorter, 25 words max.'": the teacher rewrote the correction instead of answering), no
  2-word phrase of the label that introduces it ("The answer to this question is: [user's
  hint / instruction]").
Tool-calling turns get none (their answers are calls).

*Further tries.* The greedy answer is one draw; when it is not kept the teacher samples up
to `tries` more (`judge.teacher_tries`, at `judge.teacher_temperature`, seeded by the turn)
and the first one kept trains. Measured on the base model (16 training prompts per user,
the user's max_tokens, the checks above; 2026-12-02, the script `bench/teacher_tries.py`
was made from): greedy kept 5 / 2 / 11 of 16 for u15 / dozen / tips25; greedy or one of 4
samples at temperature 1.0 kept 16 / 10 / 15 of 16, and every kept answer was within the
user's limit. End to end (brevity/u15, 4 tries at 1.0, 2026-12-02) v1-v3 were refused
(2-4 of 24 new loops at the user's length, general 0.50 against 0.60) and nothing was
served in 24 turns, where greedy alone served 0.60 compliant by then; the likely cause,
not measured apart, is about three times the shown answers per batch, each rewarded +1 at
ratio 1. So the tries are off by default (`teacher_tries = 0`).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from clawrl_app.degeneration import ngrams, words
from clawrl_app.degeneration import score as form_of
from clawrl_app.engine.backends.greedy import NoRoom, side_tokens
from clawrl_app.engine.judging.heuristic_judge import last_user_message
from clawrl_app.engine.judging.length_request import (
    does_what_was_asked,
    form_cue,
    says_something,
)
from clawrl_app.engine.judging.prompts import HINT_MARKER, teacher_messages
from clawrl_app.engine.judging.teacher_cut import teacher_cut
from clawrl_app.engine.store.guard import plain_chat, request_budget

if TYPE_CHECKING:
    from clawrl_app.config import JudgeSettings
    from clawrl_app.engine.backends.base import Backend
    from clawrl_app.engine.chat.formatter import ChatFormatter
    from clawrl_app.engine.store import TurnRow

MIN_HINT_GAIN = 0.2
"""Nats per token the hint must add to the teacher's log-prob of its own answer."""


@dataclass(frozen=True)
class TeacherShowing:
    """How the teacher shows a hinted turn its +1 sample (the `judge.teacher_*` settings):
    greedy, then up to `tries` answers sampled at `temperature`; with `cue`, reading the
    hint's form cue; with `cut`, failing an answer, the turn's answer cut where it would
    stop."""

    tries: int = 0
    temperature: float = 1.0
    cue: bool = False
    cut: bool = False

    @classmethod
    def of(cls, settings: JudgeSettings) -> TeacherShowing:
        return cls(
            settings.teacher_tries,
            settings.teacher_temperature,
            settings.teacher_cue,
            settings.teacher_cut,
        )


GREEDY = TeacherShowing()
"""The teacher's greedy answer alone (the defaults)."""


def quotes(answer: str, hint: str, n: int = 3) -> bool:
    """Whether `answer` repeats an `n`-word phrase of `hint` (case-insensitive)."""
    return not set(ngrams(words(answer), n)).isdisjoint(ngrams(words(hint), n))


async def teacher_answer(
    backend: Backend,
    formatter: ChatFormatter,
    turn: TurnRow,
    hint: str,
    version: str | None,
    default_tokens: int,
    showing: TeacherShowing = GREEDY,
) -> list[int] | None:
    """The teacher's answer to the turn's prompt with `hint` (token ids, its end token
    included), at the budget the turn's request set (`default_tokens` when it set none):
    the greedy one, else the first of `showing.tries` sampled ones that is kept; None when none is
    or the turn is not plain chat. Kept: it ended on its own, is neither degenerate nor
    empty, says something, does what a request for less asks of the turn's answer, does not
    quote the hint and carries it (module docstring). With `showing.cue`, the teacher reads the
    hint with its `form_cue` ("... at most 15 words. One short sentence."); the answer
    is still held to the hint's own limits."""
    req = turn.request
    messages = req.get("messages") or []
    if req.get("tools") or not plain_chat(messages):
        return None
    budget = request_budget(req) or default_tokens
    read = hint + form_cue(hint) if showing.cue else hint
    hinted = teacher_messages(messages, read)
    for k in range(1 + max(0, showing.tries)):
        t, seed = (0.0, None) if k == 0 else (showing.temperature, turn.id * 101 + k)
        try:
            ids, reason = await side_tokens(
                backend, formatter, version or "base", hinted, budget, t, seed
            )
        except NoRoom:
            return None
        if await _kept(backend, formatter, turn, messages, hint, read, ids, reason, version):
            return ids
    return None


async def _kept(
    backend: Backend,
    formatter: ChatFormatter,
    turn: TurnRow,
    messages: list[dict[str, Any]],
    hint: str,
    read: str,
    ids: list[int],
    reason: str | None,
    version: str | None,
) -> bool:
    """Whether the teacher's answer `ids` may train as the turn's +1 sample; `read`: what
    the teacher read (`hint`, or `hint` and its cue)."""
    text = formatter.decode(ids)
    if reason != "stop" or not text.strip() or form_of(text).degenerate:
        return False
    if quotes(text, read) or quotes(text, HINT_MARKER, 2):  # the correction or its label
        return False
    if not says_something(text, last_user_message(messages)) or not does_what_was_asked(
        text, turn.response_text, hint
    ):
        return False
    gain = await hint_gain(backend, formatter, messages, read, ids, version)
    return gain >= MIN_HINT_GAIN


async def hint_gain(
    backend: Backend,
    formatter: ChatFormatter,
    messages: list[dict[str, Any]],
    hint: str,
    ids: list[int],
    version: str | None,
) -> float:
    """Mean log-prob per token of `ids` under the prompt with `hint` minus without it."""
    hinted = formatter.render(teacher_messages(messages, hint))
    with_hint = await backend.score(hinted, ids, version)
    without = await backend.score(formatter.render(messages), ids, version)
    return statistics.fmean(with_hint) - statistics.fmean(without)


async def teacher_shows(
    backend: Backend,
    formatter: ChatFormatter,
    turn: TurnRow,
    hint: str,
    version: str | None,
    answer_tokens: int,
    showing: TeacherShowing = GREEDY,
) -> list[int] | None:
    """The +1 sample the teacher shows for a hinted turn: its own answer (`answer_tokens`
    > 0, `teacher_answer` as `showing` says), else, with `showing.cut`, the turn's answer
    cut where it would stop (`teacher_cut`); None."""
    shown = None
    if answer_tokens:
        shown = await teacher_answer(
            backend, formatter, turn, hint, version, answer_tokens, showing
        )
    if shown is None and showing.cut:
        shown = await teacher_cut(backend, formatter, turn, hint, version)
    return shown
