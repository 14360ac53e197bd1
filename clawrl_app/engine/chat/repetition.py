"""Degenerate repetition: an answer stuck in a loop ("The ocean is salty. The ocean is
salty. ..."), which a small model at a low temperature falls into on long prompts. Such
an answer would otherwise run to `max_tokens`; the backend ends it as cut off (`length`)
as soon as the loop is certain, and the judge never rewards a cut-off answer +1 from a
thanks that follows it (see `judge.cap_cut_off`)."""

from __future__ import annotations

from collections.abc import Sequence

MAX_PERIOD = 64
"""Longest loop looked for, in tokens (a sentence or two)."""
MIN_SPAN = 64
"""Tokens the repeated block must cover before the answer is stopped."""
MIN_REPEATS = 4
"""Times the block must repeat (a list of 3 similar items is not a loop)."""


def repeating_tail(
    ids: Sequence[int],
    max_period: int = MAX_PERIOD,
    min_span: int = MIN_SPAN,
    min_repeats: int = MIN_REPEATS,
) -> int:
    """The period p of a loop at the end of `ids`, else 0: the last max(min_span,
    min_repeats * p) tokens repeat with period p (every token equals the one p before
    it). Checked after each token, so it is cheap when there is no loop: a period is
    only verified when the newest token equals the token p positions earlier."""
    n = len(ids)
    last = ids[-1] if n else None
    for p in range(1, min(max_period, n // min_repeats) + 1):
        span = max(min_span, min_repeats * p)
        if span > n or ids[n - 1 - p] != last:
            continue
        if all(ids[i] == ids[i - p] for i in range(n - span + p, n)):
            return p
    return 0
