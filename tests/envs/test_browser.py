"""The browser env with real Chromium, a real loopback server and scripted policies (no
mocks): the oracle solves every shipped task through the runner, a no-op fails the
feasible ones, infeasible tasks need terminate(failure) (running out of steps is not it),
malformed replies fail after three, snapshot refs are stable, bad arguments are the
policy's fault, each episode gets a fresh context, and close() leaves no process behind.

One env with `keep_browser=True` is shared by most tests to keep the time down."""

from __future__ import annotations

import contextlib
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from clawrl_app.envs import make_env
from clawrl_app.envs.base import Action, EpisodeStatus, PolicyReply, Task, TurnRecord
from clawrl_app.envs.browser.env import BrowserEnv
from clawrl_app.envs.browser.evaluators import evaluate_spec
from clawrl_app.envs.browser.launcher import find_chromium, playwright_available, stat_fields
from clawrl_app.envs.judge import HeuristicJudge
from clawrl_app.envs.policies import MalformedPolicy, ScriptedPolicy, oracle_policy, tool_call
from clawrl_app.envs.runner import EpisodeLimits, run_episode, run_group

if not playwright_available():
    pytest.skip("Playwright is missing: pip install playwright", allow_module_level=True)
if find_chromium() is None:
    pytest.skip("Chromium is missing: apt-get install -y chromium", allow_module_level=True)


@pytest.fixture(scope="module")
def env() -> Iterator[BrowserEnv]:
    e = make_env("browser", keep_browser=True)
    assert isinstance(e, BrowserEnv)
    yield e
    e.shutdown()


def _task(env: BrowserEnv, task_id: str) -> Task:
    return next(t for t in env.tasks() if t.id == task_id)


def test_the_pack_has_five_sites_infeasible_and_heldout_tasks(env: BrowserEnv) -> None:
    tasks = env.tasks()
    sites = {t.data["site"] for t in tasks}
    assert len(tasks) >= 25 and len(sites) >= 5 and len({t.id for t in tasks}) == len(tasks)
    assert sum(bool(t.data.get("infeasible")) for t in tasks) >= 3
    for site in sites:
        assert any(t.split == "heldout" for t in tasks if t.data["site"] == site), site
    for t in tasks:
        assert t.max_steps >= len(t.data.get("oracle", [])) + 1, t.id
        assert t.data.get("infeasible") or t.data["oracle"], t.id


def _on_two_browsers(
    env: BrowserEnv, tasks: list[Task], fn: Callable[[BrowserEnv, Task], Any]
) -> list[tuple[Task, Any]]:
    """`fn(env, task)` for every task, half of them on a second browser (one per core)."""
    second = BrowserEnv(keep_browser=True)

    def run(e: BrowserEnv, chunk: list[Task]) -> list[tuple[Task, Any]]:
        return [(t, fn(e, t)) for t in chunk]

    try:
        with ThreadPoolExecutor(2) as ex:
            parts = ex.map(run, [env, second], [tasks[::2], tasks[1::2]])
            return [pair for part in parts for pair in part]
    finally:
        second.shutdown()


def test_the_oracle_solves_every_task(env: BrowserEnv) -> None:
    tasks = env.tasks()
    done = _on_two_browsers(env, tasks, lambda e, t: run_episode(e, t, oracle_policy(e, t)))
    assert len(done) == len(tasks)
    failed = [(t.id, ep.status, ep.reason, ep.verdict) for t, ep in done
              if (ep.status, ep.outcome_reward) != (EpisodeStatus.COMPLETED, 1.0)]  # fmt: skip
    assert failed == []


def _noop(env: BrowserEnv, task: Task) -> tuple[float | None, float]:
    """(probe score on the start page for infeasible tasks, reward of terminate(success))."""
    first = env.reset(task)
    assert first.infra_error is None and task.instruction in first.text
    probe = None
    if task.data.get("infeasible"):  # the site really cannot do it
        probe, _ = env._call(lambda _b: evaluate_spec(env._page.page, task.data["probe"]))
    assert env.step(Action("terminate", {"status": "success"})).done
    reward = env.outcome_reward(env.evaluate())
    env.close()
    return probe, reward


def test_a_noop_fails_every_task_and_infeasible_probes_fail_on_the_site(env: BrowserEnv) -> None:
    for task, (probe, reward) in _on_two_browsers(env, env.tasks(), _noop):
        assert reward == -1.0, task.id
        assert probe in (None, 0.0), task.id


def test_infeasible_needs_terminate_failure_not_running_out_of_steps(env: BrowserEnv) -> None:
    task = next(t for t in env.tasks() if t.data.get("infeasible"))
    waits = ScriptedPolicy([tool_call("wait", seconds=0)] * 5)
    ep = run_episode(env, task, waits, limits=EpisodeLimits(max_steps=2))
    assert ep.status is EpisodeStatus.TRUNCATED and ep.outcome_reward == -1.0
    silent = ScriptedPolicy([])  # a reply without a tool call is not a terminate either
    ep = run_episode(env, task, silent)
    assert ep.outcome_reward == -1.0
    gave_up = ScriptedPolicy([tool_call("terminate", status="failure")])
    assert run_episode(env, task, gave_up).outcome_reward == 1.0
    feasible = _task(env, "todo-01")  # giving up on a feasible task is a failure
    ep = run_episode(env, feasible, ScriptedPolicy([tool_call("terminate", status="failure")]))
    assert ep.outcome_reward == -1.0 and ep.verdict is not None
    assert ep.verdict.details["reason"].startswith("the agent gave up")


def test_malformed_replies_fail_after_three(env: BrowserEnv) -> None:
    policy = MalformedPolicy()
    ep = run_episode(env, _task(env, "todo-01"), policy)
    assert ep.status is EpisodeStatus.FAILED and policy.calls == 3
    assert ep.outcome_reward == -1.0 and ep.trainable


def _line(text: str, start: str) -> str:
    return next(x for x in text.splitlines() if start in x)


def _ref(line: str) -> str:
    return line.split("]")[0].lstrip("[")


def test_snapshot_lines_and_refs_are_stable_and_point_at_their_elements(env: BrowserEnv) -> None:
    first = env.reset(_task(env, "signup-01"))
    text = first.text
    assert first.snapshot is not None and first.snapshot in text
    assert "url: /index.html" in text and "title: Sign up - Nimbus" in text
    assert 'heading "Create your Nimbus account" level=1' in text
    assert _line(text, 'textbox "Email"').endswith('value=""')
    assert 'selected="Free" options="Free|Pro|Team"' in _line(text, 'combobox "Plan"')
    assert _line(text, 'checkbox "I accept the terms').endswith("checked=false")
    assert 'href="/checkout.html"' in _line(text, 'link "Shop"')
    email = _ref(_line(text, 'textbox "Email"'))
    out = env.step(Action("type", {"ref": email, "text": "ada@example.test"}))
    assert f'+ [{email}] textbox "Email" value="ada@example.test"' in out.observation.text
    again = env.step(Action("wait", {"seconds": 0}))
    assert "changes: none" in again.observation.text  # same page, same refs
    assert [x for x in (again.observation.snapshot or "").splitlines() if "Email" not in x] == [
        x for x in (first.snapshot or "").splitlines() if "Email" not in x
    ]
    tag = env._call(lambda _b: env._page.page.get_attribute(f'[data-clawrl-ref="{email}"]', "id"))
    assert tag == "email"
    env.close()
    # A re-rendered list: the items get new refs, the rest of the page keeps its own.
    todo = env.reset(_task(env, "todo-01")).text
    box = _ref(_line(todo, 'textbox "New todo"'))
    heading = _line(todo, 'heading "Todos"')
    out = env.step(Action("type", {"ref": box, "text": "Feed the cat", "submit": True}))
    assert heading in out.observation.text and "+ [" in out.observation.text
    assert 'checkbox "Feed the cat" checked=false' in out.observation.text
    env.close()


def test_bad_arguments_are_the_policys_fault_and_points_can_be_clicked(env: BrowserEnv) -> None:
    text = env.reset(_task(env, "signup-01")).text
    plan = _ref(_line(text, 'combobox "Plan"'))
    bad = [
        Action("click", {"ref": "e999"}),
        Action("click", {"ref": "#email"}),
        Action("click", {}),
        Action("select", {"ref": plan, "value": "Enterprise"}),
        Action("type", {"ref": plan, "text": "x"}),
        Action("check", {"ref": plan, "on": True}),
        Action("press", {"keys": ["Ctrl+Alt+Boom"]}),
        Action("wait", {"seconds": 10}),
        Action("scroll", {"dy": "down"}),
        Action("terminate", {"status": "maybe"}),
        Action("fly", {}),
    ]
    for action in bad:
        out = env.step(action)
        assert out.observation.error and out.observation.infra_error is None, action
        assert not out.done and "page:" in out.observation.text, action
    assert "options: 'Free', 'Pro', 'Team'" in env.step(bad[3]).observation.text
    register = _ref(_line(text, 'button "Register"'))
    box = env._call(
        lambda _b: env._page.page.locator(f'[data-clawrl-ref="{register}"]').bounding_box()
    )
    x, y = int((box["x"] + 5) * 1000 / 1280), int((box["y"] + 5) * 1000 / 800)
    out = env.step(Action("click", {"x": x, "y": y}))
    assert out.observation.error is None and "Error: enter your full name" in out.observation.text
    assert (
        env.step(Action("press", {"keys": ["Tab", "Shift+Tab", "Space"]})).observation.error is None
    )
    assert env.step(Action("scroll", {"dy": 300})).observation.error is None
    env.close()


def test_the_heuristic_judge_gives_minus_one_when_the_page_did_not_change(env: BrowserEnv) -> None:
    task = _task(env, "todo-01")
    env.reset(task)
    judge = HeuristicJudge()
    same = env.step(Action("wait", {"seconds": 0})).observation
    changed = env.step(Action("goto", {"path": "/index.html#/active"})).observation
    env.close()
    turn = TurnRecord(0, [], "", actions=[Action("wait", {"seconds": 0})], observations=[same])
    assert judge.score(task, [], turn) == -1.0
    turn = TurnRecord(1, [], "", actions=[Action("goto", {"path": "x"})], observations=[changed])
    assert judge.score(task, [], turn) == 1.0


def test_a_fresh_context_per_episode_and_screenshots_on_request() -> None:
    env = BrowserEnv(keep_browser=True, screenshot=True)
    try:
        task = _task(env, "todo-01")
        first = env.reset(task)
        assert first.image_png is not None and first.image_png.startswith(b"\x89PNG")
        box = _ref(_line(first.text, 'textbox "New todo"'))
        env.step(Action("type", {"ref": box, "text": "Secret from episode 1", "submit": True}))
        env.close()
        second = env.reset(task)
        assert "Secret from episode 1" not in second.text
        stored = env._call(lambda _b: env._page.page.evaluate("localStorage.getItem('todos')"))
        assert "Secret" not in stored
    finally:
        env.shutdown()


def test_reset_time_cold_and_warm(env: BrowserEnv, capsys: pytest.CaptureFixture[str]) -> None:
    cold_env = BrowserEnv()
    task = _task(env, "signup-01")
    try:
        t0 = time.monotonic()
        assert cold_env.reset(task).infra_error is None
        cold = time.monotonic() - t0
        cold_env.close()  # keep_browser=False: the next reset launches again
    finally:
        cold_env.close()
    warm = []
    for _ in range(5):
        env.reset(task)
        warm.append(env.reset_seconds[-1])
        env.close()
    with capsys.disabled():
        print(f"\nbrowser reset: cold {cold:.2f} s, warm median {statistics.median(warm):.2f} s")
    assert statistics.median(warm) < 3.0


class _PerSession:
    """The same scripted replies for each session (episodes of a group run in parallel)."""

    def __init__(self, replies: list[PolicyReply]) -> None:
        self.replies, self.queues = replies, {}  # type: dict[str, list[PolicyReply]]

    def __call__(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, session_id: str
    ) -> PolicyReply:
        queue = self.queues.setdefault(session_id, list(self.replies))
        return queue.pop(0) if queue else PolicyReply("")


def test_episodes_run_in_parallel_threads_with_their_own_browsers(env: BrowserEnv) -> None:
    task = _task(env, "todo-06")
    policy = _PerSession(env.oracle_replies(task))
    eps = run_group(lambda: make_env("browser"), task, policy, n=2, concurrency=2)
    assert [ep.outcome_reward for ep in eps] == [1.0, 1.0]


def _chromium_pids(pids: set[int]) -> set[int]:
    return {pid for pid in pids if stat_fields(pid)[:1] not in ([], ["Z"])}


def test_close_leaves_no_browser_process_and_is_idempotent() -> None:
    env = BrowserEnv()
    task = env.tasks()[0]
    assert env.reset(task).infra_error is None
    procs = env.runtime.processes()
    names = set()
    for pid in procs:
        with contextlib.suppress(OSError):
            names.add(Path(f"/proc/{pid}/comm").read_text().strip())
    assert any("chrom" in n for n in names), names
    env.close()
    env.close()
    time.sleep(0.2)
    assert _chromium_pids(procs) == set()


def test_the_package_imports_without_playwright_and_reset_says_how_to_install() -> None:
    code = (
        "import sys; sys.modules['playwright'] = None\n"
        "from clawrl_app.envs import make_env\n"
        "env = make_env('browser')\n"
        "obs = env.reset(env.tasks()[0])\n"
        "print(obs.infra_error)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "pip install playwright" in out.stdout and "apt-get install -y chromium" in out.stdout


def test_oracle_replies_are_openai_tool_calls(env: BrowserEnv) -> None:
    replies = env.oracle_replies(_task(env, "settings-02"))
    calls: list[dict[str, Any]] = [r.tool_calls[0] for r in replies]
    assert calls[-1]["function"] == {"name": "terminate", "arguments": '{"status": "success"}'}
    assert all(c["type"] == "function" and c["id"] for c in calls)
    assert json.loads(calls[0]["function"]["arguments"])["ref"].startswith("e")
