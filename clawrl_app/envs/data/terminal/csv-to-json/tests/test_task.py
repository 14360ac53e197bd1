from pathlib import Path
import json, os, subprocess, tarfile, stat
W = Path('/workspace')

def test_valid_json():
    assert isinstance(json.loads((W / 'people.json').read_text()), list)

def test_content():
    assert json.loads((W / 'people.json').read_text()) == [{'name': 'Ada', 'age': 36}, {'name': 'Alan', 'age': 41}, {'name': 'Grace', 'age': 85}]
