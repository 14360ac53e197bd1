"""A deterministic next-state classifier: the judge for policies too small to judge.

A 135M model cannot score its own turns reliably, so for small policies the next state is
classified by documented regexes instead (word boundaries, case-insensitive unless noted).

Tool results (`role="tool"`):
  -1 on an error signal (`TOOL_ERROR_PATTERNS`): a Python traceback, an exception or
     `...Error` name (case-sensitive), `error:`, `ERROR`, `fatal:`, `failed`/`failure`,
     `not found`, `No such file`, `permission denied`, a non-zero exit code/status,
     a JSON `"error":` key whose value is not null/false/empty, `invalid`, `timed out`.
     Zero-count phrases (`0 failed`, `no errors`) are removed first.
  +1 on any other non-empty result; 0 on an empty one.
User replies (`role="user"`):
  -1 on a redo / correction / rephrase / complaint signal (`USER_NEGATIVE_PATTERNS`);
  +1 on acceptance, thanks or moving on (`USER_POSITIVE_PATTERNS`);
   0 otherwise. Negative signals win over politeness: "thanks, but that's wrong" is -1.
Hints (for OPD): a -1 user reply yields the user's own corrective words; a tool error
yields "The previous tool call failed with: <first error line>. Fix the call."

Known blind spots, measured on assets/judge_calibration.jsonl: sarcasm, rephrasings of
the same request, corrections without a keyword, and benign mentions of error words in
tool output (an error handler's source reads as a failure).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

HEURISTIC_RULES_VERSION = "heuristic-v1"
"""Bump when any pattern below changes; recorded with every heuristic verdict."""

_I = re.IGNORECASE
_M = re.MULTILINE

TOOL_ERROR_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("traceback", re.compile(r"\btraceback\b", _I)),
    ("exception", re.compile(r"\b\w*Exception\b")),
    ("error name", re.compile(r"\b\w*Error\b")),
    ("error:", re.compile(r"\berror\s*:", _I)),
    ("ERROR", re.compile(r"\bERROR\b")),
    ("fatal:", re.compile(r"\bfatal\s*:", _I)),
    ("failed", re.compile(r"\bfail(?:ed|ure|ing)\b", _I)),
    ("not found", re.compile(r"\bnot found\b", _I)),
    ("no such file", re.compile(r"\bno such file\b", _I)),
    ("permission denied", re.compile(r"\bpermission denied\b", _I)),
    (
        "non-zero exit",
        re.compile(
            r"\bexit(?:ed)?(?: with)? (?:code|status)\s*[:=]?\s*(?!0\b)-?\d+|\bnon-?zero exit", _I
        ),
    ),
    ("json error", re.compile(r'"error"\s*:(?!\s*(?:null\b|false\b|""|\[\s*\]|\{\s*\}))', _I)),
    ("invalid", re.compile(r"\binvalid\b", _I)),
    ("timed out", re.compile(r"\btimed out\b", _I)),
]
"""Error signals in a tool result, each with the name given as the verdict's reason."""

_BENIGN_ZERO_RE = re.compile(r"\b(?:0|no|zero) (?:errors?|failures?|failed)\b", _I)
_TRACEBACK_RE = TOOL_ERROR_PATTERNS[0][1]

USER_NEGATIVE_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("no", re.compile(r"^\s*(?:no|nope|nah)\b(?!\s+(?:problem|worries|need|rush)\b)", _I)),
    ("wrong", re.compile(r"\bwrong\b", _I)),
    ("incorrect", re.compile(r"\bincorrect\b", _I)),
    ("not what I asked", re.compile(r"\bnot what i (?:asked|wanted|meant)\b", _I)),
    ("try again", re.compile(r"\btry (?:it )?again\b", _I)),
    ("again", re.compile(r"(?<!thanks )(?<!thank you )\bagain\b", _I)),
    ("redo", re.compile(r"\bre-?do\b", _I)),
    ("I said", re.compile(r"\bi said\b", _I)),
    ("I asked", re.compile(r"\bi asked\b", _I)),
    ("please don't", re.compile(r"\bplease (?:don'?t|do not)\b", _I)),
    ("stop", re.compile(r"\bstop\b", _I)),
    ("shorter", re.compile(r"\bshorter\b", _I)),
    ("too long", re.compile(r"\btoo (?:long|short|verbose|wordy)\b", _I)),
    ("instead", re.compile(r"\binstead\b", _I)),
    ("should be", re.compile(r"\bshould be\b", _I)),
    ("you forgot", re.compile(r"\byou (?:forgot|missed|didn'?t)\b", _I)),
    (
        "doesn't work",
        re.compile(
            r"\b(?:doesn'?t|does not|didn'?t|did not|isn'?t|is not|not) work(?:s|ing)?\b", _I
        ),
    ),
    ("broken", re.compile(r"\b(?:still )?broken\b|\bstill (?:fails|failing)\b", _I)),
    (
        "reports an error",
        re.compile(
            r"\b(?:i get|i got|getting|it throws|throws|threw|gives me) (?:an? |the )?"
            r"(?:error|exception|traceback)\b",
            _I,
        ),
    ),
]
"""Redo / correction / complaint signals in a user reply."""

USER_POSITIVE_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("thanks", re.compile(r"\b(?:thanks|thank you|thx)\b", _I)),
    ("great", re.compile(r"\bgreat\b", _I)),
    ("perfect", re.compile(r"\bperfect\b", _I)),
    ("that works", re.compile(r"\b(?:that|this|it) works\b", _I)),
    ("exactly", re.compile(r"\bexactly\b", _I)),
    ("awesome", re.compile(r"\bawesome\b", _I)),
    ("got it", re.compile(r"\bgot it\b", _I)),
    ("nice", re.compile(r"\bnice\b", _I)),
    ("cool", re.compile(r"\bcool\b", _I)),
    ("looks good", re.compile(r"\blooks good\b|\blgtm\b", _I)),
    ("excellent", re.compile(r"\bexcellent\b", _I)),
    ("next,", re.compile(r"\bnext\s*[,:]", _I)),
    ("now let's", re.compile(r"\bnow let'?s\b", _I)),
    ("ok, now", re.compile(r"\b(?:ok|okay)\s*,?\s*now\b", _I)),
]
"""Acceptance / thanks / moving-on signals in a user reply."""

# Leading filler stripped from a corrective reply before it becomes a hint.
_FILLER_RE = re.compile(
    r"^\s*(?:no|nope|nah|wrong|that'?s wrong|that is wrong|incorrect|that'?s incorrect|"
    r"not quite|hmm+|ugh|thanks|thank you|ok|okay)\b\s*[,.!:;-]*\s*(?:but\s+)?",
    _I,
)
_SENTENCE_END_RE = re.compile(r"(?<=[.!?])\s+")
_MIN_HINT_CHARS = 10
_MAX_ERROR_LINE_CHARS = 200


@dataclass(frozen=True)
class HeuristicVerdict:
    """The heuristic's score in {-1, 0, 1}, why, and an OPD hint for -1 verdicts."""

    score: int
    reason: str
    hint: str | None = None


def first_match(text: str, patterns: list[tuple[str, re.Pattern[str]]]) -> str | None:
    """The name of the first pattern that matches `text`, or None."""
    for name, pattern in patterns:
        if pattern.search(text):
            return name
    return None


def classify_next_state(role: str, text: str) -> HeuristicVerdict:
    """Score a turn from its next state alone (see the module docstring for the rules)."""
    if role == "tool":
        return _classify_tool(text)
    if role == "user":
        return _classify_user(text)
    return HeuristicVerdict(0, f"unknown next-state role {role!r}")


def _classify_tool(text: str) -> HeuristicVerdict:
    if not text.strip():
        return HeuristicVerdict(0, "empty tool result")
    cleaned = _BENIGN_ZERO_RE.sub("", text)
    signal = first_match(cleaned, TOOL_ERROR_PATTERNS)
    if signal is None:
        return HeuristicVerdict(1, "tool returned a non-error result")
    line = error_line(cleaned)
    hint = f"The previous tool call failed with: {line}. Fix the call."
    return HeuristicVerdict(-1, f"tool error signal: {signal}", hint)


def error_line(text: str) -> str:
    """The line that best states a tool error, at most 200 characters.

    After a traceback, the last matching line (`ValueError: ...`); otherwise the first.
    """
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    matching = [line for line in lines if first_match(line, TOOL_ERROR_PATTERNS)]
    if not matching:
        line = lines[0] if lines else ""
    elif _TRACEBACK_RE.search(text):
        non_header = [m for m in matching if not _TRACEBACK_RE.search(m)]
        line = (non_header or matching)[-1]
    else:
        line = matching[0]
    return line[:_MAX_ERROR_LINE_CHARS].rstrip(" .")


def _classify_user(text: str) -> HeuristicVerdict:
    negative = first_match(text, USER_NEGATIVE_PATTERNS)
    if negative is not None:
        return HeuristicVerdict(-1, f"user correction signal: {negative}", corrective_hint(text))
    positive = first_match(text, USER_POSITIVE_PATTERNS)
    if positive is not None:
        return HeuristicVerdict(1, f"user acceptance signal: {positive}")
    return HeuristicVerdict(0, "no clear signal in the user reply")


def corrective_hint(text: str) -> str | None:
    """The user's corrective words as a hint: fillers stripped, at most three sentences.

    None when fewer than 10 characters remain.
    """
    remaining = " ".join(text.split())
    while True:
        stripped = _FILLER_RE.sub("", remaining, count=1)
        if stripped == remaining:
            break
        remaining = stripped
    sentences = [s for s in _SENTENCE_END_RE.split(remaining) if s]
    hint = " ".join(sentences[:3]).strip()
    if len(hint) < _MIN_HINT_CHARS:
        return None
    return hint[0].upper() + hint[1:]
