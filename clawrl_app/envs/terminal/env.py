"""`terminal`: shell chores checked by pytest (ENVS.md §5.7.A). Every command runs in its
own bubblewrap sandbox with the workspace at /workspace (no persistent cd, variables or
background processes between commands); the task's tests are never visible during the
episode. Reward: 2 * (fraction of tests passed) - 1."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import tomllib

from clawrl_app.envs.base import (
    Action,
    Observation,
    PolicyReply,
    StepResult,
    Task,
    ToolSpec,
    Verdict,
)
from clawrl_app.envs.rewards import pass_fraction_reward
from clawrl_app.envs.sandbox import ResourceLimits, Sandbox, make_sandbox
from clawrl_app.envs.terminal.verify import run_verifier
from clawrl_app.envs.workspace import (
    OutsideWorkspace,
    changed,
    new_workspace,
    read_text_capped,
    remove_tree,
    snapshot,
    tree_size_bytes,
    write_text,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "terminal"
OUTPUT_CHARS = 4000
MAX_COMMAND_S = 60
TOOLS = [
    ToolSpec("shell_exec", "Run a bash command in /workspace and get its exit code and output.",
             {"type": "object", "properties": {"command": {"type": "string"},
                                               "timeout_s": {"type": "integer"}},
              "required": ["command"]}),
    ToolSpec("shell_write_content_to_file", "Write text to a file (created or replaced).",
             {"type": "object", "properties": {"file_path": {"type": "string"},
                                               "content": {"type": "string"}},
              "required": ["file_path", "content"]}),
    ToolSpec("read_file", "Read a text file (optionally only lines start_line..end_line).",
             {"type": "object", "properties": {"file_path": {"type": "string"},
                                               "start_line": {"type": "integer"},
                                               "end_line": {"type": "integer"}},
              "required": ["file_path"]}),
    ToolSpec("finish", "Say the task is done.",
             {"type": "object", "properties": {"summary": {"type": "string"}}, "required": []}),
]  # fmt: skip
SYSTEM = (
    "You are working in a Linux shell to complete the user's task in /workspace. Call one "
    'tool per turn, e.g. <tool_call>{{"name": "shell_exec", "arguments": {{"command": '
    '"ls -la"}}}}</tool_call>; its result comes back in the next message. Each command runs '
    "in a fresh shell in /workspace: cd, variables and background processes do not carry "
    "over. There is no network. Tools: {tools}. When the task is done call finish. At most "
    "{turns} turns."
)


def load_task_dir(d: Path, env: str = "terminal") -> Task:
    """A task folder (`task.toml`, `files/`, `tests/`, `solution.sh`); ValueError naming
    the file and field when something is missing."""
    manifest = d / "task.toml"
    try:
        meta = tomllib.loads(manifest.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"{manifest}: {exc}") from exc
    for key in ("id", "family", "instruction"):
        if not isinstance(meta.get(key), str) or not meta[key]:
            raise ValueError(f"{manifest}: `{key}` must be a non-empty string")
    if not (d / "tests").is_dir() or not any((d / "tests").glob("test_*.py")):
        raise ValueError(f"{d}: a `tests/` folder with test_*.py files is required")
    split = meta.get("split", "train")
    if split not in ("train", "heldout"):
        raise ValueError(f"{manifest}: `split` must be train or heldout")
    verifier = meta.get("verifier", {})
    return Task(
        id=meta["id"], env=env, family=meta["family"], instruction=meta["instruction"],
        max_steps=int(meta.get("max_steps", 10)), split=split,
        data={"dir": str(d), "timeout_s": float(verifier.get("timeout_s", 30))},
    )  # fmt: skip


@cache
def load_pack(folder: Path = DATA) -> tuple[Task, ...]:
    return tuple(load_task_dir(d) for d in sorted(folder.iterdir()) if (d / "task.toml").is_file())


class TerminalEnv:
    name = "terminal"

    def __init__(
        self,
        data_dir: str | Path | None = None,
        allow_unsafe: bool = False,
        sandbox: Sandbox | None = None,
        workspace_root: Path | None = None,
    ) -> None:
        self.data_dir = Path(data_dir) if data_dir else DATA
        self.allow_unsafe = allow_unsafe
        self._sandbox = sandbox
        self.workspace_root = workspace_root
        self.ws: Path | None = None
        self.task: Task | None = None

    @property
    def sandbox(self) -> Sandbox:
        if self._sandbox is None:  # refuses unsafe isolation unless allowed (SandboxUnavailable)
            self._sandbox = make_sandbox(self.allow_unsafe)
        return self._sandbox

    def tasks(self) -> list[Task]:
        return list(load_pack(self.data_dir))

    def tool_specs(self, task: Task) -> list[ToolSpec]:
        return TOOLS

    def system_prompt(self, task: Task) -> str:
        return SYSTEM.format(tools=", ".join(t.name for t in TOOLS), turns=task.max_steps)

    def reset(self, task: Task, *, seed: int | None = None) -> Observation:
        self.close()
        self.task = task
        try:
            _ = self.sandbox
            self.ws = new_workspace(Path(task.data["dir"]) / "files", self.workspace_root)
        except Exception as exc:
            return Observation("", infra_error=f"{type(exc).__name__}: {exc}")
        return Observation(task.instruction)

    def _shell(self, args: dict[str, Any]) -> Observation:
        assert self.ws is not None
        timeout = max(1, min(int(args.get("timeout_s") or 20), MAX_COMMAND_S))
        before = snapshot(self.ws)
        r = self.sandbox.run(["/bin/bash", "-c", str(args["command"])], workspace=self.ws,
                             limits=ResourceLimits(wall_s=timeout, cpu_s=timeout + 5))  # fmt: skip
        out = (r.stdout + (("\n[stderr]\n" + r.stderr) if r.stderr.strip() else "")).strip()
        if len(out) > OUTPUT_CHARS:
            half = OUTPUT_CHARS // 2
            out = f"{out[:half]}\n[... {len(out) - 2 * half} characters cut ...]\n{out[-half:]}"
        head = f"exit_code={r.exit_code}, {r.duration_s:.2f} s" + (
            f", timed out after {timeout} s" if r.timed_out else ""
        )
        files = changed(before, snapshot(self.ws))
        tail = f"\nfiles changed: {', '.join(files[:20])}" if files else ""
        return Observation(f"{head}\n{out}{tail}".strip(), exit_code=r.exit_code,
                           duration_s=r.duration_s, timed_out=r.timed_out)  # fmt: skip

    def step(self, action: Action) -> StepResult:
        assert self.ws is not None, "step() before reset()"
        a = action.arguments
        try:
            if action.tool == "shell_exec":
                obs = self._shell(a)
                if tree_size_bytes(self.ws) > ResourceLimits().workspace_mb * 1024 * 1024:
                    obs = Observation(obs.text + "\n[workspace over its size limit]",
                                      exit_code=obs.exit_code, error="workspace too large")  # fmt: skip
                return StepResult(obs)
            if action.tool == "shell_write_content_to_file":
                path = write_text(self.ws, str(a["file_path"]), str(a["content"]))
                return StepResult(Observation(f"wrote {len(str(a['content']))} characters\n"
                                              f"files changed: {path.name}"))  # fmt: skip
            if action.tool == "read_file":
                lines = read_text_capped(self.ws, str(a["file_path"])).splitlines()
                lo = max(1, int(a.get("start_line") or 1))
                hi = int(a.get("end_line") or len(lines))
                return StepResult(Observation("\n".join(lines[lo - 1 : hi])[:OUTPUT_CHARS]))
            if action.tool == "finish":
                return StepResult(Observation("finished"), done=True)
        except OutsideWorkspace as exc:
            return StepResult(Observation(f"error: {exc}", error=str(exc)))
        except (OSError, ValueError) as exc:
            return StepResult(Observation(f"error: {exc}", error=str(exc)))
        return StepResult(Observation(f"unknown tool {action.tool}", error="unknown tool"))

    def final_answer(self, text: str) -> StepResult | None:
        return None  # a reply without a tool call simply ends the episode

    def evaluate(self) -> Verdict:
        assert self.task is not None and self.ws is not None, "evaluate() before reset()"
        tests = Path(self.task.data["dir"]) / "tests"
        return run_verifier(self.sandbox, self.ws, tests, self.task.data["timeout_s"])

    def outcome_reward(self, verdict: Verdict) -> float:
        return pass_fraction_reward(verdict.score)

    def close(self) -> None:
        if self.ws is not None:
            remove_tree(self.ws)
            self.ws = None

    def oracle_replies(self, task: Task) -> list[PolicyReply]:
        script = (Path(task.data["dir"]) / "solution.sh").read_text()
        call = {
            "id": "call_0",
            "type": "function",
            "function": {"name": "shell_exec", "arguments": json.dumps({"command": script})},
        }
        done = {"id": "call_1", "type": "function",
                "function": {"name": "finish", "arguments": json.dumps({"summary": "done"})}}  # fmt: skip
        return [PolicyReply("", [call]), PolicyReply("", [done])]
