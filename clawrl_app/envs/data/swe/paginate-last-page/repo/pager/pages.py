"""Splitting a list of items into pages."""


def page_count(total: int, per_page: int) -> int:
    """How many pages are needed to show `total` items, `per_page` on each page."""
    if per_page <= 0:
        raise ValueError("per_page must be positive")
    return total // per_page


def page(items: list, number: int, per_page: int) -> list:
    """The items on page `number` (1-based)."""
    start = (number - 1) * per_page
    return items[start : start + per_page]
