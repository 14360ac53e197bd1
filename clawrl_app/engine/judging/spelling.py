"""Chat spellings of the words the heuristic judge listens for, read as those words (pure).

People type replies fast: "thnaks this is awsome", "perfct, exacly what i wanted", "can you
add somthing about the lights", "gr8". The judge's rules match words, so each such reply
was heard as nothing (round 8 of `assets/judge_phrasings.jsonl`, 2026-12-02: 5 of its 20
approvals). `respell` rewrites, before the rules read a reply, (1) a few chat forms
("gr8", "thx") and (2) any word one edit away (a letter left out, added, changed, or two
swapped) from one of `SIGNAL_WORDS`, words of six letters or more, so that a real word
rarely lies one edit away. The real words that do (`REAL_WORDS`: "thinks" is one edit from
"thanks") are left as they are. The hint the judge passes on keeps the user's own text.
"""

from __future__ import annotations

import re
from functools import lru_cache

from clawrl_app.engine.judging.reply_values import edit_distance

SIGNAL_WORDS = frozenset(
    [
        "thanks",
        "awesome",
        "perfect",
        "perfectly",
        "exactly",
        "helpful",
        "excellent",
        "something",
        "shorter",
        "longer",
        "brilliant",
        "amazing",
        "fantastic",
        "wonderful",
        "appreciate",
        "appreciated",
        "bullet",
        "bullets",
        "paragraph",
        "paragraphs",
        "sentence",
        "sentences",
        "summary",
        "shorten",
        "simpler",
        "instead",
        "formal",
        "casual",
        "exclamation",
        "emojis",
        "explain",
        "explanation",
    ]
)
"""The words to hear however they are spelled (six letters or more)."""
REAL_WORDS = frozenset(
    [
        "thank",
        "thinks",
        "thanked",
        "thankful",
        "shanks",
        "thanes",
        "prefect",
        "pleased",
        "longed",
        "lounger",
        "billet",
        "bullied",
        "sentenced",
        "summery",
        "shortens",
        "shorted",
        "sampler",
        "simple",
        "normal",
        "formals",
        "formally",
        "causal",
        "casuals",
        "casually",
        "amazingly",
        "explains",
        "explained",
    ]
)
"""Words one edit from a signal word that are words of their own: never rewritten."""
CHAT_FORMS = {
    "gr8": "great",
    "thx": "thanks",
    "thnx": "thanks",
    "thanx": "thanks",
    "thks": "thanks",
    "tnx": "thanks",
    "ty": "thanks",
    "tysm": "thanks",
    "pls": "please",
    "plz": "please",
    "plss": "please",
    "u": "you",
    "ur": "your",
    "2day": "today",
    "b4": "before",
    "nite": "night",
    "shrter": "shorter",
}
"""Chat forms of common words, read as the words."""
_WORD_RE = re.compile(r"[A-Za-z0-9']+")
_MIN_LEN = 5  # shorter words are too often a real word one edit from another


def one_edit(a: str, b: str) -> bool:
    """Whether `a` becomes `b` by one letter left out, added or changed
    (`reply_values.edit_distance` 1), or by two neighbouring letters swapped (a != b)."""
    if a == b:
        return False
    if edit_distance(a, b, limit=1) == 1:
        return True
    diff = [i for i in range(len(a)) if len(a) == len(b) and a[i] != b[i]]
    return (
        len(diff) == 2
        and diff[1] == diff[0] + 1
        and a[diff[0]] == b[diff[1]]
        and a[diff[1]] == b[diff[0]]
    )


@lru_cache(maxsize=4096)
def signal_word(word: str) -> str | None:
    """The signal word `word` is a chat form or a one-edit misspelling of, or None."""
    low = word.lower()
    if low in CHAT_FORMS:
        return CHAT_FORMS[low]
    if len(low) < _MIN_LEN or low in SIGNAL_WORDS or low in REAL_WORDS or not low.isalpha():
        return None
    near = [w for w in SIGNAL_WORDS if one_edit(low, w)]
    return near[0] if len(near) == 1 else None


def respell(text: str) -> str:
    """`text` with each chat form and near-miss spelling of a signal word replaced by it."""

    def sub(m: re.Match[str]) -> str:
        return signal_word(m.group(0)) or m.group(0)

    return _WORD_RE.sub(sub, text)
