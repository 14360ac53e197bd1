"""Title case for headlines."""

SMALL_WORDS = {"a", "an", "and", "in", "of", "on", "or", "the", "to"}


def title_case(text: str) -> str:
    """Each word capitalised, except small words that are not the first word."""
    words = text.title().split(" ")
    out = []
    for i, word in enumerate(words):
        if i > 0 and word.lower() in SMALL_WORDS:
            out.append(word.lower())
        else:
            out.append(word)
    return " ".join(out)
