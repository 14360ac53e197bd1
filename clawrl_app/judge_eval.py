"""`clawrl-app judge-eval`: each judge backend's agreement with a labelled set of next states.

The set ships with the app (`assets/judge_calibration.jsonl`, 60+ items written for this
project, balanced over +1/0/-1, user replies and tool results).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clawrl_app.engine.judge import Judge, Verdict
from clawrl_app.engine.judge_prompts import JudgeInput

LABELS = (1, 0, -1)
CALIBRATION_FILE = "judge_calibration.jsonl"


def calibration_path() -> Path:
    """The labelled set: in the installed package, or in the source tree's assets/."""
    here = Path(__file__).resolve().parent
    for candidate in (
        here / "assets" / CALIBRATION_FILE,
        here.parent / "assets" / CALIBRATION_FILE,
    ):
        if candidate.exists():
            return candidate
    raise FileNotFoundError(f"{CALIBRATION_FILE} not found; reinstall clawrl-app")


def load_items(path: Path | None = None) -> list[dict[str, Any]]:
    """The labelled items, one JSON object per line."""
    lines = (path or calibration_path()).read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


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
    """Agreement and the confusion matrix (rows: label, columns: judge score)."""

    backend: str
    total: int = 0
    agree: int = 0
    failed: int = 0
    confusion: dict[int, dict[int, int]] = field(
        default_factory=lambda: {a: {b: 0 for b in LABELS} for a in LABELS}
    )

    @property
    def agreement(self) -> float:
        return self.agree / self.total if self.total else 0.0

    def add(self, label: int, score: int) -> None:
        self.total += 1
        self.agree += int(label == score)
        self.confusion[label][score] += 1


def item_input(item: dict[str, Any]) -> JudgeInput:
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
        report.add(int(item["label"]), score)
        if progress:
            progress(i + 1, len(items))
    return report


def format_report(report: EvalReport) -> str:
    """Agreement line plus a small confusion matrix."""
    lines = [
        f"{report.backend}: agreement {report.agreement:.3f} ({report.agree}/{report.total})"
        + (f", {report.failed} failed" if report.failed else ""),
        "  label \\ judge    +1    0   -1",
    ]
    for label in LABELS:
        row = report.confusion[label]
        lines.append(f"  {label:+d}            {row[1]:5d}{row[0]:5d}{row[-1]:5d}")
    return "\n".join(lines)


def stderr_progress(done: int, total: int) -> None:
    print(
        f"\r  judged {done}/{total}", end="\n" if done == total else "", file=sys.stderr, flush=True
    )
