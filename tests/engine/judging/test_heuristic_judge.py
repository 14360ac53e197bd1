"""The heuristic next-state judge, and its agreement with the hand-labelled calibration set."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from clawrl_app.engine.judging.heuristic_judge import (
    HEURISTIC_RULES_VERSION,
    HeuristicVerdict,
    classify_next_state,
    classify_turn,
    corrective_hint,
    error_line,
    last_user_message,
)
from clawrl_app.judge_eval import item_input

CALIBRATION = Path(__file__).resolve().parents[3] / "assets" / "judge_calibration.jsonl"
# Measured with heuristic-v6 on the shipped set (docs/judge-eval.md): 0.932 whole set (v3-v5
# 0.935); 0 sign errors.
AGREEMENT_FLOOR = 0.932 - 0.01


# --- tool results ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text",
    [
        'Traceback (most recent call last):\n  File "x.py", line 1\nValueError: bad',
        "java.lang.NullPointerException at Main.java:3",
        "KeyError: 'name'",
        "error: pathspec 'mian' did not match any file(s) known to git",
        "npm ERR! ERROR in ./src/index.js",
        "fatal: not a git repository",
        "Build failed after 3 steps",
        "bash: pyhton: command not found",
        "cat: notes.txt: No such file or directory",
        "mkdir: cannot create directory '/opt/x': Permission denied",
        "Process finished with exit code 2",
        "command exited with status 127",
        '{"ok": false, "error": "rate limited"}',
        '{"error": {"code": 404}}',
        "Invalid argument: --frobnicate",
        "git: 'stauts' is not a git command. See 'git --help'.",
        "curl: (6) Could not resolve host: api.exmaple.com",
    ],
)
def test_tool_error_signals(text: str) -> None:
    verdict = classify_next_state("tool", text)
    assert verdict.score == -1
    assert verdict.reason.startswith("tool error signal:")
    assert verdict.hint is not None and verdict.hint.startswith(
        "The previous tool call failed with: "
    )
    assert verdict.hint.endswith(". Fix the call.")


@pytest.mark.parametrize(
    "text",
    [
        "8 passed in 0.42s",
        "Tests: 31 passed, 0 failed",
        "Done with no errors.",
        '{"status": "ok", "error": null}',
        '{"error": ""}',
        "exit code 0",
        "Wrote 512 bytes to README.md",
        "handle_error(exc) returned 500",  # lowercase identifiers are not signals
    ],
)
def test_tool_non_error_results(text: str) -> None:
    assert classify_next_state("tool", text) == HeuristicVerdict(
        1, "tool returned a non-error result", None
    )


@pytest.mark.parametrize(
    "text",
    [
        'def handle_error(exc: Exception) -> Response:\n    log.error("request failed")',
        "class ParseError(Exception):\n    pass",
        "src/app.py:12:    # TODO: handle invalid input gracefully",  # a comment, not a report
        "x = 1  // fallback when the lookup failed",
    ],
)
def test_source_code_and_comments_are_not_errors(text: str) -> None:
    assert classify_next_state("tool", text).score == 1


@pytest.mark.parametrize(
    "text",
    [
        "The request timed out.",
        "Rate limit reached. Retry in 20 seconds.",
        "503 Service Unavailable",
        "Connection reset by peer",
        "Command is still running in the background (pid 4121).",
        "No files matched the pattern.",
        "[]",
    ],
)
def test_transient_or_empty_tool_results_are_neutral(text: str) -> None:
    # REFERENCE §3: an error the answer did not cause (a network timeout) scores 0.
    verdict = classify_next_state("tool", text)
    assert verdict.score == 0 and verdict.hint is None
    assert verdict.reason.startswith("tool result not caused by the answer:")


def test_a_hard_error_wins_over_a_transient_signal() -> None:
    assert classify_next_state("tool", '{"ok": false, "error": "rate limited"}').score == -1


@pytest.mark.parametrize("text", ["", "   \n\t"])
def test_empty_tool_result_is_neutral(text: str) -> None:
    assert classify_next_state("tool", text).score == 0


def test_tool_error_hint_uses_the_last_line_of_a_traceback() -> None:
    text = (
        "Traceback (most recent call last):\n"
        '  File "train.py", line 3, in <module>\n'
        "    raise Exception('setup')\n"
        "ModuleNotFoundError: No module named 'tomli'\n"
    )
    verdict = classify_next_state("tool", text)
    assert verdict.hint == (
        "The previous tool call failed with: ModuleNotFoundError: No module named 'tomli'. "
        "Fix the call."
    )


def test_tool_error_hint_first_error_line_capped() -> None:
    text = "compiling...\nerror: " + "x" * 500 + "\nerror: second"
    line = error_line(text)
    assert line.startswith("error: x") and len(line) == 200


# --- user replies ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text",
    [
        "Thanks!",
        "thank you so much",
        "Great, sent it.",
        "Perfect.",
        "that works",
        "Exactly.",
        "awesome",
        "Got it. What about 3x - 5 = 10?",
        "nice one",
        "Next, the README please.",
        "Now let's deploy it.",
        "ok, now write the tests",
        "OK now do 18% of 350",
        "cool",
        "Looks good to me",
        "Thanks again, that fixed the build.",  # "again" after thanks is gratitude
        "No problem, moving on. Thanks!",
    ],
)
def test_user_positive(text: str) -> None:
    verdict = classify_next_state("user", text)
    assert verdict.score == 1, verdict
    assert verdict.hint is None


@pytest.mark.parametrize(
    "text",
    [
        "thx",
        "ty",
        "cheers",
        "works",
        "lol love it",
        "👍",
        "much better",
        "ty that did it",
        "ci is green now",
        "they pass",
        "sent",
        "Not bad at all, I'll use it.",
        "9:15 is fine",
        "daily crumb it is",
        "ahh yep that was it",
    ],
)
def test_casual_approvals(text: str) -> None:
    assert classify_next_state("user", text).score == 1


@pytest.mark.parametrize(
    "text",
    [
        "No, it's 391.",
        "nope",
        "That's wrong.",
        "Incorrect, the capital is Canberra.",
        "That's not what I asked for.",
        "Try again.",
        "Do it again but in French.",
        "Please redo the table.",
        "I said subfolders too.",
        "I asked for 3 bullets.",
        "Please don't mention salary.",
        "Stop adding emojis.",
        "Make it shorter.",
        "This is too long.",
        "Use a dict instead.",
        "It should be blue.",
        "You forgot the vegetarian option.",
        "It doesn't work on Windows.",
        "Still broken.",
        "I get an error when I run it.",
    ],
)
def test_user_negative(text: str) -> None:
    assert classify_next_state("user", text).score == -1


@pytest.mark.parametrize(
    "text",
    [
        "Thanks, but that's wrong.",
        "Great, but it should be shorter.",
        "Perfect... except it doesn't work.",
        "thank you, try again with the other file",
    ],
)
def test_negative_wins_over_politeness(text: str) -> None:
    assert classify_next_state("user", text).score == -1


@pytest.mark.parametrize(
    "text",
    [
        "ok",
        "What's the capital of Peru?",
        "How does that relate to the call stack?",
        "brb",
        "",
        "?",
        "hmm",
        "k",
    ],
)
def test_user_neutral(text: str) -> None:
    reason = "user steps away" if text == "brb" else "no clear signal in the user reply"
    assert classify_next_state("user", text) == HeuristicVerdict(0, reason, None)


def test_word_boundaries() -> None:
    # "nowhere" is not "no", "stopwatch" is not "stop", "greatest" is not "great".
    assert classify_next_state("user", "Nowhere near done, keep going").score == 0
    assert classify_next_state("user", "Add a stopwatch to the page").score == 0
    assert classify_next_state("user", "Who is the greatest chess player?").score == 0


def test_unknown_role_is_neutral() -> None:
    assert classify_next_state("system", "thanks").score == 0


@pytest.mark.parametrize(
    ("text", "hint"),
    [
        ("No, it's 391 not 381.", "It's 391 not 381."),
        ("No, it's 391.", None),  # "It's 391." is 9 characters
        ("Thanks, but it should be shorter.", "It should be shorter."),
        ("Wrong. Nope, use a dict instead.", "Use a dict instead."),
        ("No.", None),  # nothing left
        ("nope, redo", None),  # under 10 characters
        ("That's wrong. One. Two. Three. Four.", "One. Two. Three."),
        ("I said   subfolders\ntoo.", "I said subfolders too."),
    ],
)
def test_corrective_hint(text: str, hint: str | None) -> None:
    assert corrective_hint(text) == hint


def test_user_negative_verdict_carries_the_hint() -> None:
    verdict = classify_next_state("user", "thanks, but it should be shorter")
    assert verdict == HeuristicVerdict(
        -1, "user correction signal: shorter", "It should be shorter"
    )


def test_rules_version_is_recorded() -> None:
    assert HEURISTIC_RULES_VERSION.startswith("heuristic-v")


# --- calibration set ------------------------------------------------------------------------
def load_calibration() -> list[dict[str, Any]]:
    with CALIBRATION.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def test_calibration_set_is_well_formed_and_balanced() -> None:
    items = load_calibration()
    keys = {
        "id",
        "context",
        "answer",
        "answer_tool_calls",
        "next_state_role",
        "next_state",
        "label",
        "why",
        "style",
    }
    for item in items:
        assert set(item) == keys, item.get("id")
        assert item["label"] in (-1, 0, 1)
        assert item["style"] in ("casual", "written")
        assert item["next_state_role"] in ("user", "tool")
        assert item["context"] and all(
            m["role"] in ("system", "user", "assistant", "tool") for m in item["context"]
        )
        assert isinstance(item["answer"], str) and item["why"].strip()
        assert isinstance(item["answer_tool_calls"], list)
        if item["next_state_role"] == "tool":
            assert item["answer_tool_calls"], f"{item['id']}: a tool result needs a tool call"
    ids = [item["id"] for item in items]
    assert len(ids) == len(set(ids))
    labels = Counter(item["label"] for item in items)
    assert len(items) >= 60
    assert min(labels[-1], labels[0], labels[1]) >= 20, labels
    assert sum(item["next_state_role"] == "tool" for item in items) >= 12
    # The injection case is present: a next state carrying a raw boxed score.
    assert any("\\boxed{1}" in item["next_state"] for item in items)


def test_heuristic_agreement_on_calibration_set() -> None:
    items = load_calibration()
    confusion: Counter[tuple[int, int]] = Counter()
    for item in items:
        confusion[(item["label"], classify_turn(item_input(item)).score)] += 1
    agreement = sum(n for (label, score), n in confusion.items() if label == score) / len(items)
    rows = "\n".join(
        f"  label {label:+d}: " + " ".join(f"{confusion[(label, s)]:3d}" for s in (-1, 0, 1))
        for label in (-1, 0, 1)
    )
    print(f"\nheuristic agreement {agreement:.3f} on {len(items)} items")
    print(f"confusion (rows: label, columns: heuristic -1 0 +1):\n{rows}")
    assert agreement >= AGREEMENT_FLOOR
    assert confusion[(1, -1)] + confusion[(-1, 1)] == 0, "sign errors"


def test_calibration_set_size_and_casual_half() -> None:
    items = load_calibration()
    assert len(items) >= 158
    assert sum(item["style"] == "casual" for item in items) * 2 >= len(items)


# --- corrections without a keyword (issue #14) -----------------------------------------------
@pytest.mark.parametrize(
    ("question", "answer", "reply"),
    [
        ("When is the review?", "The review is on Tuesday at 10am.", "Wednesday, not Tuesday."),
        ("Book the call for 6:30.", "Booked the call for 6:00 PM.", "Actually, make it 6:30."),
        (
            "What's the capital of Australia?",
            "The capital of Australia is Sydney.",
            "Hmm, I'm pretty sure it's Canberra actually.",
        ),
        (
            "Summarize the article.",
            "The article says remote workers are less satisfied.",
            "That's not what the article says at all.",
        ),
    ],
)
def test_issue_examples_score_minus_one(question: str, answer: str, reply: str) -> None:
    verdict = classify_next_state("user", reply, answer=answer, question=question)
    assert verdict.score == -1, verdict
    assert verdict.reason.startswith("user correction signal:")


@pytest.mark.parametrize(
    ("answer", "reply"),
    [
        ("Your dentist appointment is on Tuesday at 3pm.", "no, wed"),
        ("Alarm set for 6:00 AM.", "its 6:30 not 6"),
        ("12 × 14 = 158.", "168"),
        ("The capital of Canada is Toronto.", "ottawa"),
        ("It's spelled 'accomodate'.", "accommodate, double m"),
        ("Added gym on Monday and Friday at 7:00 AM.", "make fri 8"),
        ("Added: dentist, the 14th at 10:00 AM.", "the 15th actually"),
    ],
)
def test_casual_corrections_read_against_the_answer(answer: str, reply: str) -> None:
    assert classify_next_state("user", reply, answer=answer).score == -1


@pytest.mark.parametrize(
    ("answer", "reply", "score"),
    [
        ("Standup scheduled daily at 9:15.", "9:15 is fine", 1),  # repeats the answer's value
        ("Your train leaves at 08:10.", "8:10 right, thx", 1),
        ("Lima.", "lima", 0),  # echoes the answer
        ("20% of 80 is 16.", "ok and 30%?", 1),  # the next item, not a replacement
        ("France won the 2018 World Cup.", "and 2014?", 1),
        ("3x^2", "Who won the 1998 World Cup?", 0),  # a new question with a number
        ("Sure: 'The Trailblazers'.", "Actually, that's perfect.", 1),
        ("How about 'Rise & Shine'?", "not bad", 1),
    ],
)
def test_replies_that_are_not_corrections(answer: str, reply: str, score: int) -> None:
    assert classify_next_state("user", reply, answer=answer).score == score


def test_repeated_question_needs_the_question() -> None:
    answer = "There are several approaches to layout in CSS."
    question = "how do i center a div"
    assert classify_next_state("user", question, answer=answer).score == 0
    verdict = classify_next_state("user", question, answer=answer, question=question)
    assert verdict == HeuristicVerdict(
        -1, "user correction signal: repeated question", "How do i center a div"
    )


def test_politeness_does_not_hide_a_dispute_but_hides_a_replacement() -> None:
    # A strong correction wins over thanks; a differing number next to thanks does not.
    assert classify_next_state("user", "thanks, but that's not what it says").score == -1
    answer = "About 105 calories in a medium banana."
    assert classify_next_state("user", "ok cool so 2 is like 210", answer=answer).score == 1


def test_classify_turn_reads_the_last_user_message() -> None:
    context: list[dict[str, object]] = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "whats the shortcut to screenshot"}]},
        {"role": "assistant", "content": "macOS has tools for this."},
        {"role": "user", "content": "whats the keyboard shortcut to screenshot on mac"},
    ]
    assert last_user_message(context) == "whats the keyboard shortcut to screenshot on mac"
    assert last_user_message([{"role": "system", "content": "x"}]) == ""
    item = {
        "context": context,
        "answer": "macOS has several built-in tools, like Preview.",
        "next_state_role": "user",
        "next_state": "whats the shortcut",
    }
    assert classify_turn(item_input(item)).reason == "user correction signal: repeated question"


@pytest.mark.parametrize(
    ("reply", "score"),
    [
        # round 12 of the blind phrasings, first sight: sarcasm behind thanks / "cool"
        ("thanks for the dissertation. one line would've done", -1),
        ("cool, now do the version for people who don't have an hour to spare", -1),
        ("I wonder if you could say the same thing in about half the space?", -1),
        ("I was actually after its role in WWII, can you focus on that?", -1),
        ("thank you!! exactly the facts I was after", 1),  # "was after" at the end approves
        ("Can't think of anything to add, really — that's good.", 1),
        ("goated answer ngl", 1),
        # the user's own things and new tasks, whatever their form words
        ("it's freezing in my flat today, the heating's broken", 0),
        ("Still broken.", -1),
        ("If I only have a short stopover, is it worth going up?", 0),
        ("since im on my phone, shorter please", -1),
        ("Write a short list of things to pack for a rainy weekend.", 0),
        ("make a table comparing three budget airlines I could use to get to Paris", 0),
        ("Let me try it and get back to you.", 0),
    ],
)
def test_round_12_phrasings_heard_after_first_sight(reply: str, score: int) -> None:
    verdict = classify_next_state("user", reply)
    assert verdict.score == score, verdict
    assert (verdict.hint is not None) == (score == -1)


@pytest.mark.parametrize(
    ("reply", "score"),
    [
        # round 13 of the blind phrasings, first sight: sarcasm behind thanks / "great"
        (
            "wow, three solutions and a pep talk for a one-word bug. one fix would have done, thanks",
            -1,
        ),
        ("a nap would have done me good, thanks", 1),  # "would have done me": no size asked
        ("oh great, swapped it and now it's SyntaxError: invalid syntax", -1),
        ("followed it to the letter and it came out thin, something's off", -1),
        ("three tips, one short line each, nothing more", -1),
        ("my phone's on 3%, just tell me which one to grab", -1),
        ("does it have to be a whole paragraph? I just want one name", -1),
        ("Could you set it out as a timeline, date on the left?", -1),
        ("pitch it for a year 5 class please, they won't follow the a/b stuff", -1),
        ("none of these are any use in winter. anything indoors?", -1),
        ("is any of this backed by actual studies? link me the research please", -1),
        # outcomes reported and hedged approvals
        ("made it tonight, the kids scraped the pan clean", 1),
        ("got him the meter, huge hit", 1),
        ("f-string ftw, ta", 1),
        (
            "I was half expecting a textbook mess, but honestly that's a fair summary. I'll take it.",
            1,
        ),
        # form words in a question of the user's own, and a new piece of writing
        ("is there a shorter way to find the reciprocal, or do I convert it first?", 0),
        ("Write a short lullaby I can sing to my baby.", 0),
    ],
)
def test_round_13_phrasings_heard_after_first_sight(reply: str, score: int) -> None:
    verdict = classify_next_state("user", reply)
    assert verdict.score == score, verdict
    assert (verdict.hint is not None) == (score == -1)


@pytest.mark.parametrize(
    ("reply", "score"),
    [
        # round 14, first sight: sarcasm behind "lovely" / "awesome" / "cool", failed fixes
        (
            "lovely, it stopped looping. it also stopped updating when I switch users. so that's fun",
            -1,
        ),
        ("find: -printf: unknown primary or operator. awesome. it's a macbook btw", -1),
        (
            "cool, didn't expect a tour of every flag. the one-liner on its own would've been plenty",
            -1,
        ),
        (
            "did the stretches for two days and it's stiffer than before. anything else I can try?",
            -1,
        ),
        # readers who will not get through it, requests put as complaints
        ("my uncle has the attention span of a goldfish", -1),
        ("they won't get past line three", -1),
        ("bytes?? can't it print MB or GB like a normal human?", -1),
        ("'either will do' isn't a recommendation, it's a shrug. which would you get?", -1),
        ("where are crooks and curley's wife?? aren't they the loneliest characters", -1),
        # outcomes reported, praise by what it is not
        ("did the short walks for 3 days and I can tie my own shoes again. thank you!!", 1),
        ("clear and not too long, exactly what I needed. thanks", 1),
        ("no waffle, just the facts, the way I like it. going with the kobo", 1),
        ("pushed the abortcontroller version, dashboard went flat. ty", 1),
        ("got a 7 on it!! miss said my intro was one of the strongest", 1),
        ("deleted it. disk at 61% now, legend", 1),
        ("back from Iceland - those microspikes saved us. thanks for that one", 1),
        # the world's things, not the answer's
        ("he'll say you're wrong no matter what, that's just how he is", 0),
        ("the drive looks long, is there anywhere good to stop for lunch?", 0),
        ("what's the difference between the two, do they round differently?", 0),
        ("I'll run it tonight, don't want to thrash the disk right now", 0),
        ("please stop adding emojis", -1),
    ],
)
def test_round_14_phrasings_heard_after_first_sight(reply: str, score: int) -> None:
    verdict = classify_next_state("user", reply)
    assert verdict.score == score, verdict
    assert (verdict.hint is not None) == (score == -1)


@pytest.mark.parametrize(
    ("reply", "score"),
    [
        # round 15, first sight: sarcastic thanks before a request for just the one thing
        ("Many thanks for the partitioning advice. Could I get just the SQL?", -1),
        ("wow, three methods and a love letter to pivot tables. I just wanted the one formula", -1),
        (
            "'Your safety is our top priority!' thanks 😂 could you just talk like a normal person",
            -1,
        ),
        (
            "fascinating stuff, my mates were thrilled to hear it mid-game 🙃 the rule alone next time?",
            -1,
        ),
        ("standup in 2 mins, query only pls", -1),
        ("could it be funnier?? my cousins will heckle me", -1),
        ("can the joke come first? you want the laugh early", -1),
        ("where does council tax go in all this?", -1),
        ("you kind of skipped what I actually type in there", -1),
        ("umm no. that's not how it works", -1),
        # approvals in negative words, outcomes, a comma after "separate thing"
        ("not a thing wrong with that, it's exactly what I was after", 1),
        ("nothing I'd change, that's a plan I can actually stick to", 1),
        ("wasn't expecting much tbh but the sticker thing sorted it. fair play", 1),
        ("gave it a week and... yeah. you were right", 1),
        ("¡gracias! this is great 😄 quick q though, is it worth learning vosotros?", 1),
        ("the line about Priya is GOLD. keeping that", 1),
        ("separate thing, how do I dump just one table with mysqldump?", 0),
        ("she's got a much shorter fuse than my last cat, that's for sure", 0),
        ("I'll start on the 1st, no point kicking off mid-month", 0),
        ("should I be checking it in the afternoon instead?", 0),
        ("use bullets instead", -1),
    ],
)
def test_round_15_phrasings_heard_after_first_sight(reply: str, score: int) -> None:
    verdict = classify_next_state("user", reply)
    assert verdict.score == score, verdict
    assert (verdict.hint is not None) == (score == -1)


@pytest.mark.parametrize(
    ("reply", "score"),
    [
        # round 16, first sight: sarcasm behind "appreciate" / "great" / an emoji in a quote
        (
            "asked for one groupby, got a short course. appreciate the enthusiasm, but the first "
            "snippet was all I needed",
            -1,
        ),
        ("ah great, the Evans Gambit 😅 can I get about a quarter of this?", -1),
        ("'you're going to smash it! 💪' bless. could the actual advice be a bit less cheesy?", -1),
        ("it'll match inside longer runs - '0770090012345' gives a hit", 0),  # no "a hit" praise
        # failed fixes and details ignored
        ("returns an empty list. every time.", -1),
        ("the dashed ones don't match at all", -1),
        ("07700-900123 was literally one of the examples I gave you", -1),
        (
            "did the add and the commit and now it says 'Committing is not possible'. what did I miss?",
            -1,
        ),
        ("the stacked version is unreadable", -1),
        ("my reviewer has been on at me about unreadable patterns, this is great", 1),
        # the user's circumstances, asking for less
        ("screensharing with my whole team watching, I need the three commands, now", -1),
        ("I'm in the garden centre right now, what do I need to buy? one or two things", -1),
        ("im in the shed with oily hands, what do I check FIRST", -1),
        ("ok but what do I do when they don't play e5?", -1),
        ("I'm a new grad. This sounds like someone else entirely.", -1),
        # outcomes reported
        ("quarter turn on the barrel adjuster and it shifts like new", 1),
        ("it's unfurling a new leaf!! first one since march", 1),
        ("GOT THE JOB. the panel loved my answer", 1),
        ("that one line is worth the whole answer", 1),
        ("that did it, thanks! while I'm here - how do I stop git nagging me on every pull?", 1),
        # the world's things
        ("mm right, noted", 0),
        ("how long does it take to recover once you stop overwatering it?", 0),
        ("pretty sure this is because someone force-pushed to main on friday, classic", 0),
    ],
)
def test_round_16_phrasings_heard_after_first_sight(reply: str, score: int) -> None:
    verdict = classify_next_state("user", reply)
    assert verdict.score == score, verdict
    assert (verdict.hint is not None) == (score == -1)
