"""General-ability check scored by code: a fixed set of short questions, each with a checker.

The set (`assets/general_set.jsonl`, one JSON object a line) guards against a fine-tune that
learns a user's preference by forgetting what the model knew. Each item has an `id`, a
`question` and a checker:

- `accept`: a list of strings; the answer passes when it contains any of them as a whole word
  or phrase, case-insensitively ("5" matches "It is 5." but not "15"; "da vinci" matches
  "Leonardo da Vinci");
- `regex` (optional, instead of or besides `accept`): a Python regex searched
  case-insensitively; the answer passes when either checker does;
- `reject` (optional): strings (whole word or phrase) that fail the answer whatever else it
  says, for the known wrong answers a small model mixes in ("Neptune" for the largest planet).

No model is involved in scoring (no LLM judge): the same answers always get the same score.

Beside the questions, `assets/open_prompts.jsonl` holds open-ended prompts ("Explain how a
bicycle works.", "Write a short story about a lost key."; `id`, `kind`, `prompt`) with no
right answer: their long answers show a model stuck in a loop, which short fact answers
hide (the form is scored by `clawrl_app.degeneration`).

This module is pure (no torch, no engine), so the benchmark and the app's regression guard can
share it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from clawrl_app.paths import asset_path

GENERAL_SET_FILE = "general_set.jsonl"
OPEN_PROMPTS_FILE = "open_prompts.jsonl"


@dataclass(frozen=True)
class GeneralItem:
    """One question of the general set and the code that checks an answer to it."""

    id: str
    question: str
    accept: tuple[str, ...] = ()
    """Any-of, whole word or phrase, case-insensitive."""
    regex: str | None = None
    """Searched case-insensitively; an alternative to `accept`."""
    reject: tuple[str, ...] = ()
    """Any-of, whole word or phrase: a known wrong answer that fails the item."""


@dataclass(frozen=True)
class GeneralScore:
    """The result of scoring answers to the general set."""

    score: float
    """Fraction of items answered correctly (0..1)."""
    correct: int
    total: int
    passed: dict[str, bool]
    """Item id -> whether its answer passed."""


def _phrase_pattern(phrase: str) -> re.Pattern[str]:
    """`phrase` as a whole word/phrase: word boundaries only where the phrase has word
    characters at its edges (so "co2" needs a boundary, "h₂o" still matches)."""
    body = re.escape(phrase.strip())
    left = r"(?<!\w)" if phrase.strip()[:1].isalnum() else ""
    right = r"(?!\w)" if phrase.strip()[-1:].isalnum() else ""
    return re.compile(left + body + right, re.IGNORECASE)


def _phrases(raw: dict[str, object], key: str) -> tuple[str, ...]:
    vals = raw.get(key, [])
    if not isinstance(vals, list) or not all(isinstance(a, str) and a.strip() for a in vals):
        raise ValueError(f"item {raw.get('id')!r}: '{key}' must be a list of non-empty strings")
    return tuple(vals)


def item_from_dict(raw: dict[str, object]) -> GeneralItem:
    """Build an item from one JSON object; raises ValueError when it has no usable checker."""
    accept = _phrases(raw, "accept")
    reject = _phrases(raw, "reject")
    regex = raw.get("regex")
    if regex is not None:
        if not isinstance(regex, str):
            raise ValueError(f"item {raw.get('id')!r}: 'regex' must be a string")
        re.compile(regex)
    if not accept and regex is None:
        raise ValueError(f"item {raw.get('id')!r}: needs 'accept' or 'regex'")
    return GeneralItem(
        id=str(raw["id"]),
        question=str(raw["question"]),
        accept=accept,
        regex=regex,
        reject=reject,
    )


def load_general_set(path: Path | None = None) -> list[GeneralItem]:
    """Load the general set (default: the one shipped in `assets/`)."""
    items = []
    for n, line in enumerate((path or asset_path(GENERAL_SET_FILE)).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            items.append(item_from_dict(json.loads(line)))
        except (KeyError, ValueError) as exc:
            raise ValueError(f"{path or GENERAL_SET_FILE}:{n}: {exc}") from exc
    ids = [i.id for i in items]
    if len(set(ids)) != len(ids):
        raise ValueError("general set: duplicate item ids")
    return items


@dataclass(frozen=True)
class OpenPrompt:
    """One open-ended prompt: no right answer, only a form to keep (no loops, no repeats)."""

    id: str
    kind: str
    """What it asks for: explain, describe, story, advice, compare or list."""
    prompt: str


def load_open_prompts(path: Path | None = None) -> list[OpenPrompt]:
    """Load the open prompts (default: the ones shipped in `assets/`)."""
    prompts = []
    source = path or asset_path(OPEN_PROMPTS_FILE)
    for n, line in enumerate(source.read_text().splitlines(), 1):
        if not line.strip():
            continue
        raw = json.loads(line)
        text = raw.get("prompt")
        if not isinstance(text, str) or not text.strip():
            raise ValueError(
                f"{path or OPEN_PROMPTS_FILE}:{n}: 'prompt' must be a non-empty string"
            )
        prompts.append(OpenPrompt(str(raw["id"]), str(raw.get("kind", "")), text))
    ids = [p.id for p in prompts]
    if len(set(ids)) != len(ids):
        raise ValueError("open prompts: duplicate ids")
    return prompts


def is_correct(item: GeneralItem, answer: str) -> bool:
    """Whether `answer` passes the item's checker (and names none of its rejected answers)."""
    if any(_phrase_pattern(r).search(answer) for r in item.reject):
        return False
    if any(_phrase_pattern(a).search(answer) for a in item.accept):
        return True
    return item.regex is not None and re.search(item.regex, answer, re.IGNORECASE) is not None


def score_answers(items: Sequence[GeneralItem], answers: Sequence[str]) -> GeneralScore:
    """Score one answer per item (same order)."""
    if len(items) != len(answers):
        raise ValueError(f"{len(items)} items but {len(answers)} answers")
    passed = {it.id: is_correct(it, a) for it, a in zip(items, answers, strict=True)}
    correct = sum(passed.values())
    total = len(items)
    return GeneralScore(correct / total if total else 0.0, correct, total, passed)
