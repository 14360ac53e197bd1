"""The one table bench/chaos.py prints: a row per measure, with its goal and verdict."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Row:
    """One line of the table; `ok` None = a figure without a pass/fail goal."""

    part: str
    measure: str
    value: str
    goal: str = ""
    ok: bool | None = None


def render(rows: list[Row]) -> str:
    """Markdown: part, measure, value, goal, verdict."""
    lines = ["| part | measure | value | goal | |", "|---|---|---|---|---|"]
    for r in rows:
        verdict = "" if r.ok is None else ("ok" if r.ok else "FAIL")
        lines.append(f"| {r.part} | {r.measure} | {r.value} | {r.goal} | {verdict} |")
    return "\n".join(lines)
