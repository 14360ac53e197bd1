"""Action parsing, final answers, rewards and the heuristic step judge (pure functions)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clawrl_app.envs.base import (
    Action,
    Episode,
    EpisodeStatus,
    Observation,
    PolicyReply,
    Task,
    ToolSpec,
    TurnRecord,
)
from clawrl_app.envs.judge import HeuristicJudge, vote_value
from clawrl_app.envs.parsing import final_answer_text, last_boxed, parse_reply
from clawrl_app.envs.rewards import centre, pass_fraction_reward, turn_advantages
from clawrl_app.envs.runner import fit_context

CALC = ToolSpec("calculator", "", {"type": "object", "properties": {"expression": {"type": "string"}},
                                   "required": ["expression"]})  # fmt: skip
CODE = ToolSpec("code_interpreter", "", {"type": "object", "properties": {"code": {"type": "string"}},
                                         "required": ["code"]})  # fmt: skip


def native(name: str, args: str) -> PolicyReply:
    return PolicyReply(
        "", [{"id": "c1", "type": "function", "function": {"name": name, "arguments": args}}]
    )


def test_tool_calls_native_textual_and_fenced() -> None:
    r = parse_reply(native("calculator", '{"expression": "1+1"}'), [CALC])
    assert r.native and r.actions == [Action("calculator", {"expression": "1+1"}, call_id="c1")]
    text = 'ok <tool_call>{"name": "calculator", "arguments": {"expression": "2*3"}}</tool_call>'
    assert parse_reply(PolicyReply(text), [CALC]).actions[0].arguments == {"expression": "2*3"}
    fenced = PolicyReply("```python\nprint(6*7)\n```")
    got = parse_reply(fenced, [CALC, CODE], {"python": "code_interpreter.code"})
    assert got.actions == [Action("code_interpreter", {"code": "print(6*7)\n"})]
    assert parse_reply(PolicyReply("Answer: \\boxed{4}"), [CALC]).actions == []


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        (native("calculator", "{oops"), "not valid JSON"),
        (native("shell", "{}"), "unknown tool 'shell'"),
        (native("calculator", "{}"), "needs the argument(s) expression"),
        (native("calculator", '{"expression": 5}'), "must be a string"),
        (native("calculator", "[1]"), "must be a JSON object"),
        (PolicyReply("<tool_call>{nope</tool_call>"), "not valid JSON"),
        (PolicyReply('<tool_call>["calculator"]</tool_call>'), "JSON object"),
    ],
)
def test_bad_tool_calls_say_what_is_wrong(reply: PolicyReply, error: str) -> None:
    r = parse_reply(reply, [CALC])
    assert r.actions == [] and r.error is not None and error in r.error


@settings(max_examples=300, deadline=1000)
@given(
    st.text(max_size=200),
    st.lists(st.dictionaries(st.text(max_size=5), st.text(max_size=5)), max_size=2),
)
def test_the_parser_never_raises(text: str, calls: list) -> None:  # type: ignore[type-arg]
    r = parse_reply(PolicyReply(text, calls), [CALC, CODE], {"python": "code_interpreter.code"})
    assert r.error is None or isinstance(r.error, str)
    final_answer_text(text)


def test_final_answers() -> None:
    assert last_boxed("a \\boxed{1} b \\boxed{\\frac{1}{2}}") == "\\frac{1}{2}"
    assert last_boxed("\\boxed{unclosed") is None
    assert final_answer_text("so the Answer: 42.") == "42"
    assert final_answer_text("nothing here") is None
    assert vote_value("think... \\boxed{1}") == 1.0 and vote_value("\\boxed{-1}") == -1.0
    assert vote_value("\\boxed{+1} then \\boxed{0}") is None and vote_value("score: +1") is None


def ep(outcome: float | None, steps: list[float | None], status: str = "completed") -> Episode:
    e = Episode("toolcall", "t", EpisodeStatus(status), outcome_reward=outcome)
    e.turns = [TurnRecord(i, [], "", judge_score=s) for i, s in enumerate(steps)]
    return e


def test_group_advantages() -> None:
    assert pass_fraction_reward(0.5) == 0.0 and pass_fraction_reward(1.0) == 1.0
    assert centre([1.0, 1.0, 1.0]) == [0.0, 0.0, 0.0]
    group = [ep(1.0, [None, None]), ep(-1.0, [None]), ep(None, [None], "aborted"), ep(-1.0, [None])]
    adv = turn_advantages(group)
    assert adv[2] is None  # an infrastructure failure is never trained on, nor counted
    assert adv[0] == [1.0, 1.0]  # 4/3 clipped to the store's range
    assert adv[1] == adv[3] == [pytest.approx(-2 / 3)]
    same = turn_advantages([ep(-1.0, [None]), ep(-1.0, [None])])
    assert same == [[0.0], [0.0]]  # all failed: nothing to learn from the outcome alone
    # step mode: the judge separates equal outcomes, per step index
    step = turn_advantages([ep(-1.0, [1.0, -1.0]), ep(-1.0, [-1.0, -1.0])], mode="step", coef=0.5)
    assert step == [[0.5, 0.0], [-0.5, 0.0]]
    with pytest.raises(ValueError):
        turn_advantages(group, mode="bogus")


def test_heuristic_judge_rules() -> None:
    task = Task("t", "terminal", "f", "Write the count to answer.txt")
    j = HeuristicJudge()
    bad = TurnRecord(0, [], "", parse_error="bad json")
    assert j.score(task, [], bad) == -1.0
    failed = TurnRecord(0, [], "", [Action("shell_exec", {"command": "foo"})],
                        [Observation("sh: foo: command not found", exit_code=127)])  # fmt: skip
    assert j.score(task, [], failed) == -1.0
    wrote = TurnRecord(1, [], "", [Action("shell_exec", {"command": "echo 7 > answer.txt"})],
                       [Observation("exit_code=0\nfiles changed: answer.txt", exit_code=0)])  # fmt: skip
    assert j.score(task, [failed], wrote) == 1.0
    assert j.score(task, [wrote], wrote) == -1.0  # the same step again, same result
    assert j.score(task, [], TurnRecord(0, [], "done")) == 0.0


def test_context_is_cut_from_the_middle_keeping_the_task() -> None:
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "task"}]
    for i in range(20):
        msgs += [
            {"role": "assistant", "content": f"a{i}" * 50},
            {"role": "user", "content": f"r{i}"},
        ]
    cut = fit_context(msgs, 2000)
    assert cut is not None and cut[:2] == msgs[:2] and cut[-1] == msgs[-1]
    assert any("earlier turns omitted" in str(m["content"]) for m in cut)
    assert fit_context(msgs, 10) is None and fit_context(msgs[:2], 10_000) == msgs[:2]


def test_a_group_has_signal_only_when_some_advantage_is_not_zero() -> None:
    from clawrl_app.envs.training import RoundReport, group_varied

    assert group_varied([[0.5, 0.0], [-0.5], None])
    assert not group_varied([[0.0, 0.0], [0.0], None]) and not group_varied([None, None])
    rep = RoundReport(groups=4, varied=1)
    rep.add(RoundReport(groups=4, varied=0))
    assert (rep.groups, rep.varied, rep.varied_share) == (8, 1, 0.125)
    assert RoundReport().varied_share is None  # no training group (evaluation)


def test_outcome_variance_is_told_from_step_score_variance() -> None:
    from clawrl_app.envs.base import Verdict
    from clawrl_app.envs.training import group_varied, outcomes_differ

    def judged(success: bool, steps: list[float | None]) -> Episode:
        e = ep(1.0 if success else -1.0, steps)
        e.verdict = Verdict(1.0 if success else 0.0, success)
        return e

    failed = [judged(False, [1.0]), judged(False, [-1.0])]  # all failed, steps differ
    advantages = turn_advantages(failed, mode="sequence", coef=0.5)
    assert group_varied(advantages) and not outcomes_differ(failed)  # form only
    assert outcomes_differ([judged(True, [1.0]), judged(False, [1.0])])
    aborted = judged(True, [1.0])
    aborted.status = EpisodeStatus("aborted")  # not trainable: never counts
    assert not outcomes_differ([aborted, judged(False, [1.0])])
