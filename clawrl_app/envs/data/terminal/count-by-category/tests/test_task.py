from pathlib import Path
import json, os, subprocess, tarfile, stat
W = Path('/workspace')

def test_valid_json():
    assert isinstance(json.loads((W / 'counts.json').read_text()), dict)

def test_content():
    assert json.loads((W / 'counts.json').read_text()) == {'tools': 3, 'toys': 2, 'food': 1}
