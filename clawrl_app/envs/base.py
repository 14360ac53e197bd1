"""The shapes shared by every agentic environment (ENVS.md §5.3): tasks, tools, actions,
observations (the *next state*), verdicts, per-turn records and whole episodes, and the
`Env` protocol an environment implements.

One `Env` instance runs one episode at a time: `reset(task)` -> (`step(action)`)* ->
`evaluate()` -> `close()`. Everything here is plain data (JSON-able through `to_dict`),
so episodes can be printed, stored and sent over HTTP.
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable


class EpisodeStatus(str, enum.Enum):
    """How an episode ended (upstream's sample statuses)."""

    COMPLETED = "completed"  # the policy finished (final answer, `finish`, `done`)
    TRUNCATED = "truncated"  # step limit, context budget or episode deadline
    FAILED = "failed"  # the policy's fault: too many unparseable replies
    ABORTED = "aborted"  # infrastructure failure (sandbox, verifier, endpoint): never trained on


@dataclass(frozen=True)
class Task:
    """One task of a pack: what the policy is asked, and what the env/verifier needs."""

    id: str
    env: str
    family: str
    instruction: str
    max_steps: int = 10
    split: str = "train"  # "train" or "heldout"
    data: dict[str, Any] = field(default_factory=dict)
    """Env-specific fields (answer, answer_type, tools, the task folder, timeouts...)."""


@dataclass(frozen=True)
class ToolSpec:
    """An OpenAI function tool: `{"type": "function", "function": {name, description, parameters}}`."""

    name: str
    description: str
    parameters: dict[str, Any]

    def openai(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


@dataclass(frozen=True)
class Action:
    """A parsed tool call (`tool` + `arguments`), or raw text for text-protocol envs
    (`tool` is None). `call_id` links a tool result back to the OpenAI tool call."""

    tool: str | None
    arguments: dict[str, Any] = field(default_factory=dict)
    text: str = ""
    call_id: str | None = None


@dataclass(frozen=True)
class Observation:
    """What the environment returned: the next-state signal of the action before it."""

    text: str
    exit_code: int | None = None
    duration_s: float = 0.0
    timed_out: bool = False
    error: str | None = None
    """An error the policy caused (unknown tool, bad arguments): shown to it as text."""
    infra_error: str | None = None
    """A failure that is not the policy's (sandbox would not start): aborts the episode."""
    image_png: bytes | None = None
    snapshot: str | None = None


@dataclass(frozen=True)
class StepResult:
    observation: Observation
    done: bool = False
    truncated: bool = False
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Verdict:
    """The verifier's result, once per episode: `score` in [0, 1]."""

    score: float
    success: bool
    details: dict[str, Any] = field(default_factory=dict)
    infra_error: str | None = None


@dataclass
class TurnRecord:
    """One model turn: exactly the context it was sent, its reply, the actions parsed from
    it, what the env returned for each, and the step judge's score (if any)."""

    index: int
    context_messages: list[dict[str, Any]]
    response_text: str
    actions: list[Action] = field(default_factory=list)
    observations: list[Observation] = field(default_factory=list)
    parse_error: str | None = None
    judge_score: float | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    """What the policy reported (model version, the endpoint's turn/session ids...)."""


@dataclass
class Episode:
    """A whole rollout of one task."""

    env: str
    task_id: str
    status: EpisodeStatus
    turns: list[TurnRecord] = field(default_factory=list)
    verdict: Verdict | None = None
    outcome_reward: float | None = None
    """The verifier's score mapped to a reward (e.g. 2*pass_fraction - 1); None if ABORTED."""
    reason: str = ""
    """Why it ended (`finish`, `max_steps`, `3 parse errors`, the infra error...)."""
    session_id: str | None = None
    seed: int | None = None
    duration_s: float = 0.0

    @property
    def trainable(self) -> bool:
        """Infrastructure failures are dropped from training, never punished."""
        return self.status is not EpisodeStatus.ABORTED and self.outcome_reward is not None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["status"] = self.status.value
        for t in d["turns"]:
            for o in t["observations"]:
                o.pop("image_png", None)
        return d


@runtime_checkable
class Env(Protocol):
    """An agentic environment; one instance runs one episode at a time."""

    name: str

    def tasks(self) -> list[Task]:
        """Every task of the env's pack(s)."""
        ...

    def system_prompt(self, task: Task) -> str:
        """How to act in this env (tools, answer format, limits)."""
        ...

    def tool_specs(self, task: Task) -> list[ToolSpec]:
        """The tools offered to the policy for `task` (empty for text-protocol envs)."""
        ...

    def reset(self, task: Task, *, seed: int | None = None) -> Observation:
        """Materialise `task` (fresh workspace...) and return the first observation: the
        instruction text the policy sees as the user's message."""
        ...

    def step(self, action: Action) -> StepResult:
        """Run one action; `done` when the policy finished (`finish`, final answer)."""
        ...

    def final_answer(self, text: str) -> StepResult | None:
        """A reply without a tool call: the env's verdict on it as an action (the final
        answer of a toolcall task ends the episode), or None when such a reply simply ends
        the episode."""
        ...

    def evaluate(self) -> Verdict:
        """Run the task's verifier once, after the episode."""
        ...

    def outcome_reward(self, verdict: Verdict) -> float:
        """The verifier's score as a reward in [-1, 1]."""
        ...

    def close(self) -> None:
        """Idempotent: kill processes, remove the workspace."""
        ...

    def oracle_replies(self, task: Task) -> list[PolicyReply]:
        """The scripted replies that solve `task` (the shipped solution as tool calls, then
        the final answer): the oracle policy of tests, CI and `env run --policy oracle`."""
        ...


@dataclass(frozen=True)
class PolicyReply:
    """One assistant reply: its text, its OpenAI-shaped `tool_calls` (`[{id, type:
    "function", function: {name, arguments: <JSON text>}}]`, empty when the model wrote
    tool calls as text, which the runner parses), and what the policy reports about it."""

    text: str
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    """E.g. {"model": "<alias>@v3"} from the endpoint's answer."""


class Policy(Protocol):
    """Whatever writes the assistant turns: the app's endpoint, or a scripted policy in
    tests (oracle, no-op, malformed). `session_id` names the episode's session."""

    def __call__(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, session_id: str
    ) -> PolicyReply: ...
