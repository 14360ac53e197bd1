"""Text comparisons that forgive case and surrounding whitespace."""


def same_text(a: str, b: str) -> bool:
    """True when `a` and `b` are equal ignoring case and surrounding whitespace."""
    return a.strip().lower() == b.strip().lower()
