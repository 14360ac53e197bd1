"""A request for less, and whether a shown (+1) answer does what it asks of the rejected one."""

from __future__ import annotations

import pytest

from clawrl_app.engine.judging.length_request import (
    Limits,
    does_what_was_asked,
    form_cue,
    says_something,
    sentence_count,
    stated_limits,
)

DOZEN = "That is a lot of text. Keep it to about a dozen words, please."


@pytest.mark.parametrize(
    ("request_text", "limits"),
    [
        (DOZEN, Limits(words=12)),
        ("Too long. Please answer in at most 15 words.", Limits(words=15)),
        ("Shorter please, 25 words max.", Limits(words=25)),
        ("Give me the gist in two sentences.", Limits(sentences=2)),
        ("Answer in one short sentence please.", Limits(sentences=1)),
        ("Give me a one-liner.", Limits(sentences=1)),
        ("Keep it to a couple of lines, 30 words or 20 words.", Limits(words=20, lines=2)),
        ("Please keep it brief.", Limits()),
        ("Not a word more than you need.", Limits()),
    ],
)
def test_stated_limits(request_text: str, limits: Limits) -> None:
    assert stated_limits(request_text) == limits


def test_a_shown_answer_must_be_shorter_than_the_rejected_one_and_within_the_limit() -> None:
    rejected14 = "A computer virus is a type of software that can cause damage to computers."
    longer = "A computer virus is a type of malicious software that can damage or erase data."
    assert len(longer.split()) > len(rejected14.split())
    assert not does_what_was_asked(longer, rejected14, DOZEN)  # +1 for going longer
    shorter13 = "A computer virus is malicious software that can harm computers and erase data."
    assert not does_what_was_asked(shorter13, rejected14, DOZEN)  # shorter, over the dozen
    assert does_what_was_asked("A virus is software that harms computers.", rejected14, DOZEN)
    # no stated limit: a real shortening (at most 3/4 of the words)
    assert not does_what_was_asked(" ".join(["w"] * 11), " ".join(["w"] * 14), "Too wordy.")
    assert does_what_was_asked(" ".join(["w"] * 10), " ".join(["w"] * 14), "Too wordy.")
    # sentences
    gist = "Give me the gist in two sentences."
    assert not does_what_was_asked("One. Two. Three.", " ".join(["w"] * 60), gist)
    assert does_what_was_asked("One thing. Then two.", " ".join(["w"] * 60), gist)


def test_a_request_not_about_length_is_not_judged_here() -> None:
    calm = "Tone it down a bit: no exclamation points and no emoji, thanks."
    assert does_what_was_asked(" ".join(["w"] * 80), "Hi!", calm)


def test_a_lead_in_or_the_question_repeated_says_nothing() -> None:
    q = "Why do we have seasons?"
    assert not says_something("The answer to this question is:", q)
    assert not says_something('The answer to this question is: "Why do we have seasons?"', q)
    assert says_something("We have seasons because the Earth is tilted.", q)
    assert not says_something('The answer is: "The Autumn Leaves Change Colour"', q)
    assert not says_something("The answer to this question is \u201cEarthquakes\u201d", q)
    assert says_something('The answer is yes: "seasons" come from the tilt.', q)
    assert says_something("Yes.", "Hi?")  # a short question is not looked for
    assert not says_something("  ", q)
    assert sentence_count("No terminator") == 1 and sentence_count("") == 0


def test_the_form_cue_names_the_small_limit_in_words_a_small_model_follows() -> None:
    assert form_cue("Too long. Please answer in at most 15 words.") == " One short sentence."
    assert form_cue(DOZEN) == " One short sentence."
    assert form_cue("Can you say that in one sentence?") == " One short sentence."
    assert form_cue("Shorter please, 25 words max.") == " One short sentence."
    assert form_cue("Way too much text. Give me the gist in two sentences.") == (
        " Two short sentences."
    )
    assert form_cue("Under 40 words, please.") == " Two short sentences."
    assert form_cue("Shorter please, 100 words max.") == ""  # not a small limit
    assert form_cue("Shorter please.") == ""  # no limit stated
    assert form_cue("Please use bullet points, one point per line.") == ""  # not about length
    assert form_cue("Too short, give me at least 30 words.") == ""  # asks for more
