"""Repetition as an explicit negative signal in the policy gradient.

A small model pushed by a user's feedback drifts toward loops ("I'm here to help. I'm here
to help. ..."): an answer the user liked is reinforced token by token, its repeated phrases
included, and every copy of a phrase makes the next copy likelier. So a token that completes
an n-token sequence already said earlier in the same answer is never pushed up, and is
pushed down a little (`discourage`); the first occurrence of every phrase trains as usual.
Pure functions: token ids in, flags out; the tensor rule takes the objective's advantages.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

REPEAT_NGRAM = 4
"""Tokens in the sequences looked for (4: a phrase, not a common word pair)."""


def repeat_flags(ids: Sequence[int], n: int = REPEAT_NGRAM) -> list[bool]:
    """Per token of `ids`: True when the n tokens ending here occurred, in that order, ending
    at an earlier position of the same sequence (the second and later copies of a phrase,
    from their n-th token on). n <= 0 flags nothing."""
    flags = [False] * len(ids)
    if n <= 0:
        return flags
    seen: set[tuple[int, ...]] = set()
    for i in range(n - 1, len(ids)):
        gram = tuple(ids[i - n + 1 : i + 1])
        flags[i] = gram in seen
        seen.add(gram)
    return flags


def discourage(
    adv_BT: Tensor, repeat_BT: Tensor | None, valid_BT: Tensor, penalty: float
) -> Tensor:
    """`adv_BT` with every valid repeating token's advantage set to min(A, 0) - `penalty`:
    a repeat is never reinforced and is pushed down by at least `penalty`. Unchanged when no
    flags are given (a custom batch, the setting off)."""
    if repeat_BT is None:
        return adv_BT
    hit_BT = repeat_BT.bool() & valid_BT  # (B, T)
    return torch.where(hit_BT, adv_BT.clamp(max=0.0) - penalty, adv_BT)  # (B, T)
