"""Corrections without a keyword: pure functions over a user reply, the answer and the question.

The heuristic judge's keyword lists miss how people correct in chat: "Wednesday, not
Tuesday.", "its 6:30 not 6", "hmm pretty sure thats canberra", "168", or simply asking the
same question again. Each function here recognises one such signal from the text the judge
already has (the reply, the answer's visible text, the last user message before the answer)
and returns the name of the signal (used as the verdict's reason) or None.

Apostrophes are optional everywhere ("thats", "its", "doesnt"): casual replies drop them.
"""

from __future__ import annotations

import re

_I = re.IGNORECASE


def _words(text: str) -> frozenset[str]:
    """The whitespace-separated words of `text`, as a set (for word lists written as prose)."""
    return frozenset(text.split())


_POSITIVE_WORDS = (
    r"perfect|great|good|fine|right|correct|exactly|nice|awesome|helpful|spot on|"
    r"just right|funny|cool|better|brilliant|excellent|lovely|clear|useful|clever|smart|"
    r"amazing|fantastic|beautiful|fun|what i (?:wanted|needed)"
)
_NO_PRAISE_AFTER = rf"(?!.*\b(?:{_POSITIVE_WORDS})\b)"
_TONE_WORDS = (
    r"long|short|verbose|wordy|formal|informal|casual|stiff|cold|harsh|vague|generic|"
    r"complicated|complex|technical|slow|robotic|dry|boring|bland|cheesy|salesy|pushy"
)

CONTRADICTION_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    (
        "that's not what",
        re.compile(
            r"\b(?:that'?s|that is|it'?s|it is|this is|this isn'?t|that isn'?t) not what\b", _I
        ),
    ),
    (
        "not what it says",
        re.compile(r"\bnot what (?:it|the \w+|he|she|they|this|that) (?:says?|said)\b", _I),
    ),
    (
        "it isn't",
        re.compile(
            r"^\W*(?:no\W+)?(?:it|that|this|he|she|they)\s+(?:isn'?t|is not|wasn'?t|was not|"
            r"aren'?t|are not|doesn'?t|does not)\s*(?:[.!,]|$|right\b|true\b|correct\b|so\b)",
            _I,
        ),
    ),
    (
        "not right",
        re.compile(
            r"\bnot (?:right|true|correct|accurate|the case|quite)\b(?!\s+(?:now|away|here|there))",
            _I,
        ),
    ),
    (
        "that's not",
        re.compile(
            r"^\W*(?:that'?s|that is|it'?s|it is|this is) not\b(?!\s+(?:bad|a problem|an issue|"
            r"a big deal|too bad|so bad|necessary|urgent|important|my|the point|what))",
            _I,
        ),
    ),
    (
        "pretty sure",
        # not a cause the user guesses at: "pretty sure this is because someone force-pushed"
        re.compile(
            rf"\b(?:pretty sure|(?:are )?you sure)\b(?!\s+(?:this|it|that)(?:'s| is| was) "
            rf"(?:because|due to|from)\b){_NO_PRAISE_AFTER}",
            _I,
        ),
    ),
    (
        "I thought",
        re.compile(
            rf"\bi thought (?:it|that|you|there|he|she|they)(?:'?s| was| were| is| are| said)\b"
            rf"{_NO_PRAISE_AFTER}",
            _I,
        ),
    ),
    (
        "wasn't it",
        re.compile(
            rf"\b(?:wasn'?t|isn'?t|aren'?t|weren'?t|shouldn'?t|doesn'?t|didn'?t) (?:it|that|this|"
            rf"there|they|those|these)\b"
            rf"{_NO_PRAISE_AFTER}",
            _I,
        ),
    ),
    (
        "where did you get",
        # also "where are you getting this from?", "what's your source?": asks for sources
        re.compile(
            r"\bwhere did you get\b|\bwhere (?:are|did|do) (?:you|u) (?:get|getting|find|"
            r"finding) (?:this|that|it|these|those|all this|all that)\b|"
            r"\bwhat'?s (?:your|the) source\b|\bsources?\s*\?+\s*$",
            _I,
        ),
    ),
    ("out of date", re.compile(r"\b(?:out of date|out-of-date|outdated)\b", _I)),
    (
        "nothing changed",
        re.compile(r"\bnothing (?:changed|happened|works)\b|\bstill (?:the same|ends?|not)\b", _I),
    ),
    ("worse", re.compile(r"\b(?:worse|slower)\b|\btwice as (?:slow|bad|long)\b", _I)),
    ("useless", re.compile(r"\b(?:useless|unhelpful|not helpful|pointless)\b|^\W*meh\b", _I)),
    (
        "do it properly",
        re.compile(
            r"\b(?:do|explain|answer|write|read|fix) (?:it|this|that|the \w+ )?\s*"
            r"(?:properly|correctly)\b",
            _I,
        ),
    ),
    ("I meant", re.compile(r"\bi meant\b|^\W*(?:sorry\W+)?meant\b|^\W*i mean\b(?!\s*,)", _I)),
    (
        "make it ...",
        re.compile(
            r"\bmake (?:it|this|that|them|those|the [\w ]{1,30}?) (?:\w+er|more|less|a bit|"
            r"a little|bit|\d)",
            _I,
        ),
    ),
    (
        "could you change",
        re.compile(
            r"\b(?:can|could) (?:you|u) (?:make|change|rewrite|shorten|simplify|rephrase|reword)\b",
            _I,
        ),
    ),
    ("rather than", re.compile(r"\brather than\b", _I)),
    (
        "not me",
        # "I'm a new grad. This sounds like someone else entirely.": written for another person
        re.compile(
            r"\b(?:sounds|reads|looks) like (?:someone|somebody) else\b|"
            r"\b(?:that'?s|this is|that is|it'?s) not (?:me|who i am)\W*$",
            _I,
        ),
    ),
    (
        "too formal",
        # not "just the right length, not too long" (round 17)
        re.compile(
            rf"(?<!\bnot )\b(?:too|a bit|bit|kinda|kind of|a little) (?:{_TONE_WORDS})\b", _I
        ),
    ),
    (
        "you missed",
        re.compile(
            r"\b(?:you|u) (?:kind of |kinda |sort of |completely |totally |just )?(?:missed|left out|"
            r"skipped|ignored)\b",
            _I,
        ),
    ),
    (
        "doesn't run",
        re.compile(
            r"\b(?:doesn'?t|does not|didn'?t|did not|won'?t|will not) (?:run|compile|build|"
            r"load|help|open|start|change anything|do anything)\b",
            _I,
        ),
    ),
    ("..., no?", re.compile(r"\bno\s*\?+\s*$", _I)),
    (
        "fits in a ...",
        # "whatever you give me has to fit in a subject line", "any chance that fits on a
        # post-it?": a size for the answer, named by the small thing it must fit
        re.compile(
            r"\bfit(?:s|ting)? (?:in|on|into|onto) (?:a|an|one|the|my) (?:[\w-]+ ){0,3}?"
            r"(?:subject line|tweet|text message|text|sms|post-?it|sticky(?: note)?|slip|"
            r"(?:index |business |flash ?)?card|postcard|napkin|line|slide|notification|"
            r"banner|fortune cookie|phone screen|lock ?screen|screen)s?\b",
            _I,
        ),
    ),
]
"""Disputes, contradictions and change requests that carry no classic keyword."""

_ACTUALLY_OPENING_RE = re.compile(
    r"^\W*(?:(?:hmm+|um+|oh|well|no|sorry|wait|ok|okay)\W+)*actually\b"
    r"(?!\W+(?:(?:that'?s|that is|it'?s|it is|this is|that|this|it|looks|sounds)\s+)?"
    rf"(?:(?:really|very|pretty|quite)\s+)?(?:{_POSITIVE_WORDS}|works|love)\b)",
    _I,
)
_ACTUALLY_CLOSING_RE = re.compile(r"\bactually\W*$", _I)
_ACTUALLY_RE = re.compile(r"\bactually\b", _I)


def contradiction(reply: str) -> str | None:
    """The name of the first dispute / contradiction / change-request pattern in `reply`."""
    for name, pattern in CONTRADICTION_PATTERNS:
        if pattern.search(reply):
            return name
    return None


def actually_correction(reply: str) -> bool:
    """An "actually ..." opening or closing, unless "actually" introduces praise.

    "Actually, make it 6:30." and "the 15th actually" are corrections; "Actually, that's
    perfect." is not.
    """
    # nothing but "actually" (what is left after praise is read out: "not bad at all, actually")
    if not re.search(r"\w", _ACTUALLY_RE.sub(" ", reply)):
        return False
    return bool(_ACTUALLY_OPENING_RE.search(reply) or _ACTUALLY_CLOSING_RE.search(reply))


_X_NOT_Y_RE = re.compile(r"([\w:'.-]+)\s*,?\s+not\s+(?:the\s+)?([\w:'.-]+?)[\s.!?]*$", _I)


def x_not_y(reply: str, answer: str, question: str = "") -> str | None:
    """ "X, not Y" where Y is what the answer said (or what the user asked about).

    Returns "X, not Y" for "Wednesday, not Tuesday." after an answer that said Tuesday, and
    for "That's evening, not morning." after a question about the morning. "not bad" is not
    such a reply (nothing precedes "not"), nor is "X not Y" whose Y appears nowhere.
    """
    m = _X_NOT_Y_RE.search(reply.strip())
    if m is None:
        return None
    x, y = m.group(1).strip(".'"), m.group(2).strip(".'")
    if not y or x.lower() == y.lower():
        return None
    y_said = _contains_word(answer, y) or _contains_word(question, y)
    return f"{x}, not {y}" if y_said else None


def _contains_word(text: str, word: str) -> bool:
    return bool(re.search(rf"(?<![\w:]){re.escape(word)}(?![\w])", text, _I))


# Words that carry no topic: dropped before comparing a reply with the question.
_STOPWORDS = _words(
    """a an the and or but so to of for in on at by with from as is are was were be been am
    do does did done can could would will should shall may might must i me my mine you u
    your we us our it its it's this that these those there here what whats what's how when
    where which who why whose whom tho though then just ok okay k hmm um well please pls
    plz give tell show get got let lets let's again still any some one's im i'm i'd id
    really actually yeah ya yes no not"""
)
_WORD_RE = re.compile(r"[a-z0-9][a-z0-9'_:.+-]*", _I)
_QUESTION_RE = re.compile(
    r"\?\s*$|^\W*(?:(?:ok|okay|but|so|hmm+|um+|and|no|wait)\W+)*"
    r"(?:what|whats|how|when|where|which|who|why|can|could|would|is|are|does|do)\b",
    _I,
)
_MIN_CONTAINMENT = 0.75


def content_words(text: str) -> set[str]:
    """The topic words of `text`: lower-cased, stop words dropped, plurals folded."""
    words = (w.strip(".'-:+").lower() for w in _WORD_RE.findall(text))
    return {fold(w) for w in words if w and w not in _STOPWORDS}


def fold(word: str) -> str:
    """`word` without a plural or verb ending ("points" -> "point", "worked" -> "work")."""
    for suffix in ("ing", "es", "ed", "s"):
        if len(word) > len(suffix) + 3 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def repeated_question(reply: str, question: str) -> bool:
    """The reply asks the previous user message again: the answer did not satisfy.

    Nearly all of the reply's topic words (three quarters) must come from the question,
    and the reply must be a question itself or share at least two topic words with it.
    "how do i center a div" twice, "ok but how do i clear it" after "how do i clear the
    npm cache", "one liner pls" after "write a python one liner to sum a list".
    """
    mine, theirs = content_words(reply), content_words(question)
    if not mine or not theirs:
        return False
    shared = mine & theirs
    if len(shared) / len(mine) < _MIN_CONTAINMENT:
        return False
    return bool(_QUESTION_RE.search(reply.strip())) or len(shared) >= 2


_CONTINUATION_RE = re.compile(
    r"^\W*(?:(?:ok|okay|k|cool|nice|great|alright)\W+)?and\b(?=\W+\S)", _I
)
_MAX_CONTINUATION_WORDS = 8


def continuation(reply: str) -> bool:
    """A short "and X?" reply: the same task for the next item ("and 2014?", "ok and 30%?")."""
    return len(reply.split()) <= _MAX_CONTINUATION_WORDS and bool(_CONTINUATION_RE.search(reply))
