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
