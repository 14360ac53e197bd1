"""The pure correction detectors behind the heuristic judge (corrections.py, reply_values.py)."""

from __future__ import annotations

import pytest

from clawrl_app.engine.judging.corrections import (
    actually_correction,
    content_words,
    continuation,
    contradiction,
    repeated_question,
    x_not_y,
)
from clawrl_app.engine.judging.reply_values import (
    bare_name,
    edit_distance,
    extract_values,
    near_miss,
    replacement_value,
)


# --- contradiction ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("reply", "name"),
    [
        ("That's not what the article says at all.", "that's not what"),
        ("thats not what it says", "that's not what"),
        ("It isn't. I just called and they're closed.", "it isn't"),
        ("not quite", "not right"),
        ("That's not gzipped.", "that's not"),
        ("hmm pretty sure thats canberra", "pretty sure"),
        ("i thought it was the nile", "I thought"),
        ("wasnt it moved to 10", "wasn't it"),
        ("Where did you get 1991 from?", "where did you get"),
        ("thats like 20 yrs out of date", "out of date"),
        ("Nothing changed, the files still end in .jpeg.", "nothing changed"),
        ("Oh great, now it's twice as slow.", "worse"),
        ("useless", "useless"),
        ("Can you explain it properly?", "do it properly"),
        ("soft boiled i meant", "I meant"),
        ("Could you make the second sentence warmer?", "make it ..."),
        ("Sorry, I need it as a table rather than a list.", "rather than"),
        ("too formal lol", "too formal"),
        ("u missed the budget one", "you missed"),
        ("doesnt run", "doesn't run"),
        ("bit cold no?", "too formal"),
    ],
)
def test_contradiction_finds_disputes(reply: str, name: str) -> None:
    assert contradiction(reply) == name


@pytest.mark.parametrize(
    "reply",
    [
        "not bad",
        "That's not a problem, thanks!",
        "Not right now, maybe later.",
        "I thought it was great, thanks",
        "I thought that was really clear, thanks",
        "isn't it great?",
        "pretty sure that's perfect",
        "I mean, it's fine",
        "Make a list of five more.",
        "It doesn't matter much",
        "ok",
    ],
)
def test_contradiction_ignores_look_alikes(reply: str) -> None:
    assert contradiction(reply) is None


# --- actually --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "reply",
    ["Actually, make it 6:30.", "the 15th actually", "Hmm, actually the other one", "no actually"],
)
def test_actually_corrects(reply: str) -> None:
    assert actually_correction(reply)


@pytest.mark.parametrize(
    "reply",
    [
        "Actually, that's perfect.",
        "actually this is really good",
        "Actually works now",
        "That was actually helpful.",
    ],
)
def test_actually_praise_is_not_a_correction(reply: str) -> None:
    assert not actually_correction(reply)


# --- X, not Y --------------------------------------------------------------------------------
def test_x_not_y_when_the_answer_said_y() -> None:
    answer = "The review is on Tuesday at 10am."
    assert x_not_y("Wednesday, not Tuesday.", answer) == "Wednesday, not Tuesday"
    assert x_not_y("its 6:30 not 6", "Alarm set for 6:00 AM.") == "6:30, not 6"
    assert x_not_y("tmrw not today", "Reminder set for 5pm today.") == "tmrw, not today"


def test_x_not_y_when_the_question_asked_for_y() -> None:
    assert x_not_y("That's evening, not morning.", "Guten Abend.", "Translate good morning")


@pytest.mark.parametrize(
    "reply", ["not bad", "why not", "Friday, not Monday.", "Not bad at all, I'll use it."]
)
def test_x_not_y_needs_a_y_that_was_said(reply: str) -> None:
    assert x_not_y(reply, "The review is on Tuesday.", "When is the review?") is None


# --- repeated question -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("reply", "question"),
    [
        ("how do i center a div", "how do i center a div"),
        ("what time does it close tho", "what time does the pharmacy on main st close"),
        ("ok but how do i clear it", "how do i clear the npm cache"),
        ("one liner pls", "write a python one liner to sum a list"),
        (
            "Can you give me a simple regex to match email addresses?",
            "Give me a regex that matches email addresses.",
        ),
    ],
)
def test_repeated_question(reply: str, question: str) -> None:
    assert repeated_question(reply, question)


@pytest.mark.parametrize(
    ("reply", "question"),
    [
        ("what about pluto", "list the planets"),
        ("how long does it keep", "how do i make cold brew"),
        ("and 2014?", "who won the 2018 world cup"),
        ("python", "write a python function"),  # one shared word, not a question
        ("", "anything"),
        ("how do i center a div", ""),
    ],
)
def test_not_a_repeated_question(reply: str, question: str) -> None:
    assert not repeated_question(reply, question)


def test_content_words_drop_stop_words_and_fold_plurals() -> None:
    assert content_words("What's the boiling points of Water?") == {"boil", "point", "water"}


# --- continuation ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "reply", ["and 169", "ok and 30%?", "and 'good night'?", "cool, and join?"]
)
def test_continuation(reply: str) -> None:
    assert continuation(reply)


@pytest.mark.parametrize(
    "reply", ["and", "salt and pepper", "and then it crashed again and again and again and again"]
)
def test_not_a_continuation(reply: str) -> None:
    assert not continuation(reply)


# --- values ----------------------------------------------------------------------------------
def test_extract_values_normalises_each_kind() -> None:
    values = extract_values("Moved to Tue the 14th of March at 6pm (was 18:00), 1,250 people")
    assert values == {
        "time": {"6:00"},
        "day": {"tuesday"},
        "month": {"march"},
        "date": {"14"},
        "number": {"1250"},
    }


def test_may_is_a_month_only_next_to_a_number() -> None:
    assert extract_values("The deadline is 15 May.")["month"] == {"may"}
    assert extract_values("You may want to check.")["month"] == set()


@pytest.mark.parametrize(
    ("reply", "answer", "found"),
    [
        ("no, wed", "It's on Tuesday at 3pm.", "day wednesday for tuesday"),
        ("Actually, make it 6:30.", "Booked for 6:00 PM.", "time 6:30 for 6:00"),
        ("168", "12 × 14 = 158.", "number 168 for 12/14/158"),
        ("march", "The deadline is 15 May.", "month march for may"),
        ("the 15th actually", "Added: the 14th at 10:00 AM.", "date 15 for 14"),
        ("make fri 8", "Gym on Friday at 7:00 AM.", "time 8:00 for 7:00"),
        (
            "I just checked the booking, it's Terminal 5.",
            "Your flight leaves from Terminal 3.",
            "number 5 for 3",
        ),
    ],
)
def test_replacement_value(reply: str, answer: str, found: str) -> None:
    assert replacement_value(reply, answer) == found


@pytest.mark.parametrize(
    ("reply", "answer"),
    [
        ("9:15 is fine", "Standup scheduled daily at 9:15."),  # the same value
        ("8:10 right", "Your train leaves at 08:10."),
        ("168", "Sure, what do you need?"),  # the answer gave no number
        ("Who won the 1998 World Cup?", "3x^2"),  # a new question
        ("I went there with 3 friends in 2019 and we loved the food a lot", "Lisbon has 2 parks."),
    ],
)
def test_not_a_replacement_value(reply: str, answer: str) -> None:
    assert replacement_value(reply, answer) is None


def test_bare_name() -> None:
    assert bare_name("ottawa", "Toronto.") == "name ottawa"
    assert bare_name("jane austen??", "It was written by Charlotte Brontë.") == "name jane austen"
    assert bare_name("lima", "Lima.") is None  # the same name
    assert bare_name("huh", "Toronto.") is None  # a reaction
    assert bare_name("is it long", "Hardcore History by Dan Carlin.") is None  # a sentence
    assert bare_name("deep", "it is the realisation that each passer-by has a life") is None


def test_near_miss() -> None:
    assert near_miss("accommodate, double m", "It's 'accomodate'.") == (
        "spelling accommodate for accomodate"
    )
    assert near_miss("get_user_name", "get_username") == "spelling get_user_name for get_username"
    assert near_miss("works", "it worked") is None  # an inflection
    assert near_miss("get_username", "get_username") is None  # the same word
    assert near_miss("please rename it to get_user_name now", "get_username") is None  # long


def test_edit_distance() -> None:
    assert edit_distance("kitten", "sitting") == 3  # limit 2: capped at 3
    assert edit_distance("accomodate", "accommodate") == 1
    assert edit_distance("abc", "abc") == 0
    assert edit_distance("abc", "abcdefg") == 3
