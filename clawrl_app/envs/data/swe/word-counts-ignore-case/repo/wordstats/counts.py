"""Counting words."""

import re
from collections import Counter


def word_counts(text: str) -> Counter:
    """How often each word (letters, digits, apostrophes) occurs in `text`."""
    return Counter(re.findall(r"[\w']+", text))
