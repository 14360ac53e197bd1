"""Is a hint a teacher this model can learn from? (issue #29)

On-policy distillation teaches the policy what the teacher (the base model reading the
hint) would have said. A small model can read some hints well ("Too long. Please answer in
at most 15 words.": its answers get short) and others badly: reading "Tone it down a bit:
no exclamation points and no emoji, thanks." the 135M embedded model loops on 42 % of a
user's prompts against 8 % without the hint, and distilling from it turned 7 of 10 held-out
answers into loops in 4 steps (`bench/collapse.py --method opd`).

(`bench/teacher_check.py`). So before a hint teaches, the teacher answers the turn's own prompt and the user's newest
prompts greedily, with the hint and without it, at the answer budget each request set (the
server's default when it set none; at most `teacher_check_max_tokens`): a loop the user
would see. When its answers with the hint are degenerate
(`clawrl_app.degeneration`) on a larger share than without, by more than
`teacher_check_max_rise`, the hint does not teach: the turn trains by its reward only, and
the judgment says why (`hint_rule`). With fewer than `MIN_PROMPTS` prompts there is not
enough evidence and the hint is trusted. Verdicts made on all `teacher_check_prompts`
prompts are kept per (hint, teacher version), the answers without a hint per prompt, so a
user who repeats a correction costs one check once they have that many prompts.
"""

from __future__ import annotations

import asyncio
import json
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from clawrl_app.degeneration import score as form_of
from clawrl_app.engine.backends.greedy import NoRoom, greedy_answer
from clawrl_app.engine.judging.prompts import teacher_messages
from clawrl_app.engine.store.guard import UserPrompt, plain_chat, request_budget

if TYPE_CHECKING:
    from clawrl_app.engine.backends.base import Backend
    from clawrl_app.engine.chat.formatter import ChatFormatter
    from clawrl_app.engine.store import Store, TurnRow

MIN_PROMPTS = 4
"""Fewer prompts than this decide nothing: the hint is trusted."""
CACHED = 256
"""Verdicts and answers kept (the oldest are dropped)."""


@dataclass(frozen=True)
class TeacherVerdict:
    """Whether a hint teaches, and the figures it rests on."""

    trusted: bool
    with_hint: float | None
    """Degenerate share of the teacher's answers with the hint (None: not checked)."""
    without: float | None
    """The same model's, without the hint."""
    prompts: int

    def summary(self) -> str:
        if self.with_hint is None or self.without is None:
            return f"teacher not checked ({self.prompts} prompts)"
        verdict = "trusted" if self.trusted else "reward only: the teacher loops with this hint"
        return (
            f"teacher check: degenerate {self.with_hint:.2f} with the hint vs "
            f"{self.without:.2f} without on {self.prompts} prompts: {verdict}"
        )


def decide_teacher(
    with_hint: list[bool], without: list[bool], max_rise: float, min_prompts: int = MIN_PROMPTS
) -> TeacherVerdict:
    """Pure rule: per prompt, was the teacher's answer degenerate with the hint / without it."""
    n = len(with_hint)
    if n != len(without):
        raise ValueError(f"{n} answers with the hint, {len(without)} without")
    if n < min_prompts:
        return TeacherVerdict(True, None, None, n)
    rate_with, rate_without = sum(with_hint) / n, sum(without) / n
    return TeacherVerdict(rate_with <= rate_without + max_rise + 1e-9, rate_with, rate_without, n)


class TeacherCheck:
    """Checks hints against the teacher's own answers (see the module docstring)."""

    def __init__(
        self,
        store: Store,
        backend: Backend,
        formatter: ChatFormatter,
        *,
        prompts: int,
        max_rise: float,
        max_tokens: int,
        default_tokens: int | None = None,
    ) -> None:
        self.store = store
        self.backend = backend
        self.formatter = formatter
        self.prompts = prompts
        self.max_rise = max_rise
        self.max_tokens = max_tokens
        self.default_tokens = default_tokens or max_tokens
        """A request that set no budget was answered at the server's default."""
        self._verdicts: OrderedDict[tuple[str, str], TeacherVerdict] = OrderedDict()
        self._plain_form: OrderedDict[tuple[str, str, int], bool] = OrderedDict()
        self.checked = 0
        self.untrusted = 0

    def _prompts_for(self, turn: TurnRow) -> list[UserPrompt]:
        """The turn's own prompt first, then the user's newest ones (each conversation once)."""
        room = self.backend.info().context_length - self.max_tokens
        own = turn.request.get("messages") or []
        out: list[UserPrompt] = []
        if plain_chat(own) and not turn.request.get("tools"):
            out.append(UserPrompt(turn.id, list(own), request_budget(turn.request)))
        seen = {json.dumps(p.messages, sort_keys=True) for p in out}
        for p in self.store.user_prompts(self.prompts, room):
            key = json.dumps(p.messages, sort_keys=True)
            if key not in seen and len(out) < self.prompts:
                seen.add(key)
                out.append(p)
        return out

    async def _degenerate(self, version: str, messages: list[dict[str, Any]], budget: int) -> bool:
        try:
            text = await greedy_answer(self.backend, self.formatter, version, messages, budget)
        except NoRoom:
            return False
        return form_of(text).degenerate

    async def verdict(self, hint: str, turn: TurnRow, version: str) -> TeacherVerdict:
        """Whether `hint` teaches, with `version` as the teacher ("base" or a version)."""
        key = (" ".join(hint.split()), version)
        if key in self._verdicts:
            self._verdicts.move_to_end(key)
            return self._verdicts[key]
        if self.prompts <= 0:
            return TeacherVerdict(True, None, None, 0)
        prompts = await asyncio.to_thread(self._prompts_for, turn)
        if len(prompts) < MIN_PROMPTS:  # not enough evidence yet: ask again next time
            return TeacherVerdict(True, None, None, len(prompts))

        def budget(p: UserPrompt) -> int:
            return min(p.max_tokens or self.default_tokens, self.max_tokens)

        async def plain(p: UserPrompt) -> bool:
            k = (json.dumps(p.messages, sort_keys=True), version, budget(p))
            if k not in self._plain_form:
                self._plain_form[k] = await self._degenerate(version, p.messages, budget(p))
                while len(self._plain_form) > CACHED:
                    self._plain_form.popitem(last=False)
            return self._plain_form[k]

        with_hint = await asyncio.gather(
            *[
                self._degenerate(version, teacher_messages(p.messages, hint), budget(p))
                for p in prompts
            ]
        )
        without = [await plain(p) for p in prompts]
        verdict = decide_teacher(list(with_hint), without, self.max_rise)
        if len(prompts) >= self.prompts:  # kept only when made on the full evidence
            self._verdicts[key] = verdict
            while len(self._verdicts) > CACHED:
                self._verdicts.popitem(last=False)
        self.checked += 1
        self.untrusted += not verdict.trusted
        return verdict
