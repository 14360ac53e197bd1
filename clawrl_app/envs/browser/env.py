"""`browser`: tasks on small local web sites, checked on the live page (ENVS.md §5.7 D).

Playwright drives Debian's Chromium; each episode gets the task's site on a loopback
server and a fresh BrowserContext. The policy sees the page as a text snapshot with refs
and acts with a closed set of tools (click, type, select, check, press, scroll, goto,
back, wait, terminate). After the episode the task's checks run on the live page; the
reward is +1 when they all pass, else -1 (`reward="score"`: 2 * score - 1). An
`infeasible` task is solved only by `terminate(failure)`; running out of steps is not
that (upstream scored it as success). This module imports without Playwright: a missing
browser is an infra error at `reset`, with the install command.
"""

from __future__ import annotations

import json
import time
from functools import cache
from pathlib import Path
from typing import Any

from clawrl_app.envs.base import (
    Action,
    Observation,
    PolicyReply,
    StepResult,
    Task,
    ToolSpec,
    Verdict,
)
from clawrl_app.envs.browser.actions import TOOL_NAMES, TOOLS, browser_gone
from clawrl_app.envs.browser.evaluators import evaluate_spec, validate_spec
from clawrl_app.envs.browser.launcher import BrowserRuntime
from clawrl_app.envs.rewards import binary_reward, pass_fraction_reward

DATA = Path(__file__).resolve().parents[1] / "data" / "browser"
MAX_STEPS = 15
SYSTEM = (
    "You operate a web browser on a small web site to do the user's task. Each page comes "
    'as a text snapshot, one element per line, e.g. [e7] button "Save"; act on elements by '
    "their ref (e7) with the tools: {tools}. After each action you get the new page and "
    "what changed. Call one tool per turn. When the task is done, call terminate with "
    'status "success"; if the site cannot do what is asked, call terminate with status '
    '"failure". At most {turns} turns.'
)


def _task_from_line(d: dict[str, Any], folder: Path) -> Task:
    for key in ("id", "site", "instruction", "family"):
        if key not in d:
            raise ValueError(f"missing `{key}`")
    site = folder / "sites" / str(d["site"])
    if not (site / str(d.get("start", "index.html"))).is_file():
        raise ValueError(f"no start page {d.get('start', 'index.html')!r} in {site}")
    # A feasible task has checks; an infeasible one only its terminate(failure), and a
    # `probe`: checks that fail on the site, showing that it cannot do what is asked.
    validate_spec(d.get("probe") if d.get("infeasible") else d.get("evaluator"))
    if d.get("split", "train") not in ("train", "heldout"):
        raise ValueError("`split` must be train or heldout")
    for step in d.get("oracle", []):
        if step.get("tool") not in TOOL_NAMES - {"terminate"}:
            raise ValueError(f"oracle step with unknown tool {step.get('tool')!r}")
    data = {**d, "site_dir": str(site), "start": str(d.get("start", "index.html"))}
    return Task(
        id=d["id"], env="browser", family=d["family"], instruction=d["instruction"],
        max_steps=int(d.get("max_steps", MAX_STEPS)), split=d.get("split", "train"), data=data,
    )  # fmt: skip


@cache
def load_tasks(folder: Path = DATA) -> tuple[Task, ...]:
    """The tasks of `folder/tasks.jsonl`; ValueError naming the line that is wrong."""
    out = []
    path = folder / "tasks.jsonl"
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip():
            try:
                out.append(_task_from_line(json.loads(line), folder))
            except (ValueError, TypeError, AttributeError) as exc:
                raise ValueError(f"{path} line {n}: {exc}") from exc
    return tuple(out)


class BrowserEnv:
    """The browser env. `keep_browser=True` keeps Chromium running between episodes
    (`close()` then ends only the episode; `shutdown()` stops the browser): a fresh
    context per episode either way."""

    name = "browser"

    def __init__(
        self,
        data_dir: str | Path | None = None,
        screenshot: bool = False,
        keep_browser: bool = False,
        reward: str = "binary",
        executable: str | None = None,
        call_timeout_s: float = 60.0,
        allow_unsafe: bool = False,
    ) -> None:
        # `allow_unsafe` (the CLI's flag for the shell envs) changes nothing here: the
        # browser needs no OS sandbox, its isolation is the context and the route filter.
        if reward not in ("binary", "score"):
            raise ValueError(f"reward must be binary or score, not {reward!r}")
        self.data_dir = Path(data_dir) if data_dir else DATA
        self.screenshot = screenshot
        self.keep_browser = keep_browser
        self.reward = reward
        self.call_timeout_s = call_timeout_s
        self.runtime = BrowserRuntime(executable)
        self.task: Task | None = None
        self._page: Any = None  # the EpisodePage; only touched on the runtime's thread
        self._page_generation = -1  # the runtime generation that made it
        self.reset_seconds: list[float] = []
        """How long each `reset` took (the episode start-up time)."""

    def tasks(self) -> list[Task]:
        """Every task of the pack (`tasks.jsonl` beside `sites/`)."""
        return list(load_tasks(self.data_dir))

    def tool_specs(self, task: Task) -> list[ToolSpec]:
        """The closed action set, the same for every task."""
        return TOOLS

    def system_prompt(self, task: Task) -> str:
        """How to read the snapshot and act, and the turn limit."""
        return SYSTEM.format(tools=", ".join(t.name for t in TOOLS), turns=task.max_steps)

    def _call(self, fn: Any, *args: Any, launch: bool = True) -> Any:
        return self.runtime.call(fn, *args, timeout_s=self.call_timeout_s, launch=launch)

    def _open(self, browser: Any, task: Task) -> Any:
        from clawrl_app.envs.browser.session import EpisodePage

        return EpisodePage(browser, Path(task.data["site_dir"]), task.data["start"],
                           screenshot=self.screenshot)  # fmt: skip

    def reset(self, task: Task, *, seed: int | None = None) -> Observation:
        """Serve the task's site, open its start page in a fresh context; the instruction
        and the first snapshot. A browser that cannot start is an `infra_error`."""
        self._end_episode()
        self.task = task
        t0 = time.monotonic()
        try:
            self._page = self._call(self._open, task)
            self._page_generation = self.runtime.generation
            first = self._call(lambda _b: self._page.observe("opened the site"))
        except Exception as exc:  # no Playwright, no Chromium, a browser that would not start
            self._page = None
            return Observation("", infra_error=f"{type(exc).__name__}: {exc}")
        self.reset_seconds.append(time.monotonic() - t0)
        return Observation(f"{task.instruction}\n\n{first.text}", image_png=first.image_png,
                           snapshot=first.snapshot)  # fmt: skip

    def _live_page(self) -> Any:
        """The episode's page, or None when the browser under it was killed or relaunched."""
        if self._page is None or self._page_generation != self.runtime.generation:
            return None
        return self._page

    def step(self, action: Action) -> StepResult:
        """One action on the live page; the next state (an error observation for the
        policy's mistakes, an `infra_error` when the browser failed)."""
        assert self._page is not None, "step() before reset()"
        page = self._live_page()
        if page is None:
            return StepResult(Observation("", infra_error="the browser was restarted"))
        try:
            result: StepResult = self._call(lambda _b: page.act(action), launch=False)
        except Exception as exc:  # a hung browser, or a bug of ours: not the policy's fault
            return StepResult(Observation("", infra_error=f"{type(exc).__name__}: {exc}"))
        return result

    def final_answer(self, text: str) -> StepResult | None:
        """A reply without a tool call just ends the episode."""
        return None  # a reply without a tool call ends the episode (not a terminate)

    def _verdict(self, _browser: Any) -> Verdict:
        assert self.task is not None and self._page is not None
        page, data = self._page, self.task.data
        details: dict[str, Any] = {"terminated": page.terminated, **page.info()}
        if data.get("infeasible"):
            ok = page.terminated == "failure"  # out of steps is not a "failure" verdict
            details["reason"] = "infeasible: needs terminate(failure)"
            return Verdict(1.0 if ok else 0.0, ok, details)
        if page.terminated == "failure":
            details["reason"] = "the agent gave up on a feasible task"
            return Verdict(0.0, False, details)
        if browser_gone(page.page):
            return Verdict(0.0, False, details, infra_error="the browser went away")
        score, checks = evaluate_spec(page.page, data["evaluator"])
        details["checks"] = checks
        return Verdict(score, score >= 1.0, details)

    def evaluate(self) -> Verdict:
        """The task's checks on the live page, before it is closed."""
        assert self.task is not None, "evaluate() before reset()"
        if self._live_page() is None:
            return Verdict(0.0, False, infra_error="no live page to evaluate")
        try:
            verdict: Verdict = self._call(self._verdict, launch=False)
        except Exception as exc:
            return Verdict(0.0, False, infra_error=f"{type(exc).__name__}: {exc}")
        return verdict

    def outcome_reward(self, verdict: Verdict) -> float:
        """+1 / -1 by default; `reward="score"`: 2 * score - 1."""
        if self.reward == "score":
            return pass_fraction_reward(verdict.score)
        return binary_reward(verdict.success)

    def _end_episode(self) -> None:
        live, page, self._page = self._live_page(), self._page, None
        if page is not None and live is None:
            page.server.stop()  # its browser is gone; its objects must not be touched
        elif page is not None:
            try:
                self._call(lambda _b: page.close(), launch=False)
            except Exception:
                page.server.stop()  # the browser hung or died; the runtime kills it

    def close(self) -> None:
        """Idempotent: end the episode (context and server) and, unless `keep_browser`,
        stop Chromium and its driver."""
        self._end_episode()
        if not self.keep_browser:
            self.runtime.stop()

    def shutdown(self) -> None:
        """Stop everything, `keep_browser` or not."""
        self._end_episode()
        self.runtime.stop()

    def _rehearse(self, browser: Any, task: Task) -> list[dict[str, Any]]:
        page = self._open(browser, task)
        calls: list[dict[str, Any]] = []
        try:
            page.observe("opened the site")
            for i, step in enumerate(task.data.get("oracle", [])):
                args = dict(step.get("arguments", {}))
                if "target" in step:
                    args["ref"] = page.ref_for(step["target"])
                out = page.act(Action(step["tool"], args))
                err = out.observation.error or out.observation.infra_error
                if err:
                    raise ValueError(f"oracle step {i} of {task.id} ({step}) failed: {err}")
                calls.append({"name": step["tool"], "arguments": args})
        finally:
            page.close()
        return calls

    def oracle_replies(self, task: Task) -> list[PolicyReply]:
        """The task's oracle as tool calls. Oracle steps name elements by CSS selector
        (`target`); a rehearsal in a private context turns each into the ref the snapshot
        gives it, so the replayed episode goes through the same ref-based actions as a
        model's (refs are deterministic for the same actions on a fresh page)."""
        calls = self._call(self._rehearse, task)
        status = "failure" if task.data.get("infeasible") else "success"
        calls.append({"name": "terminate", "arguments": {"status": status}})
        return [
            PolicyReply("", [{"id": f"call_{i}", "type": "function",
                              "function": {"name": c["name"],
                                           "arguments": json.dumps(c["arguments"])}}])
            for i, c in enumerate(calls)
        ]  # fmt: skip
