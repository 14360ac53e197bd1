"""Recursive dict merging for layered configuration."""


def deep_merge(base: dict, override: dict) -> dict:
    """A new dict: `base` with `override` merged in, recursively for nested dicts."""
    result = base
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = deep_merge(result[key], value)
        else:
            result[key] = value
    return result
