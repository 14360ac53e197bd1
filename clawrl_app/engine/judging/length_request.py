"""Does a shown answer do what a request for less asks of the answer the user rejected?

The teacher's own answer (`teacher_answer`) is trained as a +1 sample beside the policy's
rejected one. For a request about length that is right only when the shown answer is what
the user asked for: shorter than the rejected one, and within a limit the request states.
Measured end to end (brevity/dozen, "That is a lot of text. Keep it to about a dozen
words, please.", 2026-11-29): the teacher's greedy answers ran 6-38 words, and once the
policy answered in 14-28 words the +1 samples were often *longer* than the rejected ones (38
words against 14, 22 against 15): the served version went from 10 of 10 held-out answers
within a dozen words to 3 of 10. A request that is not about length is not judged here
(`asks_for_less` is False): nothing in its words says which way the answer should move.

Pure functions over text; the numbers a request may state are read from its words.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from clawrl_app.engine.judging.teacher_cut import MAX_SHARE, asks_for_less

_NUMBERS = {
    "one": 1, "a single": 1, "single": 1, "a": 1, "two": 2, "a couple of": 2, "couple of": 2,
    "three": 3, "a few": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
    "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "a dozen": 12, "dozen": 12,
    "fifteen": 15, "twenty": 20, "thirty": 30, "fifty": 50,
}  # fmt: skip
_NUMBER = r"\d+|" + "|".join(sorted(map(re.escape, _NUMBERS), key=len, reverse=True))
_LIMIT_RE = re.compile(
    rf"\b({_NUMBER})[- ](?:(?:short|brief|simple|single|quick|plain)[- ])?"
    r"(words?|sentences?|lines?|liners?)\b",
    re.IGNORECASE,
)
_TERMINATOR_RE = re.compile(r"[.!?]+(?=[\s\"')\]*]|$)")


@dataclass(frozen=True)
class Limits:
    """The limits a request states (None: not stated)."""

    words: int | None = None
    sentences: int | None = None
    lines: int | None = None


def stated_limits(request: str) -> Limits:
    """The word, sentence and line limits `request` states ("at most 15 words", "about a
    dozen words", "two sentences", "a one-liner"); the smallest of each kind wins."""
    found: dict[str, int] = {}
    for number, unit in _LIMIT_RE.findall(request):
        n = int(number) if number.isdigit() else _NUMBERS[number.lower()]
        if n <= 0 or (number.lower() == "a" and unit.lower().startswith("word")):
            continue  # "not a word more" states no limit
        kind = "words" if unit.lower().startswith("word") else "sentences"
        if unit.lower().startswith("line") and not unit.lower().startswith("liner"):
            kind = "lines"
        found[kind] = min(n, found.get(kind, n))
    return Limits(found.get("words"), found.get("sentences"), found.get("lines"))


def form_cue(request: str) -> str:
    """What the teacher reads after a request for less that states a small limit, in words
    a small model follows: " One short sentence." for at most 25 words, one sentence or one
    line; " Two short sentences." for at most 45 words or two sentences; "" otherwise. The
    base model read "Please answer in at most 15 words." and answered in 16-27 words; with
    the cue it kept an answer the user asked for on more rejected turns of the users'
    stores (bench/teacher_tries.py figures in docs/benchmarks/learning.md)."""
    if not asks_for_less(request):
        return ""
    limits = stated_limits(request)
    words = limits.words if limits.words is not None else 10**6
    if words <= 25 or limits.sentences == 1 or limits.lines == 1:
        return " One short sentence."
    if words <= 45 or limits.sentences == 2:
        return " Two short sentences."
    return ""


def sentence_count(text: str) -> int:
    """Sentence terminators in `text`, at least 1 for a non-empty text without one."""
    return max(len(_TERMINATOR_RE.findall(text)), 1 if text.strip() else 0)


def does_what_was_asked(shown: str, rejected: str, request: str) -> bool:
    """Whether `shown` (a +1 sample) answers a request for less about `rejected`: shorter
    than it, and within every limit the request states; without a stated word limit, at
    most MAX_SHARE of its words (a real shortening). True for a request not about length."""
    if not asks_for_less(request):
        return True
    n, before = len(shown.split()), len(rejected.split())
    if before and n >= before:
        return False
    limits = stated_limits(request)
    if limits.sentences is not None and sentence_count(shown) > limits.sentences:
        return False
    lines = [ln for ln in shown.splitlines() if ln.strip()]
    if limits.lines is not None and len(lines) > limits.lines:
        return False
    if limits.words is not None:
        return n <= limits.words
    return not before or n <= MAX_SHARE * before


# 'The answer is: "The Autumn Leaves Change Colour"': a lead-in and a quoted title, the
# form a small teacher falls into when it misreads the hint (seen on the embedded model)
_QUOTED_LEAD_IN_RE = re.compile(
    r"^\W*(?:the |my )?answer(?: to (?:this|your|the|that) question)? is\s*:?\s*[\"\u201c]",
    re.IGNORECASE,
)


def says_something(shown: str, question: str) -> bool:
    """Whether `shown` is an answer, not a lead-in: it does not end on a colon ("The answer
    to this question is:"), does not put its words in quotes after "the answer is"
    ('The answer is: "The Autumn Leaves Change Colour"') and does not repeat the whole
    question back, for a question of three words or more."""
    text = shown.strip()
    if not text or text.endswith(":") or _QUOTED_LEAD_IN_RE.search(text):
        return False
    q = _plain(question)
    return len(q.split()) < 3 or q not in _plain(text)


def _plain(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s']", " ", text.lower()).split())
