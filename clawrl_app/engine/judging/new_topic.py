"""What in a user's reply is not about the answer: a new topic it opens, words it quotes.

A reply that opens another topic ("short question: is it safe to eat raw cookie dough?",
"different task: turn these into bullets - milk, eggs", "... so random question: why do
cats purr?") says nothing of the answer after its marker, however its words read ("short",
"bullets", a number): only what comes before the marker can judge the answer. Words in
quotes ("how do you say 'I was wrong, sorry' in French?") are the user's material, not
the user's verdict. Round 9 of the judge's phrasings (2026-12-02) read 10 of 20 such
neutral replies as corrections.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_I = re.IGNORECASE

_TOPIC = (
    r"(?:different|separate|side|random|quick|short|new|unrelated|other|another|"
    r"totally different|completely different) (?:question|q|task|topic|subject|request)\b"
)
_MARKER_RE = re.compile(
    # at the start of the reply or of a clause: "Unrelated, but ...", "thanks. different
    # question: ...", "so random question: ..." ("You answered a different question." is
    # no marker: it complains)
    rf"(?:^|[^\w\s'\"]\s*|\b(?:so|and|ok|okay|also|oh|but|now|alright|anyway|hey)\s+)"
    rf"(?:(?:a|one|totally|completely)\s+)?(?P<m>unrelated\b|off[- ]topic\b|{_TOPIC}|"
    r"on (?:another|a different|an unrelated) note\b|change of (?:topic|subject)\b|"
    r"chang(?:e|ing) the (?:topic|subject)\b)|"
    # anywhere, when a colon or a comma follows: "another thing while I remember: ..."
    rf"\b(?P<c>while i remember|before i forget|while i'?m here|{_TOPIC})\s*[:,\-\u2013\u2014]|"
    # "different thing: ...", "new one: ...": only with a colon or a dash after them
    r"(?:^|[.!?;,]\s*)(?P<d>(?:a )?(?:different|new|other|separate) (?:thing|one)|next one)\s*[:\-\u2013\u2014]|"
    # "separate thing, how do I ...": a comma will do after "thing" at the start
    r"^\W*(?P<e>(?:a )?(?:separate|different|unrelated|other) thing)\s*,",
    _I,
)
# a quoted span: opening quote not inside a word ("don't" is no quote), at most 80 chars
_QUOTED_RE = re.compile(r"(?<!\w)(['\"\u2018\u201c])([^'\"\u2018\u2019\u201c\u201d]{1,80})"
                        r"(['\"\u2019\u201d])(?!\w)")  # fmt: skip
# the user steps away: "gotta run, lunch. back in 20", "brb", "afk 10 min"
_AWAY_RE = re.compile(
    r"^\W*(?:(?:ok|okay|k|alright|right)\W+)?(?:brb|afk|be right back|got(?:ta| to) "
    r"(?:run|go|dash)|back in \d+|"
    # "Let me try it and get back to you.": the verdict comes later
    r"(?:let me|i'?ll|i will) (?:try|test|run|check) (?:it|this|that)(?: out)? (?:and|then) "
    r"(?:get back to you|report back|let you know))\b",
    _I,
)


# words that size the new question, not the answer: "short unrelated question, ..." (round 17)
_SIZE_OF_QUESTION_RE = re.compile(
    r"(?:\b(?:a|one|short|quick|small|little|tiny|random|silly|dumb|totally|completely)\s*)+$", _I
)


@dataclass(frozen=True)
class NewTopic:
    """A reply that opens another topic: the words before its marker, and the marker."""

    before: str
    marker: str


def new_topic(text: str) -> NewTopic | None:
    """The new topic `text` opens, or None. Only a marker that names another topic
    counts ("unrelated", "different question", "while I remember"); "also", "next" and
    "another thing" can still be about the answer."""
    plain = unquoted(text)
    match = _MARKER_RE.search(plain)
    if match is None:
        return None
    name = next(g for g in ("m", "c", "d", "e") if match.group(g))
    before = _SIZE_OF_QUESTION_RE.sub("", plain[: match.start(name)])
    return NewTopic(before.strip(" ,;:-\u2014"), match.group(name))


# "to answer your question, it's windows 11": what follows answers the assistant's question
_ANSWER_BACK_RE = re.compile(
    r"^\W*(?:to answer your question|since you asked|you asked)\s*[:,\-\u2013\u2014]\s*", _I
)
# "write me a short note to my landlord, no more than 3 lines": a new piece of writing, whose
# own requests ("short", "no more than 3 lines") are about it, not about the answer
_ASKED_TO_MAKE = r"^\W*(?:(?:can|could|would|will) you (?:please )?|please )?"
_NEW_PIECE_RE = re.compile(
    _ASKED_TO_MAKE + r"(?:(?:write|draft|compose|make|create|prepare|put together) (?:me |us )?"
    r"(?:a|an|another|some) (?:[\w'-]+ ){0,3}?(?:note|e-?mail|letter|message|text|post|reply|"
    r"invitation|invite|poem|story|speech|toast|card|caption|bio|list|plan|schedule|checklist|"
    r"agenda|recipe|script|song|lullaby|limerick|haiku|riddle|rhyme|joke)s? (?:to|for|about|"
    r"saying|asking|telling|inviting|thanking|from|(?:that )?(?:i|we) (?:can|could))\b|"
    # "write a list of things to pack", "make a table comparing three airlines"
    r"(?:write|make|create|draw up|put together) (?:me |us )?(?:a|an) (?:[\w'-]+ ){0,2}?"
    r"(?:list|table|chart) (?:of (?:things|ideas|places|tips|ways|items|questions|reasons|stuff)|"
    r"comparing (?!it\b|this\b|that\b)))",
    _I,
)


def answer_back(text: str) -> str | None:
    """What follows "to answer your question," (the user answers the assistant), or None."""
    match = _ANSWER_BACK_RE.search(text)
    return text[match.end() :] if match is not None else None


def new_piece(text: str) -> bool:
    """Whether the reply asks for a new piece of writing addressed to or about something
    ("draft a formal email to the school ..."), not a change to the answer."""
    return _NEW_PIECE_RE.search(text) is not None


def unquoted(text: str) -> str:
    """`text` with each quoted span's words replaced by "that" (in its quotes), so that
    patterns do not read the user's material as the user's verdict and the sentence still
    reads ("delete everything after 'that'")."""
    return _QUOTED_RE.sub(lambda m: f"{m.group(1)}that{m.group(3)}", text)


def steps_away(text: str) -> bool:
    """Whether the reply only says the user steps away ("brb", "gotta run, back in 20")."""
    return _AWAY_RE.search(text) is not None
