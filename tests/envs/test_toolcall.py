"""The toolcall env with scripted policies (no model): the oracle solves every shipped
task through the runner, no-op and malformed policies fail as they should; the shipped
pack is exactly what its generator writes; calculator and grading edge cases."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clawrl_app.envs import make_env
from clawrl_app.envs.base import EpisodeStatus
from clawrl_app.envs.policies import (
    MalformedPolicy,
    ScriptedPolicy,
    noop_policy,
    oracle_policy,
    tool_call,
)
from clawrl_app.envs.runner import run_episode
from clawrl_app.envs.toolcall import make_tasks
from clawrl_app.envs.toolcall.calculator import CalcError, calculate
from clawrl_app.envs.toolcall.env import DATA
from clawrl_app.envs.toolcall.grading import is_correct, normalise


def test_the_shipped_pack_is_what_the_generator_writes() -> None:
    for name, text in make_tasks.render().items():
        assert (DATA / name).read_text() == text, f"rerun python -m {make_tasks.__name__}"
    tasks = make_env("toolcall").tasks()
    families = {t.family for t in tasks}
    assert len(tasks) >= 100 and len(families) == 8
    for fam in families:
        of = [t for t in tasks if t.family == fam]
        share = 4 if fam in ("calc_one", "calc_two", "lookup_one") else 5  # the curriculum's
        assert sum(t.split == "heldout" for t in of) == len(of) // share
    assert len({t.id for t in tasks}) == len(tasks)


def test_the_oracle_solves_every_task_and_a_noop_solves_none() -> None:
    env = make_env("toolcall")
    tasks = env.tasks()

    def oracle(task):  # type: ignore[no-untyped-def]
        return run_episode(make_env("toolcall"), task, oracle_policy(env, task))

    with ThreadPoolExecutor(2) as ex:
        episodes = list(ex.map(oracle, tasks))
    failed = [(t.id, e.reason, e.verdict) for t, e in zip(tasks, episodes, strict=True)
              if e.outcome_reward != 1.0]  # fmt: skip
    assert failed == []
    assert all(e.status is EpisodeStatus.COMPLETED for e in episodes)
    for task in tasks[::25]:
        ep = run_episode(make_env("toolcall"), task, noop_policy())
        assert (ep.status, ep.outcome_reward) == (EpisodeStatus.COMPLETED, -1.0)


def test_malformed_output_fails_after_three_parse_errors() -> None:
    task = make_env("toolcall").tasks()[0]
    policy = MalformedPolicy()
    ep = run_episode(make_env("toolcall"), task, policy)
    assert ep.status is EpisodeStatus.FAILED and policy.calls == 3
    assert [t.parse_error is not None for t in ep.turns] == [True] * 3
    assert ep.outcome_reward == -1.0 and ep.trainable  # the format is the policy's fault


def test_tool_results_go_back_to_the_policy_and_a_wrong_boxed_answer_scores_minus_half() -> None:
    env = make_env("toolcall")
    task = next(t for t in env.tasks() if t.family == "number_theory" and "comb" in str(t.data))
    seen: list[list[dict]] = []  # type: ignore[type-arg]

    class Recorder(ScriptedPolicy):
        def __call__(self, messages, tools, *, session_id):  # type: ignore[no-untyped-def]
            seen.append(messages)
            return super().__call__(messages, tools, session_id=session_id)

    expr = task.data["oracle"][0]["arguments"]["expression"]
    policy = Recorder([tool_call("calculator", expression=expr), tool_call("lookup", key="x"),
                       tool_call("calculator", expression="1/0")])  # fmt: skip
    policy.replies.append(type(policy.replies[0])("Answer: \\boxed{12345678}"))
    ep = run_episode(make_env("toolcall"), task, policy)
    assert seen[1][-1] == {"role": "tool", "tool_call_id": "call_0", "content": task.data["answer"]}
    assert "not in" in seen[2][-1]["content"] or "unknown" in seen[2][-1]["content"]
    assert seen[3][-1]["content"] == "error: division by zero"
    assert ep.verdict and ep.verdict.details["given"] == "12345678" and not ep.verdict.success
    assert ep.outcome_reward == -0.5  # wrong, but in the asked format (format_bonus)
    assert [m["role"] for m in seen[0]] == ["system", "user"]


@pytest.mark.parametrize(
    "bad",
    ['__import__("os").system("id")', "().__class__", "open('/etc/passwd')", "9**9**9",
     "10**1000*10**1000", "(" * 300 + "1" + ")" * 300, "x" * 600, "lambda: 1", "[1]*10**9",
     "factorial(10**6)", "", "1 if 1 else 2", "a.b"],
)  # fmt: skip
def test_the_calculator_refuses_what_is_not_arithmetic(bad: str) -> None:
    with pytest.raises(CalcError):
        calculate(bad)


@settings(max_examples=300, deadline=1000)
@given(st.text(max_size=80))
def test_the_calculator_only_ever_answers_or_says_why(text: str) -> None:
    try:
        value = calculate(text)
    except CalcError:
        return
    assert isinstance(value, int | float) and abs(value) <= 1e100


def test_grading_normalises_and_compares_by_type() -> None:
    assert normalise(" $1,234.00 ") == "1234"
    assert is_correct("1,234", "1234", "integer")
    assert not is_correct("1234.5", "1234", "integer")
    assert is_correct("\\frac{3}{4}", "0.75", "fraction")
    assert is_correct("270.01", "270.00", "decimal", 0.01)
    assert not is_correct("270.1", "270.00", "decimal", 0.01)
    assert is_correct("tuesday", "Tuesday", "string")
    assert not is_correct(None, "1", "integer")
    assert calculate("comb(10, 3)") == 120 and calculate("2^10") == 1024


@pytest.mark.usefixtures("sandbox")
def test_the_interpreter_really_computes_the_oracle_answers() -> None:
    """The oracle answers from the task data whatever its tools return: check the tools."""
    env = make_env("toolcall")
    code_tasks = [t for t in env.tasks() if t.data["oracle"][0]["tool"] == "code_interpreter"]
    for task in code_tasks[:4]:
        ep = run_episode(make_env("toolcall"), task, oracle_policy(env, task))
        assert ep.turns[0].observations[0].text == task.data["answer"]
    from clawrl_app.envs.toolcall.python_tool import run_python

    assert run_python("import socket; socket.create_connection(('1.1.1.1', 53), 2)").exit_code
    assert run_python("while True: pass").timed_out
