"""`swe`: Python bug-fix tasks checked by hidden pytest tests (ENVS.md §5.7.B).

The agent gets a git repository at /workspace and an issue; every command runs in its own
bubblewrap sandbox (no persistent cd, variables or background processes). On submit (or
at evaluation when it never submitted) its changes become a patch against the baseline
commit, which is filtered (no test, config or start-up files) and checked on a pristine
copy by the hidden FAIL_TO_PASS and PASS_TO_PASS tests. Reward +1 resolved, -1 otherwise.
"""

from __future__ import annotations

import json
from dataclasses import replace
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
from clawrl_app.envs.parsing import ParseResult, parse_reply
from clawrl_app.envs.rewards import binary_reward
from clawrl_app.envs.sandbox import Bind, ResourceLimits, Sandbox, SandboxError, make_sandbox
from clawrl_app.envs.sandbox.bwrap import interpreter_prefixes
from clawrl_app.envs.swe.patch_filter import FilteredPatch, filter_patch
from clawrl_app.envs.swe.protocol import (
    SENTINEL,
    TOOLS,
    format_observation,
    parse_text_reply,
    system_prompt,
)
from clawrl_app.envs.swe.repo import Baseline, PatchError, compute_patch, make_workspace
from clawrl_app.envs.swe.verify import verify
from clawrl_app.envs.workspace import remove_tree as _remove
from clawrl_app.envs.workspace import tree_size_bytes

DATA = Path(__file__).resolve().parents[1] / "data" / "swe"
COMMAND_TIMEOUT_S = 30.0  # per command (upstream 180 s); the runner owns the episode deadline
PROTOCOLS = ("text", "tool")
# pytest inside the episode as the verifier runs it: without the app venv's plugins (which
# also cost ~1.5 s per run here)
EPISODE_ENV = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}


def _id_list(meta: dict[str, Any], key: str, manifest: Path) -> list[str]:
    ids = meta.get(key)
    if not isinstance(ids, list) or not all(isinstance(i, str) and "::" in i for i in ids):
        raise ValueError(f"{manifest}: `{key}` must be a list of pytest node ids")
    return list(ids)


def load_task_dir(d: Path, env: str = "swe") -> Task:
    """A task folder (`task.toml`, `repo/`, `hidden_tests/`, `solution.patch`); ValueError
    naming the file and field when something is missing."""
    manifest = d / "task.toml"
    try:
        meta = tomllib.loads(manifest.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"{manifest}: {exc}") from exc
    for key in ("id", "family", "problem_statement"):
        if not isinstance(meta.get(key), str) or not meta[key].strip():
            raise ValueError(f"{manifest}: `{key}` must be a non-empty string")
    if not (d / "repo").is_dir() or not any((d / "hidden_tests").glob("test_*.py")):
        raise ValueError(f"{d}: a `repo/` folder and `hidden_tests/test_*.py` are required")
    split = meta.get("split", "train")
    if split not in ("train", "heldout"):
        raise ValueError(f"{manifest}: `split` must be train or heldout")
    f2p = _id_list(meta, "fail_to_pass", manifest)
    p2p = _id_list(meta, "pass_to_pass", manifest)
    if not f2p:
        raise ValueError(f"{manifest}: `fail_to_pass` may not be empty")
    return Task(
        id=meta["id"], env=env, family=meta["family"],
        instruction=meta["problem_statement"].strip(),
        max_steps=int(meta.get("step_limit", 15)), split=split,
        data={"dir": str(d), "fail_to_pass": f2p, "pass_to_pass": p2p,
              "timeout_s": float(meta.get("timeout_s", 60))},
    )  # fmt: skip


@cache
def load_pack(folder: Path = DATA) -> tuple[Task, ...]:
    """Every task folder under `folder`, sorted by name."""
    return tuple(load_task_dir(d) for d in sorted(folder.iterdir()) if (d / "task.toml").is_file())


class SweEnv:
    """The swe env. `protocol="text"` (the default) is upstream's mini-swe-agent protocol:
    THOUGHT plus exactly one ```bash block per reply, submission by a command printing
    `COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`. It is the default because it is what the
    upstream SWE recipe trains, it works with any chat model (no tool-call template
    needed), and its format errors are part of the learning signal. `protocol="tool"`
    offers OpenAI tools `bash {command}` and `submit {}` instead."""

    name = "swe"

    def __init__(
        self,
        protocol: str = "text",
        data_dir: str | Path | None = None,
        allow_unsafe: bool = False,
        sandbox: Sandbox | None = None,
        workspace_root: Path | None = None,
        command_timeout_s: float = COMMAND_TIMEOUT_S,
    ) -> None:
        if protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be one of {PROTOCOLS}, not {protocol!r}")
        self.protocol = protocol
        self.data_dir = Path(data_dir) if data_dir else DATA
        self.allow_unsafe = allow_unsafe
        self._sandbox = sandbox
        self.workspace_root = workspace_root
        self.command_timeout_s = command_timeout_s
        self.task: Task | None = None
        self.base: Baseline | None = None
        self.steps = 0
        self.patch: FilteredPatch | None = None
        self.patch_note: str | None = None  # git's warnings, or why there is no patch

    @property
    def sandbox(self) -> Sandbox:
        if self._sandbox is None:  # refuses unsafe isolation unless allowed
            self._sandbox = make_sandbox(self.allow_unsafe)
        return self._sandbox

    def tasks(self) -> list[Task]:
        """Every task of the pack (`data_dir`)."""
        return list(load_pack(self.data_dir))

    def tool_specs(self, task: Task) -> list[ToolSpec]:
        """`bash` and `submit` (tool protocol); none for the text protocol."""
        return [] if self.protocol == "text" else TOOLS

    def system_prompt(self, task: Task) -> str:
        """The protocol's instructions, with the task's turn limit."""
        return system_prompt(self.protocol, task.max_steps, self.command_timeout_s)

    def parse_reply(self, reply: PolicyReply) -> ParseResult:
        """The runner's hook for this env's replies: one ```bash block (text protocol), or
        OpenAI/`<tool_call>` tool calls (tool protocol)."""
        if self.protocol == "text":
            return parse_text_reply(reply.text or "")
        parsed = parse_reply(reply, TOOLS)
        if parsed.error:
            note = f"Error: {parsed.error}. Call bash or submit with valid JSON arguments."
            return replace(parsed, error=note)
        return parsed

    def reset(self, task: Task, *, seed: int | None = None) -> Observation:
        """A fresh workspace at the task's baseline commit; the issue as the first
        observation (an `infra_error` observation when the workspace cannot be made)."""
        self.close()
        self.task, self.steps = task, 0
        try:
            _ = self.sandbox
            self.base = make_workspace(Path(task.data["dir"]) / "repo", self.workspace_root)
        except Exception as exc:
            return Observation("", infra_error=f"{type(exc).__name__}: {exc}")
        return Observation(
            "<pr_description>\n"
            f"{task.instruction}\n"
            "</pr_description>\n\n"
            "The repository is at /workspace (a git repository at the baseline commit). "
            "Change the non-test source files so the issue is resolved; hidden tests will "
            "check your change. Edits to tests or test configuration are discarded."
        )

    def _masks(self) -> list[Bind]:
        """Hide the task data (hidden tests!) when it lies under a folder the sandbox binds
        (the app installed in its venv): an empty folder is bound over it."""
        data = self.data_dir.resolve()
        if not any(str(data).startswith(p + "/") for p in interpreter_prefixes()):
            return []
        assert self.base is not None
        empty = self.base.private / "empty"
        empty.mkdir(exist_ok=True)
        return [Bind(empty, str(data))]

    def _bash(self, command: str) -> tuple[Observation, bool]:
        """Run `command`; (the observation, whether it was upstream's submission command:
        its output's first line is the sentinel)."""
        assert self.base is not None and self.task is not None
        t = self.command_timeout_s
        # stderr joins stdout in order, as upstream shows them (one <output> block)
        argv = ["/bin/bash", "-c", 'exec 2>&1; exec /bin/bash -c "$1"', "bash", command]
        r = self.sandbox.run(argv, workspace=self.base.workspace, binds=self._masks(),
                             env=EPISODE_ENV,
                             limits=ResourceLimits(wall_s=t, cpu_s=int(t) + 5))  # fmt: skip
        output = r.stdout + r.stderr
        submitted = output.lstrip().splitlines()[:1] == [SENTINEL]
        if r.timed_out:
            output += f"\n[the command timed out after {t:g} s and was killed]"
        if tree_size_bytes(self.base.workspace) > ResourceLimits().workspace_mb * 1024 * 1024:
            output += "\n[the workspace is over its size limit: delete files]"
        left = max(0, self.task.max_steps - self.steps)
        obs = Observation(format_observation(r.exit_code, output, left), exit_code=r.exit_code,
                          duration_s=r.duration_s, timed_out=r.timed_out)  # fmt: skip
        return obs, submitted

    def _submit(self, text: str) -> StepResult:
        try:
            self._take_patch()
        except SandboxError as exc:
            return StepResult(Observation("", infra_error=str(exc)))
        return StepResult(Observation(text), done=True)

    def step(self, action: Action) -> StepResult:
        """Run a `bash` command in its own sandbox, or `submit` (so does a command whose
        output starts with the sentinel, in both protocols, as upstream)."""
        assert self.base is not None, "step() before reset()"
        self.steps += 1
        if action.tool == "submit":
            return self._submit("submitted")
        if action.tool != "bash":
            return StepResult(Observation(f"unknown tool {action.tool}", error="unknown tool"))
        command = str(action.arguments.get("command", ""))
        try:
            obs, submitted = self._bash(command)
        except SandboxError as exc:
            return StepResult(Observation("", infra_error=str(exc)))
        return self._submit(obs.text) if submitted else StepResult(obs)

    def final_answer(self, text: str) -> StepResult | None:
        return None  # tool protocol: a reply without a tool call ends the episode

    def _take_patch(self) -> None:
        """The workspace's diff against the baseline, filtered; kept for evaluate()."""
        assert self.base is not None
        try:
            diff, warnings = compute_patch(self.sandbox, self.base)
        except PatchError as exc:
            self.patch, self.patch_note = FilteredPatch(""), str(exc)
            return
        self.patch = filter_patch(diff)
        self.patch_note = warnings.strip() or None

    def evaluate(self) -> Verdict:
        """The verifier on the submitted patch (taken now if the agent never submitted)."""
        assert self.task is not None and self.base is not None, "evaluate() before reset()"
        try:
            if self.patch is None:  # never submitted: take the workspace as it is now
                self._take_patch()
        except SandboxError as exc:
            return Verdict(0.0, False, infra_error=str(exc))
        assert self.patch is not None
        d = self.task.data
        verdict = verify(self.sandbox, Path(d["dir"]), self.patch, d["fail_to_pass"],
                         d["pass_to_pass"], d["timeout_s"])  # fmt: skip
        if self.patch_note:
            verdict.details["patch_note"] = self.patch_note[-2000:]
        return verdict

    def outcome_reward(self, verdict: Verdict) -> float:
        """+1 resolved, -1 otherwise."""
        return binary_reward(verdict.success)

    def close(self) -> None:
        """Idempotent: remove the workspace and the private baseline."""
        if self.base is not None:
            _remove(self.base.workspace)
            _remove(self.base.private)
            self.base = None
        self.patch, self.patch_note = None, None

    def oracle_replies(self, task: Task) -> list[PolicyReply]:
        """`git apply` of the task's solution.patch (a heredoc), then the submission."""
        patch = (Path(task.data["dir"]) / "solution.patch").read_text()
        apply = f"git apply <<'CLAWRL_PATCH_EOF'\n{patch}CLAWRL_PATCH_EOF"
        if self.protocol == "text":
            return [
                PolicyReply(f"THOUGHT: apply the fix.\n\n```bash\n{apply}\n```"),
                PolicyReply(f"THOUGHT: done.\n\n```bash\necho {SENTINEL}\n```"),
            ]
        call = {
            "id": "call_0",
            "type": "function",
            "function": {"name": "bash", "arguments": json.dumps({"command": apply})},
        }
        done = {"id": "call_1", "type": "function",
                "function": {"name": "submit", "arguments": "{}"}}  # fmt: skip
        return [PolicyReply("", [call]), PolicyReply("", [done])]
