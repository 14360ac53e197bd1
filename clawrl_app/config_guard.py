"""The settings sections of the regression guard and the agentic environments (part of
`clawrl_app.config`, which re-exports them)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from clawrl_app.config_base import _Section


class GuardSettings(_Section):
    """The personal regression guard: each new checkpoint answers your held-out prompts and a
    general set before it is served; one that regresses is refused."""

    enabled: bool = True
    """Check new checkpoints before serving them (false: publish without the check)."""
    every: int = Field(default=1, ge=1)
    """Check every Nth checkpoint that reaches publishing (the others publish unchecked)."""
    holdout_share: float = Field(default=0.1, ge=0.0, le=0.5)
    """Share of your main turns held out when recorded: judged, never trained on; they form
    the personal evaluation set."""
    personal_items: int = Field(default=32, ge=1)
    """How many of the newest judged held-out turns the personal score uses."""
    min_personal_items: int = Field(default=8, ge=1)
    """Fewest held-out turns before the personal score can refuse a version (fewer: it is
    recorded and shown as "n/8, not deciding"; the general check alone decides)."""
    max_personal_drop: float = Field(default=0.15, ge=0.0, le=1.0)
    """Refuse a version whose personal score is below the served one's by more than this."""
    general_items: int = Field(default=40, ge=0)
    """How many questions of the shipped general set (scored by code) to ask (0: none)."""
    max_general_drop: float = Field(default=0.05, ge=0.0, le=1.0)
    """Refuse a version whose general score is below the base model's by more than this (a
    degenerate answer counts as wrong)."""
    max_tokens: int = Field(default=48, ge=1)
    """Answer length for the general questions (greedy)."""
    open_prompts: int = Field(default=12, ge=0)
    """How many of the shipped open prompts ("Explain how a bicycle works.") to answer for
    the degeneration check (0: none; the questions' answers are still checked)."""
    open_max_tokens: int = Field(default=160, ge=1)
    """Answer length for the open prompts (greedy): long enough for a loop to show."""
    budget_prompts: int = Field(default=24, ge=0)
    """How many of the shipped open prompts (the first ones; 48 ship, most of them lists,
    advice and steps) to answer also at your answer length (the
    median answer budget of your newest requests, at most `open_max_tokens`): a version
    trained on your kind of request can start to loop on other kinds within the length you
    ask for, where the base model does not, while at `open_max_tokens` the base loops on
    half of them itself. More of them loop where the base's answers do not than
    `max_new_loops` allows: refused (0: off)."""
    budget_confirm: bool = True
    """When the check at your answer length alone refuses, by one new loop too many, the
    next `budget_prompts` shipped open prompts are answered at that length too and all the
    answers decide together (as `user_form_confirm` does for your prompts; both at once
    where each of the two refusals rests on one answer): 2 new loops in 24 befell harmless
    versions as often as looping ones (docs/learning.md)."""
    max_degeneration_rise: float = Field(default=0.05, ge=0.0, le=1.0)
    """Refuse a version whose degeneration rate (share of its answers that loop or repeat
    themselves) exceeds the base model's by more than this, whatever its fact score."""
    retreat_after: int = Field(default=3, ge=1)
    """After this many refused versions in a row, the trainer goes back to the served version
    (and the checkpoints it made on top of them are refused). Before that it trains on from
    the refused one, which is never served: a new habit can pass through a worse version on
    the way (1: go back at once)."""
    max_new_loops: float = Field(default=0.05, ge=0.0, le=1.0)
    """Refuse a version when more than this share of its answers (general check, your
    prompts; to the nearest whole answer) loop where the base model's answer to the same
    prompt does not."""
    max_repetition_rise: float = Field(default=0.05, ge=0.0, le=1.0)
    """Refuse a version whose answers to your newest prompts repeat their own 3-word phrases
    more than the base model's do on the same prompts by more than this (mean share of
    repeated phrases per answer): a drift toward loops, seen before answers loop outright."""
    user_form_items: int = Field(default=12, ge=0)
    """Also answer your prompts (this many: the held-out turns, never trained on, first, then
    the newest the trainer has not trained on, then the newest trained ones; greedy, at most
    `open_max_tokens` long) and hold their degeneration rate to the base model's on the
    same prompts, with the same margin: a version can loop on your kind of request while
    the shipped open prompts look fine (0 = off; it decides from USER_FORM_MIN prompts on)."""
    user_form_confirm: bool = True
    """When that check refuses on the strength of one answer alone (with that prompt left
    out it would pass), ask your next `user_form_items` prompts too and decide on all the
    answers together: one loop in 12 answers befalls harmless versions as often as looping
    ones. Too few prompts yet, and still one answer: the version waits (neither served nor
    refused) and is checked again once they exist (false: one answer decides)."""
    user_form_min_tokens: int = Field(default=32, ge=0)
    """Leave out of that check requests that allowed fewer answer tokens: a few-word reply
    cannot loop, and such follow-ups would take the places of the prompts that can."""


ToolChoice = Literal["required", "auto", "none"]


class EnvsSettings(_Section):
    """How env rollouts ask the model for actions (`clawrl-app env`, the Environments screen)."""

    tool_choice: ToolChoice = "required"
    """What each env turn asks the endpoint for: required (a call to one of the env's tools,
    its finishing tool included, decoded under a grammar, so a small model always makes an
    action), auto (the model may answer in prose) or none. Recorded with each turn."""
    tool_choice_by_env: dict[str, ToolChoice] = {}
    """Per-env overrides of `tool_choice`, e.g. {"terminal" = "auto"}. Envs without tools
    (swe's text protocol) ask for no tool call whatever is set."""

    group_size: int = Field(default=8, ge=1, le=64)
    """Episodes per task in a training round (`env train`, the Environments screen): a task
    solved once in ten gives a group with contrast twice as often at 8 as at 4."""
    tasks_per_round: int = Field(default=6, ge=1, le=64)
    """Tasks rolled out per training round."""
    step_judge: Literal["heuristic", "none"] = "none"
    """Per-turn scores besides the outcome: heuristic (a clean call +1, a broken or repeated
    one -1) or none (outcome only; learned more on the toolcall curriculum)."""
    validation_per_family: int = Field(default=3, ge=0, le=64)
    """Train tasks per family (at most a quarter of it) never rolled out but answered by
    each served version during `env train`; at the end the version that solved most of
    them is served if it beats the last. 0: the last version stays."""

    def tool_choice_for(self, env: str) -> ToolChoice:
        """The tool choice of `env`'s turns."""
        return self.tool_choice_by_env.get(env, self.tool_choice)
