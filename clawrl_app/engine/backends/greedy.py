"""One answer of a policy version on the background lane, never recorded: greedy for the
side-by-side compare, the regression guard and the judge's teacher check; sampled (seeded)
for the teacher's further tries at a usable answer (`judging/teacher_answer.py`)."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from clawrl_app.engine.backends.base import Finished, GenerationRequest, SamplingParams, TokenOut

if TYPE_CHECKING:
    from clawrl_app.engine.backends.base import Backend
    from clawrl_app.engine.chat.formatter import ChatFormatter


class NoRoom(ValueError):
    """The prompt fills the model's context: no answer fits."""


async def greedy_answer(
    backend: Backend,
    formatter: ChatFormatter,
    version: str,
    messages: list[dict[str, Any]],
    max_tokens: int,
) -> str:
    """`version`'s greedy answer to `messages` (at most `max_tokens`, and what the context
    leaves), on the background lane so user requests go first; NoRoom when none fits."""
    ids, _ = await greedy_tokens(backend, formatter, version, messages, max_tokens)
    return formatter.decode(ids)


async def greedy_tokens(
    backend: Backend,
    formatter: ChatFormatter,
    version: str,
    messages: list[dict[str, Any]],
    max_tokens: int,
) -> tuple[list[int], str | None]:
    """`greedy_answer` as token ids (an end token included) and why it finished ("stop": it
    ended on its own; "length": at the budget)."""
    return await side_tokens(backend, formatter, version, messages, max_tokens)


async def side_tokens(
    backend: Backend,
    formatter: ChatFormatter,
    version: str,
    messages: list[dict[str, Any]],
    max_tokens: int,
    temperature: float = 0.0,
    seed: int | None = None,
) -> tuple[list[int], str | None]:
    """`greedy_tokens` at `temperature` (0: greedy), drawn with `seed`."""
    ids = formatter.render(messages)
    room = backend.info().context_length - len(ids)
    if room < 1:
        raise NoRoom(f"a prompt of {len(ids)} tokens leaves no room for an answer")
    req = GenerationRequest(
        f"side-{uuid.uuid4().hex[:12]}",
        ids,
        SamplingParams(max(1, min(max_tokens, room)), temperature=temperature, seed=seed),
        version=version,
        background=True,
    )
    out: list[int] = []
    reason = None
    async for ev in backend.generate(req):
        if isinstance(ev, TokenOut):
            out.append(ev.token_id)
        elif isinstance(ev, Finished):
            reason = ev.reason
    return out, reason
