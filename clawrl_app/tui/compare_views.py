"""Pure view functions of the Compare screen (no Textual): default pair, diff text, summary."""

from __future__ import annotations

from typing import Any

from rich.text import Text

from clawrl_app.compare_text import guard_text

CHANGED_STYLE = "reverse"
"""Differing words: reverse video, so the theme's colours apply (no colours in Python)."""


def default_pair(rows: list[dict[str, Any]]) -> tuple[str, str]:
    """(served version, its parent): what the Compare screen opens with."""
    served = next((c for c in rows if c.get("served")), None)
    if served is None:
        return "base", "base"
    return served["version"], served.get("parent") or "base"


def version_choices(rows: list[dict[str, Any]]) -> list[str]:
    """Every checkpoint version, newest first, then base."""
    return [c["version"] for c in rows if c.get("version") != "base"] + ["base"]


def diff_text(segments: list[list[Any]]) -> Text:
    """An answer with the words the other answer lacks highlighted."""
    text = Text()
    for part, changed in segments:
        text.append(str(part), style=CHANGED_STYLE if changed else "")
    return text


def item_title(n: int, item: dict[str, Any]) -> str:
    """`1. <prompt> · identical` / `· differ`, with both answers' lengths."""
    sa, sb = item["scores"]["a"], item["scores"]["b"]
    mark = "identical" if item["same"] else "differ"
    return f"{n}. {item['prompt']} · {mark} · {sa['words']} vs {sb['words']} words"


def summary_line(result: dict[str, Any]) -> str:
    """One line over all prompts (and the guard's scores of both versions, when stored)."""
    s = result["summary"]
    guard = guard_text(result)
    return (
        f"{result['a']} vs {result['b']}: {s['prompts']} prompts, {s['identical']} identical, "
        f"{s['prompts'] - s['identical']} differ · mean {s['a_words_mean']:.1f} vs "
        f"{s['b_words_mean']:.1f} words" + (f" · {guard}" if guard else "")
    )
