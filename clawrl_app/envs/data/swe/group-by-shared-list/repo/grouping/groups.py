"""Grouping items by a key."""


def group_by(items, key) -> dict:
    """A dict mapping each `key(item)` to the list of items with that key, in input order."""
    keys = [key(item) for item in items]
    groups = dict.fromkeys(keys, [])
    for k, item in zip(keys, items):
        groups[k].append(item)
    return groups
