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
  0 instead of +1/-1 when nothing but a transient or empty signal is there
     (`TOOL_NEUTRAL_PATTERNS`: a timeout, a rate limit, 503, a reset connection, still
     running, no matches): an error the answer did not cause, or nothing to judge.
  Comments (`# ...`, `// ...`) and a listing of source code (its first line starts with
  `def`, `class`, `import`, ...) are not error signals: they mention errors, not report them.
User replies (`role="user"`), in this order:
  a rating alone ("10/10", "2 stars", "4/5"): +1 from 7 of 10, -1 up to 4 of 10, else 0;
  -1 on a redo / correction / rephrase / complaint signal (`USER_NEGATIVE_PATTERNS`), a
     dispute or change request without a keyword (`corrections.CONTRADICTION_PATTERNS`),
     an "actually ..." correction, "X, not Y" where the answer (or question) said Y, or a
     request to change the answer however worded, or a complaint about its form
     (`change_requests`: "That is a lot of text. Keep it to about a dozen words, please.");
  +1 on acceptance, thanks or moving on (`USER_POSITIVE_PATTERNS`), or a short "and X?"
     continuation of the same task; but -1 when the word model (`reply_model`) is sure the
     part after a "but", or the rest of a thank-you that names the answer's form, asks for
     a change ("Appreciate it, but I only need a third of that."), and 0 when praise comes
     with a request about the answer the model is not sure of ("Lovely! Could you squeeze
     it into one sentence?"); an approval after "not" / "n't" ("not what I was after") is
     -1, a complaint after "not a" ("not a wall of text") is none;
  -1 on a value that replaces the answer's (a time, day, month, date, number, a bare name,
     a near-miss spelling: `reply_values`), or the previous question asked again;
  -1 when the word model is sure the reply asks for a change and it is neither a
     question nor a task about something else (`reply_model.read`);
   0 otherwise. Negative signals win over politeness: "thanks, but that's wrong" is -1; the
  contextual signals (replacement, repeated question) only count without a positive one.
  A request to keep the answer as it is ("keep doing that", "not too long, not too short")
  is read out before the negative signals are looked for; it approves. A thank-you on the
  way to an unrelated topic ("thanks. unrelated, but ...") is 0.
Hints (for OPD): a -1 user reply yields the user's request sentences (the complaint before
them dropped), or else its own corrective words; a tool error
yields "The previous tool call failed with: <first error line>. Fix the call."

Known blind spots, measured on assets/judge_calibration.jsonl: sarcasm ("wow so fast
now"), complaints in the user's own terms ("cant even see it on white"), missing items
named without a keyword ("wheres the revenue"), thanks in other languages beyond a few,
and tool errors worded without an error word.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from clawrl_app.engine.chat.messages import message_text
from clawrl_app.engine.judging import reply_model
from clawrl_app.engine.judging.change_requests import (
    ENDORSEMENT_RE,
    bare_form,
    change_request,
    clauses,
    corrective_hint,
    sentences,
)
from clawrl_app.engine.judging.corrections import (
    actually_correction,
    continuation,
    contradiction,
    repeated_question,
    x_not_y,
)
from clawrl_app.engine.judging.new_topic import (
    NewTopic,
    answer_back,
    new_piece,
    new_topic,
    steps_away,
    unquoted,
)
from clawrl_app.engine.judging.prompts import JudgeInput
from clawrl_app.engine.judging.reply_signals import USER_NEGATIVE_PATTERNS, USER_POSITIVE_PATTERNS
from clawrl_app.engine.judging.reply_values import bare_name, near_miss, replacement_value
from clawrl_app.engine.judging.spelling import respell

HEURISTIC_RULES_VERSION = "heuristic-v14"
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
    ("could not", re.compile(r"\b(?:could not|couldn'?t|cannot|unable to) \w+", _I)),
    (
        "unknown command",
        re.compile(r"\bis not an? (?:\w+ )?command\b|\bunknown (?:command|option|flag)\b", _I),
    ),
]
"""Error signals in a tool result, each with the name given as the verdict's reason."""

TOOL_NEUTRAL_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("timed out", re.compile(r"\btimed out\b|\btimeout\b", _I)),
    ("rate limit", re.compile(r"\brate.?limit", _I)),
    ("retry later", re.compile(r"\bretry (?:in|later|after)\b|\btry again later\b", _I)),
    ("unavailable", re.compile(r"\b50[234]\b|\bservice unavailable\b|\bbad gateway\b", _I)),
    ("connection", re.compile(r"\bconnection (?:reset|refused|closed|aborted)\b", _I)),
    ("still running", re.compile(r"\bstill running\b|\bin progress\b", _I)),
    (
        "no matches",
        re.compile(r"^\s*(?:\[\s*\]|\{\s*\}|no (?:files|results|matches|items)\b.*)\s*$", _I),
    ),
]
"""Transient or empty results: 0 when no error signal above is present."""

_BENIGN_ZERO_RE = re.compile(r"\b(?:0|no|zero) (?:errors?|failures?|failed)\b", _I)
_COMMENT_RE = re.compile(r"(?:^|\s)(?:#|//).*$", _M)
_SOURCE_LISTING_RE = re.compile(
    r"^\s*(?:(?:async )?def |class |import |from \S+ import |function |#include|package |"
    r"public |const |let |var |@\w+)"
)
_TRACEBACK_RE = TOOL_ERROR_PATTERNS[0][1]


_SCORE = r"^\W*(\d{1,2}(?:\.\d)?)\s*"
_SCALE = r"(?:/\s*(10|5)\b|out of (10|5)\b)(?:\s*stars?)?"
_RATING_RE = re.compile(rf"{_SCORE}(?:{_SCALE}|stars?)\W*$", _I)
_RATING_FIRST_RE = re.compile(rf"{_SCORE}{_SCALE}\W+(\w.*)$", _I)  # with a remark after it
# "10/10 would ask again", "what's the capital again": "again" that asks for no redo
_BENIGN_AGAIN_RE = re.compile(
    r"\b(?:would|will|'ll|'d|gonna)\s+(?:\w+\s+)?(?:ask|use|come|do|read|visit|recommend|buy|"
    r"order|go)\s+(?:\w+\s+)?again\b|"
    r"\b(?:need|use|want|see|read|check|open)\s+(?:it|this|that|them)\s+again\b|"
    r"\b(?:i|we|he|she|they) can (?:\w+ ){0,4}again\b|"
    r"^\W*(?:what|whats|what's|who|whos|who's|where|when|how|which)\b[^.!?]*\bagain\W*$",
    _I,
)
# "yes do that", "yeah go ahead and add the other three": the user answers the answer's
# offer; with no contrast after it, an approval of the answer and the next step
_GO_AHEAD_RE = re.compile(
    r"^\W*(?:yes|yeah|yep|yup|sure|ok|okay)\W+(?:please\W+)?(?:do (?:that|it|this)|go ahead)\b", _I
)
_BUT_RE = re.compile(r"\b(?:but|though|however|although|except)\b", _I)
_CONTRAST_RE = re.compile(r"\b(?:but|though|however|although|that said)\b\W*(\w.{7,})$", _I)
_TOO_RE = re.compile(r"\btoo\b", _I)
_WON_OVER_RE = re.compile(
    r"\b(?:exactly|just|precisely) what i (?:needed|wanted|was after|was looking for)\b|"
    r"\bcovered (?:literally |pretty much |basically |just about )?everything\b|"
    r"\bworth (?:it|every word|the read|reading)\b|\bspot on\b",
    _I,
)
_ASK_RE = re.compile(
    r"\b(?:can|could|would|will) (?:you|u)\b|\bwould you mind\b|\bany chance\b|"
    r"\b(?:can|could|may) i (?:get|have)\b|"
    r"(?<!what )\bi (?:really |just |only )?(?:need|want|wanted|needed|expected|hoped)\b|\bi'?d (?:like|prefer|rather)\b|"
    r"\bplease\b|\bpls\b|\bthough\W*$",
    _I,
)
_POINTS_AT_ANSWER_RE = re.compile(
    r"\b(?:it|this|that|them|these|those)\b|\b(?:each|every|the) (?:fact|bit|part|point)s?\b|"
    r"\b(?:much |a lot |way )?(?:more|less|shorter|longer)\W*$",
    _I,
)
# "can you suggest a shorter title for my blog post?": the user's own thing, not the answer
_OWN_THING_RE = re.compile(r"\b(?:for|of|in|on|to) (?:my|our) (?!answer|question)\w+", _I)
# "How long should a brochure paragraph be, generally?": about such things, not this answer
_GENERALLY = r"generally|in general|typically|usually|normally|as a rule"
_GENERAL_RE = re.compile(
    rf"\b(?:{_GENERALLY}|on average)\b[^.!]*\?|\?[^?]*\b(?:{_GENERALLY})\b", _I
)
_MOVES_ON_RE = re.compile(
    r"\b(?:next|moving on|now|also|another|as well)\b|\btoo\W*$|\btoo\W*[:;,]", _I
)
_FORM_WORD_RE = re.compile(
    r"\b(?:version|length|shorter|longer|half|bullets?|table|format|tone|words|sentences?)\b", _I
)
_NEGATION_BEFORE_RE = re.compile(r"(?:\bnot|n't|\bnever|\bhardly)\s+(?:\w+\s+)?$", _I)
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


def classify_next_state(
    role: str, text: str, *, answer: str = "", question: str = ""
) -> HeuristicVerdict:
    """Score a turn from its next state (see the module docstring for the rules).

    `answer` (the answer's visible text) and `question` (the last user message before it)
    let a user reply be read against them: a replaced value, "X, not Y", a repeated
    question. Without them only the reply's own words count.
    """
    if role == "tool":
        return _classify_tool(text)
    if role == "user":
        return _classify_user(text, answer, question)
    return HeuristicVerdict(0, f"unknown next-state role {role!r}")


def classify_turn(inp: JudgeInput) -> HeuristicVerdict:
    """Score a judged turn: its next state read against the answer and the question."""
    return classify_next_state(
        inp.next_state_role,
        inp.next_state_text,
        answer=inp.answer_text,
        question=last_user_message(inp.context),
    )


def last_user_message(context: list[dict[str, object]]) -> str:
    """The text of the last user message in `context` ("" when there is none)."""
    for message in reversed(context):
        if message.get("role") == "user":
            return message_text(message.get("content"))
    return ""


def _classify_tool(text: str) -> HeuristicVerdict:
    if not text.strip():
        return HeuristicVerdict(0, "empty tool result")
    cleaned = _COMMENT_RE.sub("", _BENIGN_ZERO_RE.sub("", text))
    if _SOURCE_LISTING_RE.match(cleaned) and not _TRACEBACK_RE.search(cleaned):
        return HeuristicVerdict(1, "tool returned source code")
    signal = first_match(cleaned, TOOL_ERROR_PATTERNS)
    if signal is None:
        neutral = first_match(cleaned, TOOL_NEUTRAL_PATTERNS)
        if neutral is not None:
            return HeuristicVerdict(0, f"tool result not caused by the answer: {neutral}")
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


def _classify_user(said: str, answer: str, question: str) -> HeuristicVerdict:
    text = respell(said)  # the rules read chat spellings as words; the hint keeps `said`
    topic = new_topic(text)
    if topic is not None:
        return _before_new_topic(topic, answer, question)
    rest = answer_back(text)
    if rest is not None:  # values there answer the assistant; a plain complaint still counts
        found = _strong_correction(unquoted(rest), answer, question)
        return _negative(said, found) if found else HeuristicVerdict(0, "user answers back")
    if new_piece(unquoted(text)):
        return HeuristicVerdict(0, "user asks for a new piece of writing")
    return _classify_words(said, unquoted(text), answer, question)


def _before_new_topic(topic: NewTopic, answer: str, question: str) -> HeuristicVerdict:
    """A reply that opens another topic judges the answer only by what comes before its
    marker: a correction there stands, an approval stands unless it is only politeness
    ("thanks. unrelated, but ..."), and nothing there says nothing."""
    if not topic.before:
        return HeuristicVerdict(0, f"user opens another topic ({topic.marker})")
    verdict = _classify_user(topic.before, answer, question)
    heard = {name for name, pattern in USER_POSITIVE_PATTERNS if pattern.search(topic.before)}
    if verdict.score < 0 or (verdict.score > 0 and heard - {"thanks", "emoji"}):
        return verdict
    return HeuristicVerdict(0, f"user moves to another topic ({topic.marker})")


def _classify_words(said: str, text: str, answer: str, question: str) -> HeuristicVerdict:
    """`_classify_user` on a reply that opens no new topic; `text` is `said` respelled and
    its quotes blanked (`new_topic.unquoted`)."""
    if _GO_AHEAD_RE.search(text) and not _BUT_RE.search(text):
        return HeuristicVerdict(1, "user says go ahead")
    rating = _rating(text)
    if rating is None:
        rating = _rating_first(text, answer, question)
    if rating is not None:
        kind = {1: "well", 0: "middling", -1: "badly"}[rating]
        return HeuristicVerdict(rating, f"user rates the answer {kind}")
    won_over = _won_over(text, answer, question)
    if won_over is not None:
        return HeuristicVerdict(1, f"user acceptance signal: {won_over}, after a but")
    negative = _strong_correction(text, answer, question)
    if negative is not None:
        return _negative(said, negative)
    positive, negated = _approval(text)
    if positive is not None:
        if reply_model.read(_besides_approval(text), answer) == -1:
            return _negative(said, f"{positive}, and a request (word model)")
        asking = _asking(text)
        if (
            asking
            and _POINTS_AT_ANSWER_RE.search(asking)
            and not _MOVES_ON_RE.search(text)
            and not ENDORSEMENT_RE.search(text)
        ):
            # "Lovely! Could you squeeze it into one sentence?": praise, then a request the
            # model is not sure of; not an approval either way
            return HeuristicVerdict(0, f"{positive}, and a request about the answer")
        return HeuristicVerdict(1, f"user acceptance signal: {positive}")
    if negated is not None:
        return _negative(said, f"negated approval: {negated}")
    if continuation(text):
        return HeuristicVerdict(1, "user continues the same task")
    if steps_away(text):  # "gotta run, back in 20": no value in place of the answer's
        return HeuristicVerdict(0, "user steps away")
    replaced = replacement_value(text, answer) or bare_name(text, answer) or near_miss(text, answer)
    if replaced is not None:
        return _negative(said, f"replaced {replaced}")
    if repeated_question(text, question):
        return _negative(said, "repeated question")
    if bare_form(text):
        return _negative(said, "a form alone")
    first = sentences(text)[0] if text.strip() else ""
    if _OWN_THING_RE.search(first) and not _POINTS_AT_ANSWER_RE.search(first):
        return HeuristicVerdict(0, "user asks about a thing of their own")
    if _GENERAL_RE.search(first) and not _POINTS_AT_ANSWER_RE.search(first):
        return HeuristicVerdict(0, "user asks a general question")
    if reply_model.read(text, answer) == -1:
        return _negative(said, "a request (word model)")
    return HeuristicVerdict(0, "no clear signal in the user reply")


def _won_over(text: str, answer: str, question: str) -> str | None:
    """The endorsement after a "but" that outweighs a remark on the answer's size before
    it ("that's a lot of detail but honestly exactly what I needed", round 17), or None.
    Not after "too ..." (a complaint stands) nor when the part after the "but" asks for
    anything."""
    turn = _CONTRAST_RE.search(text)
    if turn is None or _TOO_RE.search(text[: turn.start()]):
        return None
    after = turn.group(1)
    found = _WON_OVER_RE.search(after)
    if found is None or _strong_correction(after, answer, question) or _asking(after):
        return None
    return found.group(0).lower()


def _besides_approval(text: str) -> str:
    """What the reply asks besides its approval, for the word model to read: the part
    after a "but" ("Appreciate it, but I really only need about a third of that."), or,
    when the approval is only politeness (thanks, an emoji), the rest of a reply that names
    the answer's form ("paragraphs 😩 👉 bullets 🙏"); "" when there is none (the model
    then stays silent)."""
    after = _CONTRAST_RE.search(text)
    if after is not None:  # "I was nervous, but ... it went really well": praise again
        return (
            "" if _approval(after.group(1))[0] not in (None, "thanks", "emoji") else after.group(1)
        )
    heard = {name for name, pattern in USER_POSITIVE_PATTERNS if pattern.search(text)}
    if heard <= {"thanks", "emoji"} and _FORM_WORD_RE.search(text):
        return _without_approval(text)
    return ""


def _asking(text: str) -> str:
    """The clauses of `text` that ask for something ("could you ...", "I need ..."),
    its approval words taken out; "" when none does."""
    return " ".join(
        part
        for sentence in sentences(text)
        for part in (_without_approval(c) for c in clauses(sentence))
        if _ASK_RE.search(part)
    )


def _without_approval(text: str) -> str:
    for _, pattern in USER_POSITIVE_PATTERNS:
        text = pattern.sub(" ", text)
    return " ".join(text.split())


def _rating(text: str) -> int | None:
    """The score of a reply that only rates the answer ("10/10", "2 stars", "8 out of 10",
    "4/5 stars"): at least 7 of 10 (4 of 5) is +1, at most 4 of 10 (2 of 5) is -1, between
    them 0; None when the reply is not a rating."""
    match = _RATING_RE.match(text)
    if match is None:
        return None
    value, scale = float(match.group(1)), float(match.group(2) or match.group(3) or 5)
    if value > scale:
        return None
    share = value / scale
    return 1 if share >= 0.7 else -1 if share <= 0.4 else 0


def _rating_first(text: str, answer: str, question: str) -> int | None:
    """+1 for a good rating followed by a remark with no contrast and no correction in it
    ("10/10 would ask again"); None otherwise (a low rating with a remark is read as words:
    "2/10 too long" is a correction with its hint)."""
    match = _RATING_FIRST_RE.match(text)
    if match is None or _CONTRAST_RE.search(text):
        return None
    rest = match.group(4)
    if _rating(text[: match.start(4)].strip()) != 1 or _strong_correction(rest, answer, question):
        return None
    return 1


def _approval(text: str) -> tuple[str | None, str | None]:
    """The first approval signal that no "not" / "n't" / "never" stands before, and the
    first one that does ("not what I was after": a negated approval)."""
    negated = None
    for name, pattern in USER_POSITIVE_PATTERNS:
        for match in pattern.finditer(text):
            if _NEGATION_BEFORE_RE.search(text[max(0, match.start() - 24) : match.start()]):
                negated = negated or name
                continue
            return name, negated
    return None, negated


def _strong_correction(text: str, answer: str, question: str) -> str | None:
    """A correction signal that wins over politeness, or None. The parts that ask to keep
    the answer as it is ("not too long, not too short", "keep doing that") are read out
    first: they approve, whatever their words."""
    text = _BENIGN_AGAIN_RE.sub(" ", ENDORSEMENT_RE.sub(" ", text))
    found = first_match(text, USER_NEGATIVE_PATTERNS) or contradiction(text)
    if found is None and actually_correction(text):
        found = "actually"
    return found or x_not_y(text, answer, question) or change_request(text)


def _negative(text: str, signal: str) -> HeuristicVerdict:
    return HeuristicVerdict(-1, f"user correction signal: {signal}", corrective_hint(text))
