"""Sliding windows over sequences."""


def windows(seq, size: int) -> list[tuple]:
    """Every run of `size` consecutive items of `seq`, as tuples, in order."""
    if size <= 0:
        raise ValueError("size must be positive")
    return [tuple(seq[i : i + size]) for i in range(len(seq) - size)]
