"""Exact-answer grading of tool-call tasks: normalise, then compare by the answer's type."""

from __future__ import annotations

import re
from fractions import Fraction

_STRIP = re.compile(r"[\s$€£]|\\[,!;: ]|\\text\{[^}]*\}")


def normalise(text: str) -> str:
    """Spaces, currency signs and LaTeX spacing out; thousands separators out of numbers;
    a trailing `.0`/`.00` and a final period out."""
    t = _STRIP.sub("", str(text)).strip().rstrip(".")
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", t):
        t = t.replace(",", "")
    if re.fullmatch(r"-?\d+\.0+", t):
        t = t.split(".")[0]
    return t


def _number(text: str) -> Fraction | None:
    t = normalise(text)
    m = re.fullmatch(r"\\(?:d?frac)\{(-?\d+)\}\{(-?\d+)\}", t)
    if m:
        t = f"{m.group(1)}/{m.group(2)}"
    try:
        return Fraction(t)
    except (ValueError, ZeroDivisionError):
        return None


def is_correct(given: str | None, answer: str, answer_type: str, tolerance: float = 0.0) -> bool:
    """Whether `given` is the task's `answer` (types: integer, decimal, fraction, string)."""
    if given is None:
        return False
    if answer_type == "string":
        return normalise(given).casefold() == normalise(answer).casefold()
    got, want = _number(given), _number(answer)
    if got is None or want is None:
        return False
    if answer_type == "integer":
        return got.denominator == 1 and got == want
    if answer_type == "decimal":
        return abs(float(got) - float(want)) <= max(tolerance, 1e-9)
    if answer_type == "fraction":
        return got == want
    raise ValueError(f"unknown answer_type {answer_type!r}")
