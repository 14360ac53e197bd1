"""The general set and its code checkers (clawrl_app.general_eval)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clawrl_app.config import GuardSettings
from clawrl_app.general_eval import (
    GeneralItem,
    is_correct,
    item_from_dict,
    load_general_set,
    load_open_prompts,
    score_answers,
)


def test_shipped_set_loads_with_30_or_more_items() -> None:
    items = load_general_set()
    assert len(items) >= 30
    assert len({i.id for i in items}) == len(items)
    assert all(i.question.strip() and (i.accept or i.regex) for i in items)


def test_shipped_open_prompts_are_varied_and_unique(tmp_path: Path) -> None:
    """The degeneration check's open prompts: every kind of long answer among the first 12
    (answered at `open_max_tokens`), 48 in all (the first `budget_prompts` also answered at
    the user's length), unique, with lists, advice and steps making up most of those (where a
    short-answer drift loops)."""
    prompts = load_open_prompts()
    assert len(prompts) == 48 and len({p.id for p in prompts}) == len(prompts)
    assert len({p.prompt for p in prompts}) == len(prompts)
    assert {p.kind for p in prompts[:12]} == {"explain", "describe", "story", "advice",
                                              "compare", "list"}  # fmt: skip
    # the default share answered at the user's length is mostly lists, advice and steps
    first = prompts[: GuardSettings().budget_prompts]
    assert len([p for p in first if p.kind in {"list", "advice", "steps"}]) > len(first) // 2
    bad = tmp_path / "open.jsonl"
    bad.write_text(json.dumps({"id": "a", "kind": "story", "prompt": " "}) + "\n")
    with pytest.raises(ValueError, match="non-empty string"):
        load_open_prompts(bad)
    row = json.dumps({"id": "a", "kind": "story", "prompt": "Tell a story."})
    bad.write_text(row + "\n" + row + "\n")
    with pytest.raises(ValueError, match="duplicate"):
        load_open_prompts(bad)


def test_accept_is_case_insensitive_any_of() -> None:
    item = GeneralItem("x", "Who painted the Mona Lisa?", accept=("leonardo", "da vinci"))
    assert is_correct(item, "It was painted by LEONARDO.")
    assert is_correct(item, "Da Vinci painted it.")
    assert not is_correct(item, "Michelangelo painted it.")


def test_accept_matches_whole_words_only() -> None:
    item = GeneralItem("x", "What is 2 + 3?", accept=("5", "five"))
    assert is_correct(item, "2 + 3 = 5.")
    assert is_correct(item, "The answer is five")
    assert not is_correct(item, "It is 15.")
    assert not is_correct(item, "It is 5000")
    assert not is_correct(item, "fivefold")


def test_regex_checker() -> None:
    item = item_from_dict({"id": "r", "question": "q", "regex": r"\b1[89]\d\d\b"})
    assert is_correct(item, "In 1969.")
    assert not is_correct(item, "In 2001.")


def test_score_answers_counts_and_maps_ids() -> None:
    items = [
        GeneralItem("a", "q1", accept=("paris",)),
        GeneralItem("b", "q2", accept=("blue",)),
    ]
    s = score_answers(items, ["Paris is the capital.", "It is red."])
    assert (s.correct, s.total, s.score) == (1, 2, 0.5)
    assert s.passed == {"a": True, "b": False}
    with pytest.raises(ValueError):
        score_answers(items, ["only one"])


def test_load_rejects_items_without_checker(tmp_path: Path) -> None:
    bad = tmp_path / "set.jsonl"
    bad.write_text(json.dumps({"id": "a", "question": "q"}) + "\n")
    with pytest.raises(ValueError, match="needs 'accept' or 'regex'"):
        load_general_set(bad)
    bad.write_text(json.dumps({"id": "a", "question": "q", "accept": "paris"}) + "\n")
    with pytest.raises(ValueError, match="list of non-empty strings"):
        load_general_set(bad)


def test_load_rejects_duplicate_ids(tmp_path: Path) -> None:
    f = tmp_path / "set.jsonl"
    row = json.dumps({"id": "a", "question": "q", "accept": ["x"]})
    f.write_text(row + "\n\n" + row + "\n")
    with pytest.raises(ValueError, match="duplicate"):
        load_general_set(f)


def test_reject_fails_a_known_wrong_answer() -> None:
    item = item_from_dict(
        {"id": "p", "question": "Largest planet?", "accept": ["jupiter"], "reject": ["neptune"]}
    )
    assert is_correct(item, "Jupiter is the largest.")
    assert not is_correct(item, "It is Neptune, not Jupiter.")


def test_shipped_checkers_on_known_answers() -> None:
    """Answers the embedded model actually gave: the checkers must not be fooled."""
    items = {i.id: i for i in load_general_set()}
    assert not is_correct(items["g26"], "The freezing point of water is -18.0°C.")
    assert is_correct(items["g26"], "Water freezes at 0°C.")
    assert not is_correct(items["g19"], "The planet we live on is Kepler-41B, similar to Earth.")
    assert not is_correct(items["g13"], "So, 1 year is 365 * 12 = 312 months.")
    assert is_correct(items["g13"], "There are 12 months in a year.")
