"""The word model behind the judge's rules (`reply_model`): its features, its training, when
it speaks, and that it hears corrections of a round of the paraphrase set it never saw."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from clawrl_app.engine.judging import reply_model
from clawrl_app.engine.judging.reply_model import about_something_else, features, read, train

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))

from judge_phrasings import PHRASINGS, by_round, load_rows  # noqa: E402

TINY = [
    ("way too long, shorter please", -1),
    ("cut it down a lot", -1),
    ("make it shorter", -1),
    ("thanks, perfect", 1),
    ("great answer", 1),
    ("what is the capital of Peru?", 0),
    ("ok", 0),
]


def test_a_typo_shares_most_features_with_the_word() -> None:
    typo, word = features("shortr"), features("shorter")
    letters = {k for k in typo if k.startswith("c:")}
    assert len(letters & set(word)) / len(letters) >= 0.5
    assert "?" in features("any chance of a shorter one?")
    assert "?" not in features("make it shorter")


def test_training_is_deterministic_and_probabilities_sum_to_one() -> None:
    a, b = train(TINY), train(TINY)
    assert a.weights == b.weights
    p = a.probabilities("shorter please")
    assert sum(p) == pytest.approx(1.0)
    assert p[0] > p[1] and p[0] > p[2]
    assert train(TINY, seed=1).weights != a.weights


def test_it_speaks_only_when_sure_and_never_approves() -> None:
    model = train(TINY)
    assert read("way too long please, cut it down", model=model) == -1
    assert read("thanks, a great answer, perfect", model=model) == 0  # it never says +1
    assert read("shorter", model=model) == 0  # too few words to tell
    # the answer asked the user something: the reply is likely an answer to it
    assert read("way too long please, cut it down", "Shall I go on?", model=model) == 0


@pytest.mark.parametrize(
    "reply",
    [
        "how do they stop it from rusting?",
        "Could this be the tallest tower?",
        "give me a one-sentence slogan for my bakery",
        "I don't have time for Paris this year.",
        "hang on, someone's at the door",
    ],
)
def test_it_is_silent_on_a_reply_about_something_else(reply: str) -> None:
    assert about_something_else(reply)
    assert read(reply) == 0


@pytest.mark.parametrize(
    "reply",
    [
        "any chance of a condensed one?",
        "reading this on my smartwatch lol, needs to be like a third of the size",
        "need this as json with keys name, height_m and year_completed",
    ],
)
def test_it_reads_a_reply_that_points_at_the_answer(reply: str) -> None:
    assert not about_something_else(reply)


def test_it_hears_corrections_of_a_round_it_never_saw() -> None:
    """Round 5 (written blind, after the rules of heuristic-v5): the judge with a model
    trained on every other row agrees on >= 0.9 of it and reads no correction as approval
    (measured 0.925; the rules alone 0.817 with 1 correction read as approval)."""
    (result,) = by_round(PHRASINGS, rounds={5})
    assert result["n"] == 120
    assert result["rules + model"]["agreement"] >= 0.9
    assert result["rules + model"]["corrections_as_approval"] == 0


def test_the_shipped_model_learns_the_shipped_set() -> None:
    model = reply_model.shipped_model()
    labelled = load_rows(PHRASINGS)
    right = sum(
        max(range(3), key=lambda k: model.probabilities(str(r["reply"]))[k]) - 1 == r["label"]
        for r in labelled
    )
    assert right / len(labelled) >= 0.95
