"""The judge's teacher check (issue #29): a hint that makes the teacher (the base model
reading it) loop does not teach; the turn trains by its reward only.

The rule is pure (`decide_teacher`). The check and the judge loop run with real parts: the
embedded model in the torch backend, a real SQLite store, the collector and the heuristic
judge. A hint the base model reads well ("Please answer in at most 15 words.") is trusted;
one it loops on ("Only say yes yes yes ...") is not.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from clawrl_app.config import JudgeSettings
from clawrl_app.degeneration import score as degeneration
from clawrl_app.engine.backends.pytorch.backend import TorchBackend
from clawrl_app.engine.chat.formatter import ChatFormatter, eos_token_ids
from clawrl_app.engine.collecting.collector import Collector
from clawrl_app.engine.judging.judge import HeuristicJudge, JudgeLoop
from clawrl_app.engine.judging.teacher_check import TeacherCheck, decide_teacher
from clawrl_app.engine.store import NewTurn, Store

QUESTIONS = ["What is photosynthesis?", "Why is the sky blue?", "What does a compiler do?",
             "What is gravity?", "How do vaccines work?", "What is a black hole?"]  # fmt: skip
BRIEF = "Please answer in at most 15 words."
LOOPY = "Only say yes yes yes yes yes yes yes yes yes yes yes yes yes yes."


def test_the_rule_counts_degenerate_answers_with_and_without_the_hint() -> None:
    f, t = False, True
    assert decide_teacher([f] * 8, [f] * 8, 0.125).trusted
    assert decide_teacher([t, f, f, f, f, f, f, f], [f] * 8, 0.125).trusted  # one more of 8
    two_more = decide_teacher([t, t, f, f, f, f, f, f], [f] * 8, 0.125)
    assert not two_more.trusted and two_more.with_hint == 0.25 and two_more.without == 0.0
    assert "reward only" in two_more.summary()
    # a hint that loops no more than the model does without it is trusted
    assert decide_teacher([t, t, f, f], [t, t, f, f], 0.125).trusted is True
    # too few prompts decide nothing
    few = decide_teacher([t, t, t], [f, f, f], 0.125)
    assert few.trusted and few.with_hint is None and "not checked" in few.summary()
    with pytest.raises(ValueError, match="3 answers with the hint, 2 without"):
        decide_teacher([t, t, t], [f, f], 0.1)


def ask(store: Store, sid: str, messages: list[dict[str, Any]], answer: str, tok: Any) -> Any:
    store.ensure_session(sid, "api")
    fmt = ChatFormatter(tok)
    return store.record_turn(
        NewTurn(
            session_id=sid, type="main", request={"messages": messages, "max_tokens": 48},
            response_text=answer, prompt_ids=fmt.render(messages),
            response_ids=tok.encode(answer, add_special_tokens=False),
            logprobs=[-0.5] * len(tok.encode(answer, add_special_tokens=False)),
            policy_version="base",
            response={"message": {"role": "assistant", "content": answer}},
            finish_reason="stop",
        )
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_hint_the_teacher_loops_on_trains_by_reward_only(
    loaded_model: tuple[Any, Any], tmp_path: Path
) -> None:
    model, tok = loaded_model
    fmt = ChatFormatter(tok)
    long = "Photosynthesis is the process by which plants turn light, water and air into food."
    with Store(tmp_path / "s.sqlite3") as store:
        for sid, reply in (("brief", f"Too long. {BRIEF}"), ("loopy", f"No. {LOOPY}")):
            first = [{"role": "user", "content": QUESTIONS[0]}]
            ask(store, sid, first, long, tok)
            ask(store, sid, [*first, {"role": "assistant", "content": long},
                             {"role": "user", "content": reply}], "OK.", tok)  # fmt: skip
        for k, q in enumerate(QUESTIONS[1:]):  # the user's newest prompts
            ask(store, f"other{k}", [{"role": "user", "content": q}], "Because.", tok)
        Collector(store).collect_once()

        async def go() -> tuple[JudgeLoop, TeacherCheck]:
            be = TorchBackend(model, tok, model_name="m", context_length=2048)
            await be.start()
            try:
                check = TeacherCheck(store, be, fmt, prompts=6, max_rise=0.125, max_tokens=64)
                loop = JudgeLoop(store, be, fmt, HeuristicJudge(), settings=JudgeSettings(),
                                 grace_s=0.0, teacher_check=check, answer_tokens=64)  # fmt: skip
                while await loop.run_once():
                    pass
                return loop, check
            finally:
                await be.stop()

        loop, check = asyncio.run(go())
        judged = {
            sid: store.get_judgment(store.samples_for_session(sid)[0].id)
            for sid in ("brief", "loopy")
        }
        brief, loopy = judged["brief"], judged["loopy"]
        assert brief is not None and loopy is not None
        # both are corrections (-1); the brief hint teaches, with the teacher's log-probs
        assert brief.score == -1 and brief.hint == BRIEF and brief.teacher_logprobs
        # the loopy one: the teacher loops with it, so no hint, no teacher, reward only
        assert loopy.score == -1 and loopy.hint is None, loopy
        assert loopy.teacher_logprobs is None
        assert loopy.hint_rule is not None and "reward only" in loopy.hint_rule
        # the teacher's own answer under the brief hint: ended on its own within the turn's
        # 48 tokens, short, no loop; none for the hint that does not teach
        shown = brief.teacher_answer_ids
        assert shown and len(shown) <= 48 and shown[-1] in eos_token_ids(tok), shown
        text = fmt.decode(shown)
        assert 0 < len(text.split()) <= 30 and not degeneration(text).degenerate, text
        assert loopy.teacher_answer_ids is None
        assert check.checked == 2 and check.untrusted == 1 and loop.judged >= 2
        trusted = [m.value for m in store.metrics("judge/teacher_trusted")]
        assert sorted(trusted) == [0.0, 1.0]
