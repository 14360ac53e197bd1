"""The goals of the learning benchmark (bench/learn_report.goals), on made-up runs."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from learn_report import goals  # noqa: E402


def _run(name: str, compliance: list[float], before: float, after: float) -> dict[str, Any]:
    return {
        "persona": name,
        "evals": [{"compliance": c, "after_turns": 8 * i} for i, c in enumerate(compliance)],
        "general_before": {"score": before},
        "general_after": {"score": after},
        "turns": [{}] * (8 * (len(compliance) - 1)),
    }


def test_goals_use_the_last_block_within_32_turns() -> None:
    runs = [
        _run("a", [0.1, 0.9, 0.5, 0.5, 0.8], 0.6, 0.6),  # 0.8 at 32 turns: met
        _run("b", [0.1, 0.9, 0.9, 0.9, 0.7, 1.0], 0.6, 0.7),  # 0.7 at 32; 1.0 at 40 too late
        _run("c", [0.0, 0.8, 0.8, 0.8, 0.9], 0.6, 0.65),
        _run("d", [0.0, 0.5, 0.8, 0.85, 0.85], 0.6, 0.6),
    ]
    g = goals(runs)
    assert g.compliance == {"a": 0.8, "b": 0.7, "c": 0.9, "d": 0.85}
    assert g.personas_met == 3 and g.compliance_met
    assert g.general_met


def test_goals_not_met() -> None:
    runs = [
        _run("a", [0.1, 0.9], 0.6, 0.55),
        _run("b", [0.1, 0.3], 0.6, 0.6),
        _run("c", [0.1, 0.79], 0.6, 0.6),
        _run("d", [0.1, 0.2], 0.6, 0.6),
    ]
    g = goals(runs)
    assert g.personas_met == 1 and not g.compliance_met
    assert g.general_ok["a"] is False and not g.general_met
    assert g.measured_to == 8
