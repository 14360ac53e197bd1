"""URL slugs."""

import re


def slugify(text: str, sep: str = "-") -> str:
    """The lower-case ASCII words of `text` joined by `sep`."""
    text = text.encode("ascii", "ignore").decode("ascii")
    words = re.findall(r"[a-z0-9]+", text.lower())
    return sep.join(words)
