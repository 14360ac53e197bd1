"""Cutting text to a width."""


def truncate(text: str, width: int, marker: str = "…") -> str:
    """`text` cut to at most `width` characters, ending with `marker` when it was cut."""
    if len(text) <= width:
        return text
    return text[:width] + marker
