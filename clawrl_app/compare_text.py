"""Text of a comparison shared by the CLI and the Compare screen (pure: no Textual, no torch)."""

from __future__ import annotations

from typing import Any


def guard_text(result: dict[str, Any], sep: str = " · ") -> str:
    """The two versions' stored regression-guard scores ("" when neither was scored)."""
    g = result.get("guard") or {}
    a, b = g.get("a") or {}, g.get("b") or {}
    parts = []
    for key in ("general", "personal", "degeneration"):
        if a.get(key) is None and b.get(key) is None:
            continue

        def fig(x: float | None) -> str:
            return "-" if x is None else f"{x:.2f}"

        what = "rate" if key == "degeneration" else "score"
        parts.append(f"{key} {what} {fig(a.get(key))} vs {fig(b.get(key))}")
    return sep.join(parts)
