"""The toolcall curriculum (issue #27): held-out and train tasks never share a task, the
held-out split has templates and values of its own, one-step tasks end at their first
call with its result as the answer, and the two-step family needs `final_answer`."""

from __future__ import annotations

import re

from clawrl_app.envs import make_env
from clawrl_app.envs.base import Action, EpisodeStatus
from clawrl_app.envs.policies import ScriptedPolicy, tool_call
from clawrl_app.envs.runner import run_episode
from clawrl_app.envs.toolcall.calculator import calculate, format_number
from clawrl_app.envs.toolcall.curriculum import CALC_HELDOUT, CALC_TRAIN, LOOKUP_HELDOUT

CURRICULUM = ("calc_one", "lookup_one", "calc_two")


def _template(prompt: str) -> str:
    """A prompt with its numbers and quoted key blanked: what a template looks like."""
    return re.sub(r"\d+", "N", re.sub(r"'[^']*'", "K", prompt))


def test_train_and_heldout_are_split_by_template_and_values() -> None:
    tasks = [t for t in make_env("toolcall").tasks() if t.family in CURRICULUM]
    assert {t.family for t in tasks} == set(CURRICULUM)
    for fam in CURRICULUM:
        train = [t for t in tasks if t.family == fam and t.split == "train"]
        held = [t for t in tasks if t.family == fam and t.split == "heldout"]
        assert len(train) == 18 and len(held) == 6
        assert not {t.instruction for t in train} & {t.instruction for t in held}
        train_templates = {_template(t.instruction) for t in train}
        only_held = [t for t in held if _template(t.instruction) not in train_templates]
        assert len(only_held) == 3, fam  # half of the held-out tasks: templates of their own
        if fam == "lookup_one":  # the other half: keys no train task asks for
            train_keys = {t.data["oracle"][0]["arguments"]["key"] for t in train}
            new = [t for t in held if t not in only_held]
            assert all(t.data["oracle"][0]["arguments"]["key"] not in train_keys for t in new)
    held_prompts = {p for p, _ in CALC_HELDOUT} | set(LOOKUP_HELDOUT)
    assert not held_prompts & {p for p, _ in CALC_TRAIN}


def test_a_one_step_task_ends_at_its_first_call_with_the_result_as_the_answer() -> None:
    env = make_env("toolcall")
    task = next(t for t in env.tasks() if t.family == "calc_one")
    expr = task.data["oracle"][0]["arguments"]["expression"]
    right = run_episode(
        make_env("toolcall"), task, ScriptedPolicy([tool_call("calculator", expression=expr)])
    )
    assert (right.status, right.reason, right.outcome_reward) == (
        EpisodeStatus.COMPLETED,
        "finished",
        1.0,
    )
    assert len(right.turns) == 1
    wrong = run_episode(
        make_env("toolcall"), task, ScriptedPolicy([tool_call("calculator", expression="1 + 1")])
    )
    # a wrong result earns no format bonus on a one-step task: `calculator("17")` (a copy
    # of the first number) would otherwise beat a real try that fails
    assert wrong.outcome_reward == -1.0 and len(wrong.turns) == 1
    assert wrong.verdict and wrong.verdict.details["boxed"]  # still reported as answered
    bad = run_episode(
        make_env("toolcall"), task, ScriptedPolicy([tool_call("calculator", expression="1 +")])
    )
    assert bad.outcome_reward == -1.0 and bad.verdict and bad.verdict.details["given"] is None
    lookup = next(t for t in env.tasks() if t.family == "lookup_one")
    key = lookup.data["oracle"][0]["arguments"]["key"]
    ok = run_episode(make_env("toolcall"), lookup, ScriptedPolicy([tool_call("lookup", key=key)]))
    assert ok.outcome_reward == 1.0
    assert "exactly one tool call" in env.system_prompt(lookup)


def test_a_one_step_task_scores_no_guess_above_a_real_try() -> None:
    """Before: `final_answer("10.0")` on a lookup task scored -0.5 (an answer in the asked
    form) and a lookup of a misspelt key -1, so training taught the model to guess (seed 1,
    round 2: every held-out lookup answered by final_answer). One-step tasks offer only
    their own tools and score +1 or -1."""
    env = make_env("toolcall")
    lookup = next(t for t in env.tasks() if t.family == "lookup_one")
    assert [s.name for s in env.tool_specs(lookup)] == ["lookup", "calculator"]
    calc = next(t for t in env.tasks() if t.family == "calc_one")
    assert [s.name for s in env.tool_specs(calc)] == ["calculator"]
    two = next(t for t in env.tasks() if t.family == "calc_two")
    assert [s.name for s in env.tool_specs(two)] == ["calculator", "final_answer"]
    key = lookup.data["oracle"][0]["arguments"]["key"]

    def reward(action: dict) -> float | None:  # type: ignore[type-arg]
        return run_episode(make_env("toolcall"), lookup, ScriptedPolicy([action])).outcome_reward

    misspelt = reward(tool_call("lookup", key=key[:-1] + "_x"))
    wrong_tool = reward(tool_call("calculator", expression="2 * 5"))
    assert reward(tool_call("lookup", key=key)) == 1.0
    assert wrong_tool == misspelt == -1.0  # a number from the wrong tool earns no bonus
    env.reset(lookup)
    env.final_answer("Answer: \\boxed{10}")  # text instead of a call
    assert env.outcome_reward(env.evaluate()) == -1.0


def test_the_two_step_family_needs_final_answer_after_the_call() -> None:
    env = make_env("toolcall")
    task = next(t for t in env.tasks() if t.family == "calc_two")
    expr = task.data["oracle"][0]["arguments"]["expression"]
    answer = task.data["answer"]
    repeat = [tool_call("calculator", expression=expr)] * 3  # what the base model does
    looped = run_episode(make_env("toolcall"), task, ScriptedPolicy(repeat))
    assert (looped.status, looped.outcome_reward) == (EpisodeStatus.TRUNCATED, -1.0)
    solved = run_episode(
        make_env("toolcall"),
        task,
        ScriptedPolicy(
            [tool_call("calculator", expression=expr), tool_call("final_answer", answer=answer)]
        ),
    )
    assert solved.outcome_reward == 1.0 and len(solved.turns) == 2
    assert "final_answer" in env.system_prompt(task)


def test_the_two_step_bonus_pays_only_for_the_calculators_result_passed_on() -> None:
    """At top-p 1 seed 1 learned to end calc_two episodes with `final_answer("123")` (alone or
    after a call): -0.5 like any wrong answer in the asked form. The bonus now needs the
    answer to be what the calculator returned in the episode."""
    task = next(t for t in make_env("toolcall").tasks() if t.family == "calc_two")
    expr = task.data["oracle"][0]["arguments"]["expression"]
    wrong_expr = expr.replace("*", "+") if "*" in expr else expr + " + 1"
    wrong_result = format_number(calculate(wrong_expr))

    def reward(*actions: dict) -> float | None:  # type: ignore[type-arg]
        return run_episode(make_env("toolcall"), task, ScriptedPolicy(list(actions))).outcome_reward

    calc = tool_call("calculator", expression=wrong_expr)
    guess = tool_call("final_answer", answer="123")
    assert wrong_result != "123" != str(task.data["answer"])
    assert reward(guess) == -1.0  # a guess, no call
    assert reward(calc, guess) == -1.0  # a call, then a guess
    assert reward(calc, tool_call("final_answer", answer=wrong_result)) == -0.5  # passed on
    right = tool_call("final_answer", answer=task.data["answer"])
    assert reward(tool_call("calculator", expression=expr), right) == 1.0


def test_the_two_step_result_says_what_comes_next_and_counts_when_passed_on() -> None:
    """calc_two's scaffold: the calculator's result ends with "Now call final_answer with
    <result>." (without it the base model repeats the call). A non-integer result passed on
    to an integer task still earns the passed-on bonus (it compared as an integer before)."""
    env = make_env("toolcall")
    two = next(t for t in env.tasks() if t.family == "calc_two")
    env.reset(two)
    out = env.step(Action(tool="calculator", arguments={"expression": "30 / 4"}))
    assert out.observation.text == "7.5\nNow call final_answer with 7.5."
    env.step(Action(tool="final_answer", arguments={"answer": "7.5"}))
    assert env.evaluate().details["from_tool"] is True
    assert env.outcome_reward(env.evaluate()) == -0.5
    failed = make_env("toolcall")
    failed.reset(two)
    err = failed.step(Action(tool="calculator", arguments={"expression": "{1}"}))
    assert err.observation.error and "final_answer" not in err.observation.text
    one = next(t for t in env.tasks() if t.family == "calc_one")
    plain = make_env("toolcall")
    plain.reset(one)
    assert (
        plain.step(Action(tool="calculator", arguments={"expression": "30 / 4"})).observation.text
        == "7.5"
    )
