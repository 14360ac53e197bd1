"""Joining items into an English phrase."""


def human_join(items) -> str:
    """"a", "a and b", "a, b and c"."""
    words = [str(i) for i in items]
    if not words:
        return ""
    if len(words) == 1:
        return words[0]
    return ", ".join(words[:-1]) + " and " + words[-1]
