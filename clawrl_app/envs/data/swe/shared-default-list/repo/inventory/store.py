"""Named lists of items."""


class Inventory:
    """A named list of items."""

    def __init__(self, name: str, items=[]):
        self.name = name
        self.items = items

    def add(self, item):
        """Add `item`; returns the inventory (for chaining)."""
        self.items.append(item)
        return self

    def count(self) -> int:
        return len(self.items)
