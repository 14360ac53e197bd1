"""Where the teacher would have stopped: the policy's own answer, cut there, as a +1 sample.

A correction about length ("Shorter please, 25 words max.", "That is a lot of text. Keep it
to about a dozen words, please.") says where the answer should have ended, and the one
signal a small teacher gives about it is its end token: reading the hint, the embedded
model would end "How can I sleep better?"'s answer after its first three sentences with
probability 0.41, 0.60 and 0.25, where the policy's is 0.01-0.02 (docs/benchmarks/
learning.md). End to end the served answers run to the token limit, every one is rejected,
and a batch of -1s alone teaches nothing (no contrast). `teacher_cut` turns that signal
into a sample: the policy's own answer up to the first sentence end where the teacher,
reading the hint, would stop, then the end token, rewarded +1 beside the whole answer's
-1 (`TrainItem.demonstration`). Every token but the end is the policy's own, so the pair
differs in one place: end here, or go on. Unlike the teacher's own answer
(`teacher_answer`), nothing the policy would not say is pushed up.

A cut is made only for a hint that asks for less (`asks_for_less`: "shorter", "too long",
"at most 15 words", "a lot of text", ...; a hint about tone, format or content gets none:
reading any hint, this teacher ends earlier than without one, so its end token alone cannot
tell them apart). It is the earliest sentence end (of the first MAX_CUTS) where the teacher
reading the hint would stop with probability at least MIN_STOP_P, that keeps at most
MAX_SHARE of the answer's words (a real shortening: the whole answer was rejected), and is
not degenerate (`clawrl_app.degeneration`). Measured on the base model's 45-58-word answers
to four questions (2026-11-28): "Shorter please, 25 words max." stops "How can I
sleep better?" after 7 words (0.68), "How do I start running?" after 21 (0.37), and "Why is
the sky blue?" nowhere short of its end (0.05 at 14 words): no cut there.
"""

from __future__ import annotations

import math
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from clawrl_app.degeneration import score as form_of
from clawrl_app.engine.chat.formatter import eos_token_ids
from clawrl_app.engine.judging.prompts import teacher_messages
from clawrl_app.engine.store.guard import plain_chat

if TYPE_CHECKING:
    from clawrl_app.engine.backends.base import Backend
    from clawrl_app.engine.chat.formatter import ChatFormatter
    from clawrl_app.engine.store import TurnRow

MIN_STOP_P = 0.1
"""Least probability of the end token, under the hint, for the teacher to stop there."""
MAX_SHARE = 0.75
"""Most of the answer's words a cut may keep."""
MAX_CUTS = 8
"""Sentence ends tried (the earliest ones)."""
MIN_WORDS = 3
"""Fewest words before a cut."""

_LESS_RE = re.compile(
    r"\b(?:shorter|shorten|briefer|brief|briefly|concise|concisely|succinct|terse|short|"
    r"too long|too wordy|wordy|verbose|long-winded|rambling|tl;?dr|wall of text|"
    r"a lot of (?:text|words|reading)|less text|fewer words|less words|"
    r"cut (?:it|that|this) down|trim|the gist|get to the point|"
    r"(?:at most|no more than|not more than|under|below|max(?:imum)?|within|only|just|about|"
    r"around|in|to) (?:\d+|a dozen|dozen|one|two|three|a few|a couple of) "
    r"(?:words?|sentences?|lines?)|"
    r"(?:\d+|a dozen|dozen) words? (?:max|tops|or (?:fewer|less))|"
    r"(?:one|a single|1)[- ](?:sentence|line|liner))\b",
    re.IGNORECASE,
)
_MORE_RE = re.compile(
    r"\b(?:longer|more detail|in detail|elaborate|expand|go deeper|say more|too short|"
    r"too brief)\b",
    re.IGNORECASE,
)


def asks_for_less(hint: str) -> bool:
    """Whether `hint` asks for a shorter answer (and not a longer one)."""
    return bool(_LESS_RE.search(hint)) and not _MORE_RE.search(hint)


_LAST_WORD_RE = re.compile(r"(\S+)[.!?]$")


def sentence_ends(ids: Sequence[int], decode: Callable[[list[int]], str]) -> list[int]:
    """Prefix lengths of `ids` (answer tokens, no end token) after which a sentence ends:
    the decoded prefix ends in ".", "!" or "?" right after a word of two letters or more
    ("1." and "3.5" do not end one), with at least MIN_WORDS words; never the whole
    answer; at most MAX_CUTS, the earliest."""
    out: list[int] = []
    for i in range(1, len(ids)):
        text = decode(list(ids[:i]))
        if not text or text != text.rstrip() or text[-1] not in ".!?":
            continue
        last = _LAST_WORD_RE.search(text)
        if last is None or sum(c.isalpha() for c in last.group(1)) < 2:
            continue
        if len(text.split()) < MIN_WORDS:
            continue
        out.append(i)
        if len(out) == MAX_CUTS:
            break
    return out


def stops(logprob: float, min_p: float = MIN_STOP_P) -> bool:
    """Whether the teacher would end here: its end token's log-prob is at least log `min_p`."""
    return logprob >= math.log(min_p)


def choose_cut(options: Sequence[tuple[int, float]], min_p: float = MIN_STOP_P) -> int | None:
    """Of (prefix length, the end token's log-prob there with the hint), in answer order,
    the first where the teacher would stop (`stops`); None."""
    return next((i for i, lp in options if stops(lp, min_p)), None)


ScoreFn = Callable[[list[int]], Awaitable[list[float]]]


async def cut_of(
    ids: Sequence[int],
    end_id: int,
    decode: Callable[[list[int]], str],
    with_hint: ScoreFn,
) -> list[int] | None:
    """The cut of answer `ids` (no end token) as token ids ending in `end_id`, or None;
    `with_hint` scores response ids after the prompt with the hint (the teacher's log-probs,
    one per token). Sentence ends are scored in order until one is kept."""
    words = len(decode(list(ids)).split())
    for i in sentence_ends(ids, decode):
        text = decode(list(ids[:i]))
        if len(text.split()) > MAX_SHARE * words:
            return None
        if stops((await with_hint([*ids[:i], end_id]))[-1]):
            return None if form_of(text).degenerate else [*ids[:i], end_id]
    return None


async def teacher_cut(
    backend: Backend,
    formatter: ChatFormatter,
    turn: TurnRow,
    hint: str,
    version: str | None,
) -> list[int] | None:
    """The turn's answer cut where the teacher (`version`; None: the base) reading `hint`
    would have stopped, its end token appended (module docstring); None when the hint does
    not ask for less, there is no such place, the answer has no ids (redacted) or the turn
    is not plain chat."""
    req = turn.request
    messages = req.get("messages") or []
    if req.get("tools") or not plain_chat(messages) or not turn.response_ids:
        return None
    if not asks_for_less(hint):
        return None
    stops = set(eos_token_ids(formatter.tokenizer))
    ids = list(turn.response_ids)
    if ids[-1] in stops:  # it ended on its own: end the cut the same way
        end_id, ids = ids[-1], ids[:-1]
    else:  # cut off at the budget: the tokenizer's own end of turn
        end_id = formatter.tokenizer.eos_token_id
        if end_id is None:
            return None
    hinted = formatter.render(teacher_messages(messages, hint))

    async def with_hint(response: list[int]) -> list[float]:
        return await backend.score(hinted, response, version)

    return await cut_of(ids, end_id, formatter.decode, with_hint)
