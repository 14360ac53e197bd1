"""The swe env in real bubblewrap, git and pytest with scripted policies: the pack's shape,
the oracle resolves every shipped task and a no-op none (each task's FAIL_TO_PASS fails
and PASS_TO_PASS passes on the pristine repo), both protocols, format errors, the
observation format and the per-command sandbox. Attacks are in test_swe_security.py."""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from clawrl_app.envs import make_env
from clawrl_app.envs.base import Env, EpisodeStatus, PolicyReply, Task
from clawrl_app.envs.policies import MalformedPolicy, ScriptedPolicy, oracle_policy, tool_call
from clawrl_app.envs.runner import run_episode
from clawrl_app.envs.swe.env import SweEnv
from clawrl_app.envs.swe.protocol import SENTINEL, cap_output, parse_text_reply
from clawrl_app.envs.swe.verify import junit_key

pytestmark = pytest.mark.usefixtures("sandbox")
FAMILIES = {"boundary", "exceptions", "string", "api", "datastructure"}


def bash(command: str) -> PolicyReply:
    """A text-protocol reply: a thought and one bash block."""
    return PolicyReply(f"THOUGHT: next step.\n\n```bash\n{command}\n```")


SUBMIT = bash(f"echo {SENTINEL}")


def task(name: str) -> Task:
    return next(t for t in SweEnv().tasks() if t.id == name)


def observations(env: SweEnv, t: Task, replies: list[PolicyReply]) -> tuple[object, list[str]]:
    seen: list[str] = []
    ep = run_episode(env, t, ScriptedPolicy(replies),
                     on_turn=lambda r: seen.extend(o.text for o in r.observations))  # fmt: skip
    return ep, seen


def test_the_pack_has_five_families_with_a_heldout_task_each() -> None:
    tasks = SweEnv().tasks()
    assert len(tasks) >= 15 and len({t.id for t in tasks}) == len(tasks)
    per_family = Counter(t.family for t in tasks)
    assert set(per_family) == FAMILIES and min(per_family.values()) >= 3
    assert {t.family for t in tasks if t.split == "heldout"} == FAMILIES
    for t in tasks:
        d = Path(t.data["dir"])
        assert 15 <= t.max_steps <= 20 and (d / "solution.patch").read_text().startswith(
            "diff --git"
        )
        assert all(i.startswith("hidden_tests/") for i in t.data["fail_to_pass"])
        visible = {p.name for p in (d / "repo").rglob("test_*.py")}
        assert visible and not visible & {p.name for p in (d / "hidden_tests").glob("*.py")}
        assert not (d / "repo" / "hidden_tests").exists()


def test_oracle_resolves_and_noop_fails_every_task_text_protocol() -> None:
    """The oracle test doubles as the task check: with solution.patch every listed test
    passes; submitting the pristine repo, every F2P test fails and every P2P test passes."""
    tasks = SweEnv().tasks()

    def both(t: Task) -> tuple[str, list[str]]:
        problems = []
        good = run_episode(SweEnv(), t, oracle_policy(SweEnv(), t))
        if good.outcome_reward != 1.0 or good.status is not EpisodeStatus.COMPLETED:
            problems.append(f"oracle: {good.status} {good.reason} {good.verdict}")
        bad = run_episode(SweEnv(), t, ScriptedPolicy([SUBMIT]))
        assert bad.verdict is not None
        tests = bad.verdict.details.get("tests", {})
        if bad.outcome_reward != -1.0 or bad.verdict.infra_error:
            problems.append(f"no-op: {bad.outcome_reward} {bad.verdict}")
        if any(tests.get(i) == "passed" for i in t.data["fail_to_pass"]):
            problems.append(f"F2P passes on the pristine repo: {tests}")
        if any(tests.get(i) != "passed" for i in t.data["pass_to_pass"]):
            problems.append(f"P2P fails on the pristine repo: {tests}")
        return t.id, problems

    with ThreadPoolExecutor(2) as ex:
        results = dict(ex.map(both, tasks))
    assert {k: v for k, v in results.items() if v} == {}


def test_oracle_and_noop_with_the_tool_protocol() -> None:
    heldout = [t for t in SweEnv().tasks() if t.split == "heldout"]

    def both(t: Task) -> tuple[float | None, float | None]:
        env = SweEnv(protocol="tool")
        assert [s.name for s in env.tool_specs(t)] == ["bash", "submit"]
        good = run_episode(env, t, oracle_policy(env, t))
        bad = run_episode(SweEnv(protocol="tool"), t, ScriptedPolicy([tool_call("submit")]))
        return good.outcome_reward, bad.outcome_reward

    with ThreadPoolExecutor(2) as ex:
        assert list(ex.map(both, heldout)) == [(1.0, -1.0)] * len(heldout)


def test_the_patch_is_taken_at_evaluation_when_the_agent_never_submits() -> None:
    t = task("windows-last")
    env = SweEnv(protocol="tool")
    fix = env.oracle_replies(t)[0]
    ep = run_episode(env, t, ScriptedPolicy([fix, PolicyReply("I am done.")]))
    assert ep.reason == "reply without a tool call" and ep.outcome_reward == 1.0


@pytest.mark.parametrize("protocol", ["text", "tool"])
def test_malformed_replies_fail_after_three(protocol: str) -> None:
    policy = MalformedPolicy()
    ep = run_episode(SweEnv(protocol=protocol), task("retry-reraise"), policy)
    assert ep.status is EpisodeStatus.FAILED and policy.calls == 3
    assert all(r.parse_error for r in ep.turns) and ep.outcome_reward == -1.0


def test_text_protocol_wants_exactly_one_bash_block() -> None:
    two = PolicyReply("THOUGHT: two.\n\n```bash\nls\n```\n\n```bash\npwd\n```")
    none = PolicyReply("THOUGHT: I would run ls.")
    assert parse_text_reply(two.text).error and parse_text_reply(none.text).error
    assert parse_text_reply("```python\nprint(1)\n```").error  # only bash blocks count
    one = parse_text_reply("THOUGHT: x\n```bash\ncat a &&\n  ls\n```\n")
    assert one.actions[0].tool == "bash" and one.actions[0].arguments == {
        "command": "cat a &&\n  ls"
    }
    sent: list[list[dict[str, object]]] = []

    class Recording(ScriptedPolicy):
        def __call__(self, messages, tools, *, session_id):  # type: ignore[no-untyped-def]
            sent.append(messages)
            assert tools == []  # the text protocol offers no OpenAI tools
            return super().__call__(messages, tools, session_id=session_id)

    ep = run_episode(SweEnv(), task("chunks-fill"), Recording([two, bash("pwd"), SUBMIT]))
    assert ep.turns[0].parse_error and "EXACTLY ONE" in ep.turns[0].parse_error
    assert sent[1][-1] == {"role": "user", "content": ep.turns[0].parse_error}
    last = sent[2][-1]["content"]  # the observation itself is the user's message
    assert isinstance(last, str) and last.startswith("<returncode>0</returncode>\n<output>\n")
    assert "/workspace" in last and ep.reason == "finished" and ep.outcome_reward == -1.0


def test_observations_and_the_per_command_sandbox() -> None:
    t = task("paginate-last-page")
    env = SweEnv(command_timeout_s=2)
    assert "killed after 2 s" in env.system_prompt(t) and "at most 15 turns" in env.system_prompt(t)
    ep, seen = observations(env, t, [
        bash("cd /tmp && export X=1 && echo moved"),
        bash('pwd; echo "X=$X"; echo oops >&2; exit 3'),
        bash("python -c \"print('y' * 20000)\""),
        bash("git log --format=%s%an && git status --short && python -m pytest -q tests"),
        bash("sleep 10"),
        SUBMIT,
    ])  # fmt: skip
    assert seen[0] == "<returncode>0</returncode>\n<output>\nmoved\n</output>\n14 turns left."
    assert seen[1].startswith("<returncode>3</returncode>\n<output>\n/workspace\nX=\noops\n")
    assert seen[1].endswith("</output>\n13 turns left.")
    body = seen[2].split("<output>\n")[1].split("</output>")[0]
    assert len(body) < 5300 and "characters elided" in body and body.startswith("yyy")
    assert "baselineclawrl" in seen[3] and "3 passed" in seen[3]
    assert "timed out after 2 s" in seen[4] and ep.reason == "finished"  # type: ignore[attr-defined]
    assert cap_output("x" * 100) == "x" * 100


def test_reset_gives_a_private_git_workspace_and_close_removes_it() -> None:
    env = SweEnv()
    t = task("slugify-accents")
    first = env.reset(t)
    assert "Crème Brûlée" in first.text and "<pr_description>" in first.text
    assert env.base is not None
    ws, private = env.base.workspace, env.base.private
    assert oct(ws.stat().st_mode & 0o777) == "0o700" and (ws / ".git").is_dir()
    assert not (ws / "hidden_tests").exists() and not private.is_relative_to(ws)
    again = SweEnv()
    again.reset(t)
    assert again.base is not None and again.base.commit == env.base.commit  # fixed baseline
    env.close()
    again.close()
    env.close()  # idempotent
    assert not ws.exists() and not private.exists()


def test_junit_keys_follow_pytest() -> None:
    assert junit_key("hidden_tests/test_x.py::test_y") == "hidden_tests.test_x::test_y"
    assert junit_key("tests/test_x.py::TestA::test_b[1]") == "tests.test_x.TestA::test_b[1]"


def test_task_data_under_a_bound_prefix_is_masked(monkeypatch: pytest.MonkeyPatch) -> None:
    """Installed into the venv (bound read-only in the sandbox), the pack with its hidden
    tests would be readable by the agent: an empty folder is bound over it."""
    import clawrl_app.envs.swe.env as swe_env

    monkeypatch.setattr(swe_env, "interpreter_prefixes", lambda: [str(swe_env.DATA.parent)])
    hidden = Path(task("slugify-accents").data["dir"]) / "hidden_tests"
    cmd = f"ls -A {swe_env.DATA} && echo MASKED-EMPTY; ls {hidden}"
    _, seen = observations(SweEnv(), task("slugify-accents"), [bash(cmd), SUBMIT])
    assert seen[0].startswith("<returncode>2</returncode>\n<output>\nMASKED-EMPTY\nls: cannot")


def test_registered_and_validated() -> None:
    assert isinstance(make_env("swe", protocol="tool"), SweEnv)
    assert isinstance(SweEnv(), Env)
    with pytest.raises(ValueError, match="protocol"):
        SweEnv(protocol="xml")
