"""Splitting sequences into chunks."""


def chunks(items, size: int) -> list[list]:
    """`items` split into lists of `size` items; the last one may be shorter."""
    if size <= 0:
        raise ValueError("size must be positive")
    return [list(items[i : i + size]) for i in range(0, len(items), size)]
