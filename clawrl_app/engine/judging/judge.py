"""Judging loop: claim pending samples, vote (PRM + OPD hint), score teacher log-probs.

Judge backends:
- `policy`: the served base model (adapter off) on the backend's background lane, so
  judge requests never slow user requests down;
- `openai`: any OpenAI-compatible endpoint (a separate SGLang engine, a remote server);
- `heuristic`: a deterministic next-state classifier (the default for small policies);
- a custom reward plugin (`--custom-reward-path`) overrides all of them.
Every vote's raw text, the parsed scores, the final reward, all hint candidates and the
selection rule are stored. Claims are idempotent, so a crash mid-judging loses nothing.
"""

from __future__ import annotations

import asyncio
import logging
import time
import traceback
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from clawrl_app.config import JudgeSettings, Settings
from clawrl_app.degeneration import score as degeneration
from clawrl_app.engine.backends.base import Backend, GenerationRequest, SamplingParams, TokenOut
from clawrl_app.engine.chat.formatter import ChatFormatter
from clawrl_app.engine.core.events import EventSink, LoopFailed, SampleJudged, wait_for_poke
from clawrl_app.engine.core.plugins import coerce_reward
from clawrl_app.engine.judging import reply_model
from clawrl_app.engine.judging.heuristic_judge import classify_turn
from clawrl_app.engine.judging.prompts import (
    JudgeInput,
    hint_messages,
    prm_messages,
    teacher_messages,
)
from clawrl_app.engine.judging.teacher_answer import TeacherShowing, teacher_shows
from clawrl_app.engine.judging.teacher_check import TeacherCheck
from clawrl_app.engine.judging.votes import majority_vote, parse_boxed, parse_hint_vote, select_hint
from clawrl_app.engine.store import SampleRow, Store, TurnRow
from clawrl_app.engine.store.faults import log_failure

log = logging.getLogger("clawrl.judge")
CONTEXT_MESSAGES = 8  # recent request messages shown to the judge

TextGenerator = Callable[[list[dict[str, Any]], float, int], Awaitable[str]]


@dataclass(frozen=True)
class Verdict:
    """A judge's decision on one sample."""

    score: float
    votes: list[dict[str, Any]]
    hint: str | None = None
    hint_candidates: list[str] = field(default_factory=list)
    hint_rule: str | None = None


def cap_cut_off(verdict: Verdict, finish_reason: str | None) -> Verdict:
    """An answer cut off at its token limit (or stopped in a loop) is never rewarded: a
    "thanks" after it praises nothing the model finished. Only an explicit rating (which
    never comes through the judge) can make it +1; a negative verdict stays."""
    if finish_reason != "length" or verdict.score <= 0:
        return verdict
    log.info("a cut-off answer (finish_reason length) judged %+g: counted 0", verdict.score)
    return replace(verdict, score=0.0)


def penalize_degenerate(verdict: Verdict, answer_text: str | None) -> Verdict:
    """An answer stuck in a loop or dominated by repeats (`clawrl_app.degeneration`) is
    judged -1 whatever the reply said: a user who asked for brevity may say "thanks" to
    "A volcano is a volcano is a volcano", and a judge that hears only the reply would
    reward the loop. The rule's verdict is added as a vote; the hint stays (the teacher's
    answer to the request is still worth learning). An explicit rating is the reward
    whatever the judge says; the judge still reads the reply for a hint."""
    if not answer_text or verdict.score < 0:
        return verdict
    form = degeneration(answer_text)
    if not form.degenerate:
        return verdict
    log.info(
        "a degenerate answer (%s) judged %+g: counted -1", ", ".join(form.reasons), verdict.score
    )
    vote = {"rule": "degenerate", "score": -1, "reasons": list(form.reasons)}
    return replace(verdict, score=-1.0, votes=[*verdict.votes, vote])


class Judge(Protocol):
    name: str

    async def verdict(self, inp: JudgeInput, turn: TurnRow) -> Verdict: ...


class LLMJudge:
    """m concurrent PRM votes and m hint votes from a text generator."""

    def __init__(self, name: str, generate: TextGenerator, settings: JudgeSettings) -> None:
        self.name = name
        self.generate = generate
        self.settings = settings

    async def verdict(self, inp: JudgeInput, turn: TurnRow) -> Verdict:
        s = self.settings
        prm = prm_messages(inp)
        hint = hint_messages(inp)
        texts = await asyncio.gather(
            *[self.generate(prm, s.temperature, s.max_tokens) for _ in range(s.votes)],
            *[self.generate(hint, s.temperature, s.max_tokens) for _ in range(s.votes)],
        )
        prm_texts, hint_texts = texts[: s.votes], texts[s.votes :]
        scores = [parse_boxed(t) for t in prm_texts]
        hint_votes = [parse_hint_vote(t) for t in hint_texts]
        decision = select_hint(hint_votes)
        votes = [
            {"kind": "prm", "text": t, "score": sc} for t, sc in zip(prm_texts, scores, strict=True)
        ]
        votes += [
            {"kind": "hint", "text": t, "score": v.score, "hint": v.hint}
            for t, v in zip(hint_texts, hint_votes, strict=True)
        ]
        return Verdict(
            majority_vote(scores), votes, decision.hint, list(decision.candidates), decision.rule
        )


class HeuristicJudge:
    """Deterministic next-state classifier; its hint is the user's own corrective words."""

    name = "heuristic"

    async def verdict(self, inp: JudgeInput, turn: TurnRow) -> Verdict:
        if not reply_model.trained():
            # its word model trains once per process (a second or two): off the event loop
            await asyncio.to_thread(reply_model.shipped_model)
        v = classify_turn(inp)
        votes = [{"kind": "heuristic", "score": v.score, "reason": v.reason}]
        cands = [v.hint] if v.hint else []
        return Verdict(
            v.score,
            votes,
            v.hint,
            cands,
            "heuristic: the next state's own words" if v.hint else None,
        )


class PluginJudge:
    """A user's custom reward function."""

    name = "custom"
    caps_cut_off = False
    """The user's own reward decides, also for cut-off and degenerate answers (it gets the
    turn's `finish_reason`); the built-in judges never reward those (`cap_cut_off`,
    `penalize_degenerate`)."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

    async def verdict(self, inp: JudgeInput, turn: TurnRow) -> Verdict:
        turn_view = {
            "id": turn.id,
            "session_id": turn.session_id,
            "idx": turn.idx,
            "request": turn.request,
            "response": turn.response,
            "response_text": turn.response_text,
            "policy_version": turn.policy_version,
            "finish_reason": turn.finish_reason,
        }
        next_state = {"role": inp.next_state_role, "text": inp.next_state_text}
        result = coerce_reward(await asyncio.to_thread(self.fn, turn_view, next_state, inp.context))
        votes = [{"kind": "custom", "score": result.reward}]
        return Verdict(
            result.reward,
            votes,
            result.hint,
            [result.hint] if result.hint else [],
            "custom reward plugin" if result.hint else None,
        )


def policy_generator(backend: Backend, formatter: ChatFormatter) -> TextGenerator:
    """Judge votes from the served model's base weights, on the background lane."""

    async def generate(messages: list[dict[str, Any]], temperature: float, max_tokens: int) -> str:
        ids = formatter.render(messages)
        room = backend.info().context_length - len(ids)
        req = GenerationRequest(
            f"judge-{uuid.uuid4().hex[:12]}",
            ids,
            SamplingParams(max(1, min(max_tokens, room)), temperature=temperature),
            version="base",
            background=True,
        )
        out = [ev.token_id async for ev in backend.generate(req) if isinstance(ev, TokenOut)]
        return formatter.decode(out)

    return generate


def openai_generator(
    url: str, model: str, api_key: str | None, timeout_s: float = 300
) -> TextGenerator:
    """Judge votes from any OpenAI-compatible endpoint."""
    import httpx

    async def generate(messages: list[dict[str, Any]], temperature: float, max_tokens: int) -> str:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        async with httpx.AsyncClient(timeout=timeout_s) as client:
            r = await client.post(
                f"{url.rstrip('/')}/chat/completions",
                headers=headers,
                json={
                    "model": model,
                    "messages": messages,
                    "temperature": temperature,
                    "max_tokens": max_tokens,
                },
            )
            r.raise_for_status()
            return str(r.json()["choices"][0]["message"].get("content") or "")

    return generate


def judge_input(turn: TurnRow, sample: SampleRow) -> JudgeInput:
    """What the judge sees: recent context, the visible answer, the next state and its role."""
    message = turn.response.get("message") or {}
    return JudgeInput(
        context=list(turn.request.get("messages", []))[-CONTEXT_MESSAGES:],
        answer_text=message.get("content") or turn.response_text,
        answer_tool_calls=list(message.get("tool_calls") or []),
        next_state_role=sample.next_state_role or "user",
        next_state_text=sample.next_state_text or "",
        finish_reason=turn.finish_reason,
    )


async def teacher_logprobs(
    backend: Backend, formatter: ChatFormatter, turn: TurnRow, hint: str, version: str | None
) -> list[float] | None:
    """Log-probs of the turn's *sampled* response ids under the hint-augmented prompt."""
    req = turn.request
    ids = formatter.render(
        teacher_messages(req.get("messages", []), hint), req.get("tools"), req.get("tool_choice")
    )
    if len(ids) + len(turn.response_ids) > backend.info().context_length:
        return None
    lps = await backend.score(ids, list(turn.response_ids), version)
    if len(lps) != len(turn.response_ids):
        raise AssertionError(
            f"teacher log-probs misaligned: {len(lps)} != {len(turn.response_ids)}"
        )
    return lps


async def teacher_topk(
    backend: Backend,
    formatter: ChatFormatter,
    turn: TurnRow,
    hint: str,
    version: str | None,
    k: int,
) -> tuple[list[list[int]], list[list[float]]] | None:
    """The teacher's top-k distribution at each response position (for top-k OPD), when the
    backend can score it."""
    score_topk = getattr(backend, "score_topk", None)
    if k <= 0 or score_topk is None:
        return None
    req = turn.request
    ids = formatter.render(
        teacher_messages(req.get("messages", []), hint), req.get("tools"), req.get("tool_choice")
    )
    if len(ids) + len(turn.response_ids) > backend.info().context_length:
        return None
    topk_ids, topk_lps = await score_topk(ids, list(turn.response_ids), k, version)
    return list(topk_ids), list(topk_lps)


class JudgeLoop:
    """Claims pending samples and writes judgments."""

    def __init__(
        self,
        store: Store,
        backend: Backend,
        formatter: ChatFormatter,
        judge: Judge,
        *,
        settings: JudgeSettings,
        grace_s: float,
        events: EventSink | None = None,
        topk: int = 0,
        teacher_check: TeacherCheck | None = None,
        answer_tokens: int = 0,
    ) -> None:
        self.store = store
        self.answer_tokens = answer_tokens
        """> 0: the teacher also answers each hinted turn (`teacher_answer`), at most this
        many tokens when the request set no budget; 0: off."""
        self.teacher_check = teacher_check
        self.backend = backend
        self.formatter = formatter
        self.judge = judge
        self.topk = topk
        self.settings = settings
        self.grace_s = grace_s
        self.events: EventSink = events or (lambda e: None)
        self.judged = 0
        self.failed = 0
        self.last_error: str | None = None
        self.started = time.monotonic()
        self._wake = asyncio.Event()

    def poke(self) -> None:
        self._wake.set()

    def teacher_version(self) -> str | None:
        return None if self.settings.teacher == "base" else self.backend.active_version

    async def judge_sample(self, sample: SampleRow) -> bool:
        """Judge one claimed sample; False (and left unjudged) when the judge failed."""
        t0 = time.monotonic()
        turn = self.store.get_turn(sample.turn_id)
        if turn is None:
            return False
        try:
            inp = judge_input(turn, sample)
            verdict = await self.judge.verdict(inp, turn)
            if getattr(self.judge, "caps_cut_off", True):  # the built-in judges' form rules
                verdict = cap_cut_off(verdict, turn.finish_reason)
                verdict = penalize_degenerate(verdict, inp.answer_text)
            teacher, topk, shown = None, None, None
            if verdict.hint:  # one forward pass: cheap beside the teacher check
                teacher = await teacher_logprobs(
                    self.backend, self.formatter, turn, verdict.hint, self.teacher_version()
                )
            rule = verdict.hint_rule
            if teacher is not None and self.teacher_check is not None:
                checked = await self.teacher_check.verdict(
                    str(verdict.hint), turn, self.teacher_version() or "base"
                )
                if checked.with_hint is not None:
                    self.store.add_metric(
                        sample.id, "judge/teacher_trusted", float(checked.trusted)
                    )
                if not checked.trusted:  # this hint would teach loops: reward only
                    log.info("sample %s: %s", sample.id, checked.summary())
                    teacher, rule = None, checked.summary()
            if teacher is not None:  # the top-k only for a hint that teaches
                topk = await teacher_topk(
                    self.backend,
                    self.formatter,
                    turn,
                    str(verdict.hint),
                    self.teacher_version(),
                    self.topk,
                )
                shown = await teacher_shows(
                    self.backend, self.formatter, turn, str(verdict.hint),
                    self.teacher_version(), self.answer_tokens, TeacherShowing.of(self.settings),
                )  # fmt: skip
        except Exception as exc:  # user plugin or judge endpoint failure: retried later
            self.failed += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
            log.error("judging sample %s failed:\n%s", sample.id, traceback.format_exc())
            self.events(LoopFailed("judge", self.last_error))
            return False
        hint = verdict.hint if teacher is not None else None
        row = self.store.record_judgment(
            sample.id,
            self.judge.name,
            verdict.votes,
            verdict.score,
            hint,
            verdict.hint_candidates,
            rule,
            teacher,
            eligible_at=time.time() + self.grace_s,
        )
        if topk is not None and hint is not None and row.user_hint is None:
            self.store.set_teacher_topk(sample.id, *topk)
        if shown is not None and hint is not None and row.user_hint is None:
            self.store.set_teacher_answer(sample.id, shown)
        if row.user_rating is not None:  # rated before the judge read it: live agreement
            self.store.add_metric(
                sample.id, "judge/agreement", float(verdict.score == row.user_rating)
            )
        # The stored score is the user's rating where there is one (the judge only adds a hint).
        if row.score == 0 and hint is None and row.user_hint is None:
            self.store.set_sample_state(sample.id, "skipped", "no signal: reward 0 and no hint")
        self.judged += 1
        self.events(
            SampleJudged(
                sample.id,
                turn.id,
                turn.session_id,
                int(verdict.score),
                hint is not None,
                self.judge.name,
                time.monotonic() - t0,
            )
        )
        return True

    async def run_once(self, limit: int = 4) -> int:
        """Judge up to `limit` pending samples; returns how many were judged."""
        claimed = await asyncio.to_thread(self.store.claim_pending_samples, limit)
        done = 0
        for sample in claimed:
            done += int(await self.judge_sample(sample))
        return done

    async def run(self) -> None:
        while True:
            try:
                n = await self.run_once()
                self.last_error = None if n else self.last_error
            except Exception as exc:
                log_failure(log, "judge pass failed", exc)
                self.last_error = f"{type(exc).__name__}: {exc}"
                n = 0
            if n == 0:
                await wait_for_poke(self._wake, 1.0)

    def status(self) -> dict[str, Any]:
        elapsed_min = max((time.monotonic() - self.started) / 60, 1e-9)
        return {
            "judged": self.judged,
            "failed": self.failed,
            "per_min": self.judged / elapsed_min,
            "last_error": self.last_error,
        }


def build_judge(
    settings: Settings, planned: str, backend: Backend, formatter: ChatFormatter
) -> Judge:
    """The judge the settings and the plan ask for (a custom reward plugin wins)."""
    from clawrl_app.engine.core.plugins import load_reward

    s = settings.judge
    if s.custom_reward_path:
        return PluginJudge(load_reward(s.custom_reward_path))
    kind = planned if s.backend == "auto" else s.backend
    if kind == "heuristic":
        return HeuristicJudge()
    if kind == "openai":
        if not s.openai_url or not s.openai_model:
            raise ValueError("judge.backend = openai needs judge.openai_url and judge.openai_model")
        return LLMJudge(
            "openai", openai_generator(s.openai_url, s.openai_model, s.openai_api_key), s
        )
    return LLMJudge("policy", policy_generator(backend, formatter), s)
