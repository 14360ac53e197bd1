"""From eligible store samples to training items (pure selection rules, no torch).

A sample is used at most once; it is skipped, with the reason recorded, when its policy
version is more than `max_staleness` training steps old, when it carries no signal the method
can use (reward 0 for `rl`, no teacher log-probs for `opd`), or when its arrays do not
line up. The combine rule (REFERENCE §6): hint + r != 0 -> both signals; hint only -> OPD
only; r != 0 only -> RL only; neither -> no sample.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from clawrl_app.engine.chat.openai_schema import ApiError
from clawrl_app.engine.chat.temperature import logprob_temperature
from clawrl_app.engine.chat.tool_constraint import forced_call_schema
from clawrl_app.engine.store import ENV_SOURCE_PREFIX, JudgmentRow, SampleRow, TurnRow
from clawrl_app.engine.training.config import TOPK_METHODS
from clawrl_app.engine.training.losses import needs_reward, needs_teacher
from clawrl_app.privacy.redact import NOT_TRAINABLE_REASON


@dataclass(frozen=True)
class TrainItem:
    """One judged turn ready for the loss: ids, behaviour log-probs and its signals."""

    sample_id: int
    session_id: str
    prompt_ids: list[int]
    response_ids: list[int]
    old_logprobs: list[float]
    temperature: float
    reward: float
    has_reward: bool
    teacher_logprobs: list[float] | None
    policy_version: str
    teacher_topk_ids: list[list[int]] | None = None
    teacher_topk_logprobs: list[list[float]] | None = None
    json_schema: str | None = None
    """The forced tool call's JSON schema when the turn was sampled under one (tool_choice
    "required" or a named function): the trainer replays it (`grammar_replay.py`)."""
    centred: bool = False
    """The reward is already an advantage (an env turn's group-relative value): the trainer
    subtracts no baseline from it and leaves it out of the batch's baseline."""
    demonstration: bool = False
    """The teacher's own answer to the turn's prompt (`judging/teacher_answer.py`), not a
    sample of the policy: no behaviour log-probs (`old_logprobs` is empty); the trainer takes
    the policy's current ones, so the ratio starts at 1 (`policy_forward`)."""
    span: tuple[int, int] | None = None
    """Response positions [a, b) the loss trains on (the others are context only); None:
    all of them. A stop pair trains its one decision (`stop_pair`)."""
    replayed: bool = False
    """A demonstration of an earlier step trained again (`replay.py`): its sample is not
    the batch's own and is not marked trained again."""

    @property
    def tokens(self) -> int:
        return len(self.prompt_ids) + len(self.response_ids)


def teaches(item: TrainItem, method: str, stop_ids: Sequence[int] = ()) -> bool:
    """Whether `item` carries a teacher signal that `method` trains on: none for `rl`; the
    teacher's top-k for the top-k methods, and for `combine-stop` (`stop_ids` given) only a
    top-k that has an end token somewhere (else there is no "stop here" to pull toward)."""
    if not needs_teacher(method):
        return False
    if method not in TOPK_METHODS:
        return item.teacher_logprobs is not None
    if item.teacher_topk_ids is None:
        return False
    stop = set(stop_ids)
    return not stop or any(i in stop for row in item.teacher_topk_ids for i in row)


@dataclass(frozen=True)
class Skip:
    sample_id: int
    reason: str


def policy_age(trainer_step: int, policy_version: str, steps: Mapping[str, int]) -> int:
    """How many optimizer steps the trainer's weights are past the policy that answered:
    its step minus that version's (`steps`: version -> its checkpoint's step; the base model
    and an unknown version are step 0). Counted in the trainer's own steps, not in version
    numbers: versions the guard refused, or that a retreat left behind, are numbered but
    the trainer never built on them; while the base keeps serving past several refusals,
    its answers are as fresh as the trainer's lineage is long (never below 0)."""
    return max(0, trainer_step - steps.get(policy_version, 0))


def build_item(
    sample: SampleRow,
    turn: TurnRow,
    judgment: JudgmentRow,
    method: str,
    age: int,
    max_staleness: int,
) -> TrainItem | Skip:
    """The item for one sample under `method`, or why it is skipped; `age` is the
    answering policy's age in trainer steps (`policy_age`)."""
    if age > max_staleness:
        return Skip(
            sample.id,
            f"stale: policy {turn.policy_version} is {age} training steps old "
            f"(train.max_staleness = {max_staleness})",
        )
    if turn.redacted:  # stored without ids (a user rating can revive its sample)
        return Skip(sample.id, NOT_TRAINABLE_REASON)
    if not turn.response_ids or len(turn.logprobs) != len(turn.response_ids):
        return Skip(sample.id, "no response tokens or misaligned behaviour log-probs")
    teacher = judgment.teacher_logprobs
    if teacher is not None and len(teacher) != len(turn.response_ids):
        teacher = None
    reward = float(judgment.score)
    use_rl = needs_reward(method) and reward != 0
    topk = judgment.teacher_topk if method in TOPK_METHODS else None
    if topk is not None and len(topk.get("ids", [])) != len(turn.response_ids):
        topk = None
    use_opd = method in ("opd", "combine") and teacher is not None or topk is not None
    if not (use_rl or use_opd):
        return Skip(
            sample.id,
            f"no signal for {method}: reward {reward:+g}, "
            f"{'a' if teacher is not None else 'no'} hint",
        )
    return TrainItem(
        sample_id=sample.id,
        session_id=sample.session_id,
        prompt_ids=list(turn.prompt_ids),
        response_ids=list(turn.response_ids),
        old_logprobs=list(turn.logprobs),
        temperature=logprob_temperature(turn.request.get("temperature")),
        reward=reward,
        has_reward=use_rl,
        teacher_logprobs=list(teacher) if use_opd and teacher else None,
        policy_version=turn.policy_version,
        teacher_topk_ids=topk["ids"] if topk else None,
        teacher_topk_logprobs=topk["logprobs"] if topk else None,
        json_schema=sampled_schema(turn.request),
        centred=is_centred(judgment),
    )


def demonstration_item(item: TrainItem, judgment: JudgmentRow, method: str) -> TrainItem | None:
    """The teacher's answer to `item`'s prompt as one more sample of the turn, rewarded +1
    (None without one, or where the method has no reward term)."""
    ids = judgment.teacher_answer_ids
    if not ids or item.centred or not needs_reward(method):
        return None
    return TrainItem(
        sample_id=item.sample_id,
        session_id=item.session_id,
        prompt_ids=item.prompt_ids,
        response_ids=list(ids),
        old_logprobs=[],
        temperature=item.temperature,
        reward=1.0,
        has_reward=True,
        teacher_logprobs=None,
        policy_version=item.policy_version,
        demonstration=True,
    )


def stop_pair(item: TrainItem, demo: TrainItem) -> tuple[TrainItem, TrainItem] | None:
    """`item` (a rejected answer) and `demo`, when `demo` is that answer cut short
    (`judging/teacher_cut.py`: its first k tokens, then an end token), as the one decision
    they differ in: at position k the cut ends (+1) and the answer went on (-1). Each
    trains that position alone (`span`), and the pair is its own baseline (`centred`,
    advantages +1 and -1): the rest of the answer is not pushed down token by token (in
    one process that took the 40-question general score from 0.60 to 0.23 in four steps
    on brevity/dozen), and the other rejected answers of the batch are not pushed down
    for the contrast the pair brings. None when `demo` is not such a cut."""
    k = len(demo.response_ids) - 1
    if (
        not demo.demonstration
        or item.reward >= 0
        or item.centred
        or not 0 < k < len(item.response_ids)
        or demo.response_ids[:k] != item.response_ids[:k]
    ):
        return None
    own = dataclasses.replace(item, span=(k, k + 1), centred=True, reward=-1.0)
    return own, dataclasses.replace(demo, span=(k, k + 1), centred=True, reward=1.0)


def with_demonstration(
    item: TrainItem, judgment: JudgmentRow, method: str
) -> tuple[TrainItem, TrainItem | None]:
    """`item` and the teacher's answer to its prompt (`demonstration_item`; None: none), as
    a stop pair when that answer is `item`'s own cut short (`stop_pair`)."""
    demo = demonstration_item(item, judgment, method)
    pair = stop_pair(item, demo) if demo is not None else None
    return pair if pair is not None else (item, demo)


def is_centred(judgment: JudgmentRow) -> bool:
    """An env rollout's reward (judged by `env:<name>`, not overridden by a user's rating) is
    its group-relative advantage already (`envs/rewards.py`)."""
    return judgment.backend.startswith(ENV_SOURCE_PREFIX) and judgment.user_rating is None


def sampled_schema(request: dict[str, Any]) -> str | None:
    """The JSON schema a recorded request's answer was decoded under (a forced tool call),
    as the endpoint built it from the request's tools and tool_choice; None: unconstrained."""
    tools = request.get("tools")
    choice = request.get("tool_choice")
    if not tools or choice in (None, "none", "auto"):
        return None
    try:
        schema = forced_call_schema(tools, choice)
    except ApiError:  # the endpoint accepted it, so this does not happen; no mask then
        return None
    return None if schema is None else json.dumps(schema)


def micro_batches(items: Sequence[TrainItem], token_budget: int) -> list[list[TrainItem]]:
    """Split a batch into micro-batches of at most `token_budget` padded tokens each
    (B x longest sequence), keeping order; an item longer than the budget goes alone."""
    out: list[list[TrainItem]] = []
    current: list[TrainItem] = []
    longest = 0
    for item in items:
        grown = max(longest, item.tokens)
        if current and grown * (len(current) + 1) > token_budget:
            out.append(current)
            current, grown = [], item.tokens
        current.append(item)
        longest = grown
    if current:
        out.append(current)
    return out
