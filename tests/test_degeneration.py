"""Degeneration scored by code (clawrl_app.degeneration): loops and repeats are caught, plain
answers, lists and short replies are not."""

from __future__ import annotations

import pytest

from clawrl_app.degeneration import (
    compression_ratio,
    degeneration_rate,
    distinct_n,
    max_phrase_repeats,
    repeated_share,
    score,
    tail_period,
    words,
)

# Answers of a collapsed fine-tune (as seen after 32 "too long" replies), and loops cut off
# at the token limit mid-phrase.
LOOPING = [
    "A volcano is a volcano is a volcano is a volcano is a volcano is",
    "Electricity is like magic, it's like magic! It's like magic! It's like magic! It's like",
    "When you're in the exam room, you can do it. You can do it. You can do it. You can do",
    "The moon is made of rock. The moon is made of rock. The moon is made of rock.",
    "Yes yes yes yes yes yes yes yes yes",
    "It helps you to learn and it helps you to learn and it helps you to learn and it helps",
    "Sure! Here it is: the answer is the answer is the answer is the answer is the answer",
]
HEALTHY = [
    "A tornado is a rotating column of air that extends from a thunderstorm to the ground.",
    "Photosynthesis is the process by which plants use sunlight, water and carbon dioxide to "
    "make glucose and oxygen. It happens in the chloroplasts, mainly in the leaves. The light "
    "reactions capture energy; the Calvin cycle uses it to fix carbon into sugars.",
    "- Sleep at the same time every day\n- Avoid screens before bed\n- Keep the room cool\n"
    "- Avoid caffeine after noon\n- Get some daylight in the morning",
    "Paris.",
    "No, no, no: the capital of Australia is Canberra, not Sydney.",
    "",
    "The cat sat on the mat. The dog sat on the rug. The bird sat on the branch.",
    "Step 1: mix the flour and the water. Step 2: knead the dough for ten minutes. Step 3: "
    "let the dough rise for an hour. Step 4: bake the dough at 220 degrees for 30 minutes.",
]


@pytest.mark.parametrize("answer", LOOPING)
def test_loops_are_degenerate(answer: str) -> None:
    d = score(answer)
    assert d.degenerate, d


@pytest.mark.parametrize("answer", HEALTHY)
def test_plain_answers_lists_and_short_replies_are_not(answer: str) -> None:
    d = score(answer)
    assert not d.degenerate, d


def test_a_long_loop_is_caught_by_every_measure() -> None:
    d = score("The ocean is salty. " * 30)
    assert set(d.reasons) == {"tail loop", "repeats", "low distinct-2", "compresses"}
    assert d.tail_period == 4 and d.max_phrase_repeats == 30


def test_measures() -> None:
    ws = words("It's a test, a TEST: it's a test.")
    assert ws == ["it's", "a", "test", "a", "test", "it's", "a", "test"]
    assert max_phrase_repeats(ws, 2) == 3  # "a test" three times
    assert repeated_share(["a", "b", "c", "a", "b", "c"], 3) == pytest.approx(0.25)  # 1 of 4
    assert repeated_share([], 3) == 0.0 and distinct_n(["a"], 2) == 1.0
    assert distinct_n(["a", "b", "a", "b"], 2) == pytest.approx(2 / 3)
    assert compression_ratio("") == 1.0
    assert compression_ratio("ab" * 200) < 0.1 < compression_ratio("The quick brown fox.")
    assert tail_period(["x", "y", "z", "a", "b", "a", "b", "a", "b"]) == 2
    assert tail_period(["a", "b", "c", "d", "e", "f"]) == 0
    assert tail_period(["no", "no", "no"]) == 0  # shorter than the smallest loop span


def test_degeneration_rate() -> None:
    assert degeneration_rate([]) == 0.0
    assert degeneration_rate([LOOPING[0], HEALTHY[0], HEALTHY[1], LOOPING[1]]) == 0.5
