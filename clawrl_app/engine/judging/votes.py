"""Parsing judge outputs and turning several votes into one decision.

Pure functions, no model: the judge client samples m outputs, this module reads them.

- PRM votes (REFERENCE §3): each output ends with `\\boxed{-1|0|1}`; `majority_vote`
  combines the valid ones, failed votes are `None`.
- Hint votes (REFERENCE §5): `\\boxed{1}` plus a hint between `[HINT_START]` and
  `[HINT_END]`. Upstream took the longest hint from any single positive vote; we accept a
  hint only when positive votes are a strict majority of the valid votes, choose among
  them by consensus, and record every candidate.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction

BOX_OPEN = "\\boxed{"
HINT_START = "[HINT_START]"
HINT_END = "[HINT_END]"
HINT_SELECTION_RULE = "majority-consensus"
"""Name of the hint selection rule recorded in `HintDecision.rule` when a hint is accepted."""

# The content of a box up to its closing brace; braces inside are not allowed.
_BOX_BODY_RE = re.compile(r"\\boxed\{([^{}]*)\}")
_VALID_SCORES = {"-1": -1, "0": 0, "1": 1, "+1": 1}
_WORD_RE = re.compile(r"\w+")


def parse_boxed(text: str) -> int | None:
    """The score in the LAST `\\boxed{...}` of `text`, or `None` for a failed vote.

    The content must be exactly `-1`, `0`, `1` or `+1` (whitespace inside the braces is
    allowed). The last box decides: if it is malformed (`\\boxed{2}`, `\\boxed{yes}`,
    `\\boxed{}`, no closing brace) the vote fails and we do NOT fall back to an earlier box.
    Earlier boxes are usually drafts or a quoted next state echoed before the verdict;
    guessing from them would turn a confused vote into a confident one.
    """
    start = text.rfind(BOX_OPEN)
    if start < 0:
        return None
    match = _BOX_BODY_RE.match(text, start)
    if match is None:
        return None
    return _VALID_SCORES.get(match.group(1).strip())


def majority_vote(scores: Sequence[int | None]) -> int:
    """Majority over the valid votes; no valid vote or a tie for the top count gives 0.

    `[1, 1, -1] -> 1`, `[1, -1, None] -> 0`, `[1, None, None] -> 1`, `[0, 0, 1] -> 0`.
    """
    counts = Counter(s for s in scores if s is not None)
    if not counts:
        return 0
    ranked = counts.most_common()
    if len(ranked) > 1 and ranked[0][1] == ranked[1][1]:
        return 0
    return ranked[0][0]


@dataclass(frozen=True)
class HintVote:
    """One hint-judge output: its boxed score (None: failed) and its hint (None: absent)."""

    score: int | None
    hint: str | None


def parse_hint_vote(text: str) -> HintVote:
    """Read one hint-judge output.

    The score is `parse_boxed(text)`. The hint is the text between the LAST `[HINT_START]`
    and the `[HINT_END]` that follows it, stripped; `None` when there is no start marker,
    no end marker after it, or nothing between them.
    """
    return HintVote(score=parse_boxed(text), hint=_last_hint(text))


def _last_hint(text: str) -> str | None:
    start = text.rfind(HINT_START)
    if start < 0:
        return None
    body_start = start + len(HINT_START)
    end = text.find(HINT_END, body_start)
    if end < 0:
        return None
    hint = text[body_start:end].strip()
    return hint or None


@dataclass(frozen=True)
class HintDecision:
    """What the hint votes decided, with enough detail to review it later.

    `candidates` are the hints of all positive votes, in vote order (also when rejected);
    `positive` counts those votes and `valid` the votes with a parseable score.
    """

    hint: str | None
    accepted: bool
    candidates: list[str] = field(default_factory=list)
    rule: str = ""
    positive: int = 0
    valid: int = 0


def is_positive(vote: HintVote, min_chars: int = 10) -> bool:
    """A vote supports a hint when it says 1 and its hint is longer than `min_chars`."""
    return vote.score == 1 and vote.hint is not None and len(vote.hint) > min_chars


def select_hint(votes: Sequence[HintVote], min_chars: int = 10) -> HintDecision:
    """Accept a hint only if positive votes are a strict majority of the valid votes.

    Among the positive candidates pick the one with the highest mean word-set Jaccard
    overlap with the other candidates (the hint the majority agrees with); ties go to the
    shortest, then to the earliest vote. A single candidate is taken as is.
    """
    candidates = [v.hint for v in votes if is_positive(v, min_chars) and v.hint is not None]
    valid = sum(1 for v in votes if v.score is not None)
    positive = len(candidates)
    if valid == 0:
        return HintDecision(None, False, candidates, "no valid votes", positive, valid)
    if 2 * positive <= valid:
        reason = f"no majority: {positive} of {valid} valid votes positive"
        return HintDecision(None, False, candidates, reason, positive, valid)
    return HintDecision(
        consensus_hint(candidates), True, candidates, HINT_SELECTION_RULE, positive, valid
    )


def consensus_hint(candidates: Sequence[str]) -> str:
    """The candidate with the highest mean Jaccard overlap with the others (ties: shortest).

    Exact rational arithmetic, so equal overlaps tie exactly and the choice is stable.
    """
    if not candidates:
        raise ValueError("consensus_hint needs at least one candidate")
    words = [_word_set(c) for c in candidates]
    n = len(candidates)

    def agreement(i: int) -> Fraction:
        if n == 1:
            return Fraction(0)
        total = sum((jaccard(words[i], words[j]) for j in range(n) if j != i), Fraction(0))
        return total / (n - 1)

    best = min(range(n), key=lambda i: (-agreement(i), len(candidates[i]), i))
    return candidates[best]


def jaccard(a: set[str], b: set[str]) -> Fraction:
    """|a ∩ b| / |a ∪ b|, with two empty sets counted as identical (1)."""
    union = a | b
    if not union:
        return Fraction(1)
    return Fraction(len(a & b), len(union))


def _word_set(text: str) -> set[str]:
    return set(_WORD_RE.findall(text.lower()))
