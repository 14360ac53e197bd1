import json

import pytest

from settings.load import SettingsError, load_settings


def test_invalid_json_raises(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text('{"theme": "dark",}')
    with pytest.raises(SettingsError) as info:
        load_settings(str(path))
    assert isinstance(info.value.__cause__, json.JSONDecodeError)


def test_non_object_raises(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text("[1, 2]")
    with pytest.raises(SettingsError):
        load_settings(str(path))


def test_missing_file_gives_empty(tmp_path):
    assert load_settings(str(tmp_path / "nope.json")) == {}
