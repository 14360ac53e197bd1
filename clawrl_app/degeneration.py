"""Degeneration scored by code: an answer stuck in a loop ("A volcano is a volcano is a
volcano is ..."), repeating its phrases, or running to the token limit in a loop.

A fine-tune that collapses still answers facts ("a volcano" is in the looping answer), so a
fact checker alone passes it. These measures look at form only, over the answer's words:

- `max_phrase_repeats`: the most times one 3-word phrase occurs;
- `repeated_share`: the share of 3-word phrases that repeat an earlier one (0 = none);
- `distinct_2`: distinct word pairs / all word pairs (1 = no pair twice);
- `compression_ratio`: zlib-compressed size / raw size (a loop compresses to little);
- `tail_period`: the period, in words, of a loop the answer ends in (0 = none).

An answer is degenerate when it ends in a loop, or when a phrase recurs and the repeats
dominate (thresholds below; calibrated on the embedded model's own answers: its base answers
to the general set and open prompts are degenerate in a few percent of cases). Pure: no
torch, no engine; the guard, the benchmarks and the tests share it.
"""

from __future__ import annotations

import re
import zlib
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

_WORD = re.compile(r"\w+(?:['’]\w+)*")

PHRASE = 3
"""Words in the phrases counted by `max_phrase_repeats` and `repeated_share`."""
MAX_TAIL_PERIOD = 16
"""Longest loop looked for at the end of an answer, in words."""
TAIL_REPEATS = 3
"""Times a block must repeat at the end to count as a loop ..."""
MIN_TAIL_SPAN = 6
"""... covering at least this many words ("no, no, no" is no loop)."""
PHRASE_REPEATS = 3
"""A phrase seen this often is a repeat worth looking at ..."""
REPEATED_SHARE = 0.3
"""... and degenerate when this share of the answer's phrases are repeats."""
MIN_DISTINCT_2 = 0.5
"""Fewer distinct word pairs than this share (answers of >= 16 words) is degenerate."""
MIN_COMPRESSION = 0.3
"""A compression ratio below this (answers of >= 300 characters) is degenerate."""


@dataclass(frozen=True)
class Degeneration:
    """The form measures of one answer and the verdict."""

    words: int
    max_phrase_repeats: int
    repeated_share: float
    distinct_2: float
    compression_ratio: float
    tail_period: int
    reasons: tuple[str, ...]
    """Why it is degenerate: "tail loop", "repeats", "low distinct-2", "compresses"; empty if not."""

    @property
    def degenerate(self) -> bool:
        return bool(self.reasons)


def words(text: str) -> list[str]:
    """The lower-cased words of `text` (punctuation dropped, "it's" one word)."""
    return [w.lower() for w in _WORD.findall(text)]


def ngrams(ws: Sequence[str], n: int) -> list[tuple[str, ...]]:
    return [tuple(ws[i : i + n]) for i in range(len(ws) - n + 1)]


def max_phrase_repeats(ws: Sequence[str], n: int = PHRASE) -> int:
    """How often the most frequent n-word phrase occurs (0 for fewer than n words)."""
    counts = Counter(ngrams(ws, n))
    return max(counts.values(), default=0)


def repeated_share(ws: Sequence[str], n: int = PHRASE) -> float:
    """Share of the n-word phrases that repeat one seen before (0 for none)."""
    grams = ngrams(ws, n)
    return (len(grams) - len(set(grams))) / len(grams) if grams else 0.0


def distinct_n(ws: Sequence[str], n: int) -> float:
    """Distinct n-word phrases / all of them (1.0 for an answer too short to have any)."""
    grams = ngrams(ws, n)
    return len(set(grams)) / len(grams) if grams else 1.0


def compression_ratio(text: str) -> float:
    """zlib-compressed bytes / raw bytes of `text` (1.0 for an empty text)."""
    raw = text.encode()
    return len(zlib.compress(raw, 9)) / len(raw) if raw else 1.0


def tail_period(
    ws: Sequence[str], max_period: int = MAX_TAIL_PERIOD, repeats: int = TAIL_REPEATS
) -> int:
    """The smallest period p (in words) such that the last max(`repeats` * p, MIN_TAIL_SPAN)
    words repeat with period p, i.e. the answer ends in the same block said again and
    again; 0 if none."""
    n = len(ws)
    for p in range(1, max_period + 1):
        span = max(repeats * p, MIN_TAIL_SPAN)
        if span > n:
            break
        if all(ws[i] == ws[i - p] for i in range(n - span + p, n)):
            return p
    return 0


def score(text: str) -> Degeneration:
    """Measure one answer and decide whether it is degenerate."""
    ws = words(text)
    reps = max_phrase_repeats(ws)
    share = repeated_share(ws)
    d2 = distinct_n(ws, 2)
    ratio = compression_ratio(text)
    period = tail_period(ws)
    reasons = []
    if period:
        reasons.append("tail loop")
    if reps >= PHRASE_REPEATS and share >= REPEATED_SHARE:
        reasons.append("repeats")
    if len(ws) >= 16 and d2 < MIN_DISTINCT_2:
        reasons.append("low distinct-2")
    if len(text) >= 300 and ratio < MIN_COMPRESSION:
        reasons.append("compresses")
    return Degeneration(len(ws), reps, share, d2, ratio, period, tuple(reasons))


def degeneration_rate(answers: Iterable[str]) -> float:
    """Share of `answers` that are degenerate (0.0 for none)."""
    verdicts = [score(a).degenerate for a in answers]
    return sum(verdicts) / len(verdicts) if verdicts else 0.0
