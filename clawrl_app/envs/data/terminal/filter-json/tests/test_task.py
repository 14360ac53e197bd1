from pathlib import Path
import json, os, subprocess, tarfile, stat
W = Path('/workspace')

def test_valid_json():
    assert isinstance(json.loads((W / 'cheap.json').read_text()), list)

def test_content():
    assert json.loads((W / 'cheap.json').read_text()) == ['pen', 'mug']
