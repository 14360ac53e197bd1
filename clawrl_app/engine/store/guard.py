"""Reads for the regression guard: the held-out personal evaluation set and the scores each
version got before (stored as metrics `guard/personal`, `guard/general` and
`guard/degeneration`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from clawrl_app.engine.store.connection import StoreBase
from clawrl_app.engine.store.rows import _INT32, _unpack
from clawrl_app.engine.store.schema import ENV_SOURCE_PREFIX

ENV_PREFIX = ENV_SOURCE_PREFIX + "%"

PERSONAL = "guard/personal"
"""Metric name of a version's personal score (held-out preference agreement)."""
GENERAL = "guard/general"
"""Metric name of a version's general score (the shipped code-scored set)."""
DEGENERATION = "guard/degeneration"
"""Metric name of a version's degeneration rate (share of its guard answers that loop or
repeat themselves, scored by `clawrl_app.degeneration`)."""

HELD_OUT_SQL = (
    "SELECT t.id, t.prompt_ids, t.response_ids, j.score FROM turns t "
    "JOIN samples s ON s.turn_id = t.id JOIN judgments j ON j.sample_id = s.id "
    "JOIN sessions ss ON ss.id = t.session_id "
    "WHERE t.holdout = 1 AND t.redacted = 0 AND j.score != 0 "
    "AND ss.review_state != 'excluded' AND length(t.response_ids) > 0 "
    "ORDER BY t.id DESC LIMIT ?"
)


USER_PROMPTS_SQL = (
    "SELECT t.id, t.request_json FROM turns t JOIN sessions ss ON ss.id = t.session_id "
    "LEFT JOIN samples s ON s.turn_id = t.id "
    "WHERE t.type = 'main' AND t.redacted = 0 AND t.prompt_tokens <= ? "
    "AND ss.review_state != 'excluded' AND ss.source NOT LIKE ? ORDER BY {order} LIMIT ?"
)


@dataclass(frozen=True)
class UserPrompt:
    """One of the user's conversations as it was asked: the turn, its messages and the
    answer budget the request set (None when it set none)."""

    turn_id: int
    messages: list[Any]
    max_tokens: int | None


def plain_chat(messages: Any) -> bool:
    """A non-empty list of system/user/assistant messages with text content only (no tool
    calls or parts): a conversation any version can be asked again as it was."""
    return (
        isinstance(messages, list)
        and bool(messages)
        and all(
            isinstance(m, dict)
            and m.get("role") in ("system", "user", "assistant")
            and isinstance(m.get("content"), str)
            for m in messages
        )
    )


def request_budget(request: dict[str, Any]) -> int | None:
    """The request's max_completion_tokens or max_tokens, when a positive integer."""
    for key in ("max_completion_tokens", "max_tokens"):
        value = request.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


@dataclass(frozen=True)
class HeldOutItem:
    """One held-out turn: its prompt and sampled answer (token ids) and the reward it got."""

    turn_id: int
    prompt_ids: list[int]
    response_ids: list[int]
    reward: float


class GuardMixin(StoreBase):
    """What the regression guard reads."""

    def held_out_items(self, limit: int) -> list[HeldOutItem]:
        """The newest `limit` judged held-out turns with a non-zero reward, newest first."""
        return [
            HeldOutItem(int(tid), _unpack(_INT32, p), _unpack(_INT32, r), float(score))
            for tid, p, r, score in self._rows(HELD_OUT_SQL, (limit,))
        ]

    def user_prompts(
        self,
        limit: int,
        max_prompt_tokens: int,
        held_out_first: bool = False,
        min_budget: int = 0,
    ) -> list[UserPrompt]:
        """The conversations (request messages) of the user's newest chat turns, newest
        first, each conversation once, at most `limit`: plain text messages only (no tool
        calls), prompts of at most `max_prompt_tokens`, no env or excluded sessions; each
        with the answer budget its request asked for. `held_out_first`: the held-out turns
        (never trained on) first, then those the trainer has not trained on (yet, or
        skipped), then the trained ones, newest first within each: a version fitted to the
        prompts it trained on loops on new ones (brevity/tips25's v2 looped on 3 of 10
        held-out questions and on none of 12 prompts, 10 of them its newest turns).
        `min_budget`: leave out requests that allowed fewer answer tokens (one that set none
        is kept)."""
        unseen_first = "t.holdout DESC, s.state IS 'trained', t.id DESC"
        order = unseen_first if held_out_first else "t.id DESC"
        sql = USER_PROMPTS_SQL.format(order=order)
        out: list[UserPrompt] = []
        seen: set[str] = set()
        for tid, raw in self._rows(sql, (max_prompt_tokens, ENV_PREFIX, limit * 4)):
            request = json.loads(raw)
            messages = request.get("messages") or []
            key = json.dumps(messages, sort_keys=True)
            budget = request_budget(request)
            if budget is not None and budget < min_budget:
                continue
            if plain_chat(messages) and key not in seen:
                seen.add(key)
                out.append(UserPrompt(int(tid), messages, budget))
            if len(out) == limit:
                break
        return out

    def held_out_count(self) -> int:
        """How many turns are held out (judged or not)."""
        return int(self._rows("SELECT count(*) FROM turns WHERE holdout = 1", ())[0][0])

    def version_score(self, name: str, version: str) -> float | None:
        """The newest value of metric `name` stored for `version`, or None."""
        rows = self._rows(
            "SELECT value FROM metrics WHERE name = ? AND version = ? ORDER BY id DESC LIMIT 1",
            (name, version),
        )
        return float(rows[0][0]) if rows else None
