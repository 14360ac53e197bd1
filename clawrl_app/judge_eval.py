"""`clawrl-app judge-eval`: each judge backend's agreement with a labelled set of next states.

The set ships with the app (`assets/judge_calibration.jsonl`, items written for this
project, roughly balanced over +1/0/-1, user replies and tool results, about half of them
in the casual style people actually type). `--file PATH` scores any file in the same
format (docs/judge-eval.md). The report gives agreement, sign errors (a +1 item judged -1
or a -1 item judged +1: the judge would push training the wrong way) and the confusion
matrix.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clawrl_app.engine.judging.judge import Judge, Verdict
from clawrl_app.engine.judging.prompts import JudgeInput
from clawrl_app.paths import asset_path

LABELS = (1, 0, -1)
CALIBRATION_FILE = "judge_calibration.jsonl"


def calibration_path() -> Path:
    """The labelled set: in the installed package, or in the source tree's assets/."""
    return asset_path(CALIBRATION_FILE)


REQUIRED_KEYS = ("context", "answer", "next_state_role", "next_state", "label")
"""Keys every labelled item must have (`id`, `answer_tool_calls`, `why`, `style` optional)."""
ROLES = ("user", "tool")


class LabelledFileError(ValueError):
    """A malformed line in a labelled file: the message names the file and the line."""

    def __init__(self, path: Path, line: int, problem: str) -> None:
        super().__init__(f"{path}, line {line}: {problem}")
        self.path = path
        self.line = line
        self.problem = problem


def load_items(path: Path | None = None) -> list[dict[str, Any]]:
    """The labelled items, one JSON object per line (blank lines skipped), each checked.

    Raises `LabelledFileError` naming the file, the line and what is wrong.
    """
    path = path or calibration_path()
    items = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            item = parse_item(line, path, number)
            item.setdefault("id", f"line {number}")
            items.append(item)
    return items


def parse_item(line: str, path: Path, number: int) -> dict[str, Any]:
    """One labelled item from its JSON line, or `LabelledFileError` saying what is wrong."""
    try:
        item = json.loads(line)
    except json.JSONDecodeError as exc:
        raise LabelledFileError(path, number, f"not valid JSON ({exc.msg})") from None
    if not isinstance(item, dict):
        raise LabelledFileError(path, number, "expected a JSON object")
    missing = [key for key in REQUIRED_KEYS if key not in item]
    if missing:
        raise LabelledFileError(path, number, f"missing {', '.join(missing)}")
    problem = _item_problem(item)
    if problem:
        raise LabelledFileError(path, number, problem)
    return item


def _item_problem(item: dict[str, Any]) -> str | None:
    label = item["label"]
    if isinstance(label, bool) or label not in LABELS:
        return f"label must be 1, 0 or -1, not {label!r}"
    if item["next_state_role"] not in ROLES:
        return f"next_state_role must be 'user' or 'tool', not {item['next_state_role']!r}"
    context = item["context"]
    if not isinstance(context, list) or not all(
        isinstance(m, dict) and "role" in m for m in context
    ):
        return "context must be a list of messages, each with a role"
    if not isinstance(item["answer"], str) or not isinstance(item["next_state"], str):
        return "answer and next_state must be strings"
    if not isinstance(item.get("answer_tool_calls", []), list):
        return "answer_tool_calls must be a list"
    return None


def balanced_subset(items: list[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
    """Up to `limit` items taken round-robin over the labels (the file is grouped by label)."""
    by_label = {label: [i for i in items if i["label"] == label] for label in LABELS}
    out: list[dict[str, Any]] = []
    while len(out) < min(limit, len(items)):
        for label in LABELS:
            if by_label[label] and len(out) < limit:
                out.append(by_label[label].pop(0))
    return out


@dataclass
class EvalReport:
    """Agreement, sign errors and the confusion matrix (rows: label, columns: judge score)."""

    backend: str
    total: int = 0
    agree: int = 0
    failed: int = 0
    confusion: dict[int, dict[int, int]] = field(
        default_factory=lambda: {a: {b: 0 for b in LABELS} for a in LABELS}
    )
    by_style: dict[str, list[int]] = field(default_factory=dict)
    """Per `style` field ("casual", "written"): [agreeing items, items]."""

    @property
    def agreement(self) -> float:
        """The share of items whose score equals the label."""
        return self.agree / self.total if self.total else 0.0

    @property
    def sign_errors(self) -> int:
        """Items labelled +1 scored -1, plus items labelled -1 scored +1."""
        return self.confusion[1][-1] + self.confusion[-1][1]

    def add(self, label: int, score: int, style: str | None = None) -> None:
        """Count one judged item."""
        self.total += 1
        self.agree += int(label == score)
        self.confusion[label][score] += 1
        if style:
            counts = self.by_style.setdefault(style, [0, 0])
            counts[0] += int(label == score)
            counts[1] += 1


def item_input(item: dict[str, Any]) -> JudgeInput:
    """The judge's input for one labelled item."""
    return JudgeInput(
        context=item["context"],
        answer_text=item["answer"],
        answer_tool_calls=item.get("answer_tool_calls", []),
        next_state_role=item["next_state_role"],
        next_state_text=item["next_state"],
    )


async def evaluate(
    judge: Judge, items: list[dict[str, Any]], progress: Callable[[int, int], None] | None = None
) -> EvalReport:
    """Run `judge` on every item (the turn argument is unused by the shipped judges)."""
    report = EvalReport(judge.name)
    for i, item in enumerate(items):
        try:
            verdict: Verdict = await judge.verdict(item_input(item), None)  # type: ignore[arg-type]
            score = int(max(-1, min(1, round(verdict.score))))
        except Exception:
            report.failed += 1
            score = 0
        report.add(int(item["label"]), score, item.get("style"))
        if progress:
            progress(i + 1, len(items))
    return report


def format_report(report: EvalReport) -> str:
    """Agreement and sign errors, agreement per style, and the confusion matrix."""
    lines = [
        f"{report.backend}: agreement {report.agreement:.3f} ({report.agree}/{report.total}), "
        f"sign errors {report.sign_errors}"
        + (f", {report.failed} failed" if report.failed else ""),
    ]
    for style, (agree, total) in sorted(report.by_style.items()):
        lines.append(f"  {style}: agreement {agree / total:.3f} ({agree}/{total})")
    lines.append("  confusion (rows: label, columns: judge score)")
    lines.append("  label \\ judge    +1    0   -1")
    for label in LABELS:
        row = report.confusion[label]
        name = f"{label:+d}" if label else " 0"
        lines.append(f"  {name}            {row[1]:5d}{row[0]:5d}{row[-1]:5d}")
    return "\n".join(lines)


def stderr_progress(done: int, total: int) -> None:
    print(
        f"\r  judged {done}/{total}", end="\n" if done == total else "", file=sys.stderr, flush=True
    )
