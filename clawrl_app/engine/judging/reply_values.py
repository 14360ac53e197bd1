"""Values in a reply that replace the answer's: times, days, months, dates, numbers, names.

"Wednesday, not Tuesday.", "Actually, make it 6:30." (the answer said 6:00), "168" (the
answer said 158), "ottawa" (the answer said Toronto), "get_user_name" (the answer said
get_username): the reply gives a value of the same kind as one in the answer, and a
different one. A reply that repeats the answer's value ("9:15 is fine", "8:10 right") is
not a replacement. Pure functions over text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from clawrl_app.engine.judging.corrections import fold

_I = re.IGNORECASE


def _words(text: str) -> frozenset[str]:
    """The whitespace-separated words of `text`, as a set (for word lists written as prose)."""
    return frozenset(text.split())


KINDS = ("time", "day", "month", "date", "number")
"""The kinds of value compared, in the order a replacement is looked for."""

_TIME_RE = re.compile(
    r"\b(\d{1,2}):(\d{2})\s*([ap])?\.?m?\b|\b(\d{1,2})\s*([ap])\.?m\.?(?![a-z])", _I
)
_DAYS = {
    "monday": ("mon", "monday", "mondays"),
    "tuesday": ("tue", "tues", "tuesday", "tuesdays"),
    "wednesday": ("wed", "weds", "wednesday", "wednesdays"),
    "thursday": ("thu", "thur", "thurs", "thursday", "thursdays"),
    "friday": ("fri", "friday", "fridays"),
    "saturday": ("sat", "saturday", "saturdays"),
    "sunday": ("sun", "sunday", "sundays"),
    "today": ("today", "tonight"),
    "tomorrow": ("tomorrow", "tmrw", "tmr", "tmrow", "tomorow"),
    "yesterday": ("yesterday",),
}
_DAY_OF = {form: day for day, forms in _DAYS.items() for form in forms}
_MONTHS = tuple(
    _words("january february march april may june july august september october november december")
)
_MONTH_OF = (
    {m: m for m in _MONTHS if m != "may"}
    | {m[:3]: m for m in _MONTHS if m != "may"}
    | {"sept": "september"}
)
_MAY_RE = re.compile(r"\d(?:st|nd|rd|th)?\s+may\b|\bmay\s+\d", _I)
_ORDINAL_RE = re.compile(r"\b(\d{1,2})(?:st|nd|rd|th)\b", _I)
_NUMBER_RE = re.compile(r"(?<![\w.:/])-?\d[\d,]*(?:\.\d+)?(?![\w:])")
# a number that sizes a text ("a 500-word essay", "under 280 characters"): a length
_SIZE_RE = re.compile(
    r"(?<![\w.:/])(\d[\d,]*)[- ](?:words?|characters?|chars|pages?|lines?|sentences?|"
    r"paragraphs?|bullets?)\b",
    _I,
)
_WORD_RE = re.compile(r"[a-z][a-z_']*", _I)

_FRAMING_RE = re.compile(
    r"\b(?:not|actually|it'?s|its|it is|should|checked|tho|though|wasn'?t|isn'?t)\b|"
    r"\bmake (?:it|that|this|them)\b|[?*]",
    _I,
)
_MAX_SHORT_WORDS = 6
_WH_WORDS = r"who|what|whats|when|where|which|why|how"
_NEW_QUESTION_RE = re.compile(rf"^\W*(?:{_WH_WORDS}|can|could|would|do|does|is|are)\b", _I)
_LATER_QUESTION_RE = re.compile(
    rf"[.!?]\s+(?:(?:anyway|so|ok|okay|also|and|btw|oh|right)\W+)?(?:{_WH_WORDS})\b", _I
)
"""A new question after a first sentence about something else, with no word that frames
a correction."""
# A statement about the user ("We went there in 2015.", "My flight is on Friday."): news,
# not a value put in place of the answer's, unless framed as a correction.
# A new task that happens to carry a number ("Convert 20 euros to dollars.").
_NEW_TASK_RE = re.compile(
    r"^\W*(?:plan|convert|translate|write|list|name|suggest|calculate|compute|find|give me|"
    r"make (?:me )?(?:a|an|some)|"
    r"show me|tell me|explain|describe|summari[sz]e|draft|create|generate|recommend|book|"
    r"schedule|estimate|draw|compose|pick|choose)\b",
    _I,
)
_ABOUT_ME_RE = re.compile(
    r"^\W*(?:(?:so|and|well|ok|okay|anyway|also)\W+)?(?:(?:tomorrow|today|tonight|yesterday|"
    r"this (?:week|weekend|morning|evening)|next (?:week|month))\W+)?"
    r"(?:i|we|my|our|i'?m|i'?ve|i'?ll|we'?re|we'?ve|we'?ll)\b",
    _I,
)


def extract_values(text: str) -> dict[str, set[str]]:
    """The values in `text` by kind, normalised ("6pm" and "6:00" are both "6:00")."""
    values: dict[str, set[str]] = {kind: set() for kind in KINDS}
    rest = text
    for m in _TIME_RE.finditer(text):
        hour = int(m.group(1) or m.group(4)) % 12
        minute = int(m.group(2) or 0)
        values["time"].add(f"{hour}:{minute:02d}")
    rest = _TIME_RE.sub(" ", rest)
    for m in _ORDINAL_RE.finditer(rest):
        values["date"].add(str(int(m.group(1))))
    rest = _ORDINAL_RE.sub(" ", rest)
    for word in _WORD_RE.findall(rest.lower()):
        if word in _DAY_OF:
            values["day"].add(_DAY_OF[word])
        elif word in _MONTH_OF:
            values["month"].add(_MONTH_OF[word])
    if _MAY_RE.search(rest):
        values["month"].add("may")
    for m in _NUMBER_RE.finditer(rest):
        values["number"].add(_normalise_number(m.group(0)))
    return values


def _normalise_number(raw: str) -> str:
    number = raw.replace(",", "")
    if "." in number:
        number = number.rstrip("0").rstrip(".")
    return number


def replacement_value(reply: str, answer: str) -> str | None:
    """A value in `reply` that differs from the answer's values of the same kind.

    Only for a short reply (at most six words) or one framed as a correction ("not",
    "actually", "it's", "should", a question mark, an asterisk), so that a long reply that
    happens to mention a number is not read as a correction; nor is a new question ("Who
    won the 1998 World Cup?") or news about the user ("We went there in 2015."). A bare hour ("make fri 8")
    counts as a time when the answer gave times and no other numbers.
    """
    words = reply.split()
    if len(words) > _MAX_SHORT_WORDS and not _FRAMING_RE.search(reply):
        return None
    if _NEW_QUESTION_RE.search(reply):
        return None
    if _LATER_QUESTION_RE.search(reply) and not _framed_by_words(reply):
        return None  # "long day here. anyway, what's the difference between a W-4 and a W-9?"
    if _ABOUT_ME_RE.search(reply) and not _framed_by_words(reply):
        return None
    if _NEW_TASK_RE.search(reply) and not _FRAMING_RE.search(reply):
        return None
    mine, theirs = extract_values(reply), extract_values(answer)
    if not _SIZE_RE.search(answer):  # a size of a text is no value the answer gave
        mine["number"] -= {_normalise_number(m.group(1)) for m in _SIZE_RE.finditer(reply)}
    if theirs["time"] and not theirs["number"]:
        hours = {n for n in mine["number"] if n.isdigit() and 1 <= int(n) <= 12}
        mine["time"] |= {f"{int(n) % 12}:00" for n in hours}
        mine["number"] -= hours
    for kind in KINDS:
        new = mine[kind] - theirs[kind]
        if new and theirs[kind]:
            return f"{kind} {_join(new)} for {_join(theirs[kind])}"
    return None


def _framed_by_words(reply: str) -> bool:
    """Framed as a correction by a word ("not", "actually", ...), not only by a question
    mark: "so tomorrow I have an interview ... can you quiz me?" is news and a new ask."""
    return _FRAMING_RE.search(reply.replace("?", " ").replace("*", " ")) is not None


def _join(values: Iterable[str]) -> str:
    return "/".join(sorted(values))


# Words that make a short reply a reaction or a sentence rather than a bare name.
_NOT_A_NAME = _words(
    """ok okay k kk ya yea yeah yep yup yes no nope sure fine fair hmm hm huh oh ah ahh mhm
    uh um wow lol lmao haha hahaha idk brb alright right cool nice neat welp meh crazy deep
    hot interesting true noted thanks thx ty wait what why how when where who which is are
    was were it its it's the a an and or but so to of for in on at this that do does did can
    you u i me my we they he she not tho though actually really hmmm ugh hey yo please pls
    really same agreed"""
)
_CAPITALISED_RE = re.compile(r"(?<![.!?:]\s)(?<!^)\b[A-Z][a-zà-ÿ]+")
_MAX_NAME_ANSWER_WORDS = 15


def bare_name(reply: str, answer: str) -> str | None:
    """A reply that is only a name (1-3 words) absent from a short answer that gave a name.

    "ottawa" after "Toronto.", "jane austen??" after "...written by Charlotte Brontë.".
    Reactions ("huh", "lol", "fair") and sentences ("is it long") are not names.
    """
    words = [w.lower() for w in _WORD_RE.findall(reply)]
    if not 1 <= len(words) <= 3 or len(reply) > 40 or re.search(r"\d", reply):
        return None
    if any(w in _NOT_A_NAME for w in words):
        return None
    answer_words = answer.split()
    if len(answer_words) > _MAX_NAME_ANSWER_WORDS:
        return None
    gave_name = bool(_CAPITALISED_RE.search(answer)) or (
        len(answer_words) <= 3 and answer[:1].isupper()
    )
    if not gave_name or any(re.search(rf"\b{re.escape(w)}\b", answer, _I) for w in words):
        return None
    return f"name {' '.join(words)}"


_TOKEN_RE = re.compile(r"[a-z][a-z0-9_]{4,}", _I)


_CHAT_WORDS = frozenset(
    [
        "right",
        "ok",
        "okay",
        "noted",
        "yes",
        "yeah",
        "yep",
        "sure",
        "thanks",
        "fine",
        "good",
        "cool",
        "nice",
        "got",
        "it",
        "mm",
        "hmm",
        "ah",
        "oh",
    ]
)
"""Words of an acknowledgement: never a spelling fix."""


def near_miss(reply: str, answer: str) -> str | None:
    """A reply word one or two edits away from an answer word: a spelling or name fix.

    "accommodate, double m" after "accomodate"; "get_user_name" after "get_username".
    Only for replies of at most four words; inflections ("works" for "worked", a word that
    starts with the other) do not count.
    """
    if len(reply.split()) > 4:
        return None
    answer_tokens = {t.lower() for t in _TOKEN_RE.findall(answer)}
    for token in (t.lower() for t in _TOKEN_RE.findall(reply)):
        if token in answer_tokens or token in _CHAT_WORDS:  # "mm right, noted" fixes no "light"
            continue
        for other in answer_tokens:
            if token.startswith(other) or other.startswith(token) or fold(token) == fold(other):
                continue
            if edit_distance(token, other, limit=2) <= 2:
                return f"spelling {token} for {other}"
    return None


def edit_distance(a: str, b: str, limit: int = 2) -> int:
    """Levenshtein distance between `a` and `b`, or `limit + 1` once it exceeds `limit`."""
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        if min(current) > limit:
            return limit + 1
        previous = current
    return min(previous[-1], limit + 1)
