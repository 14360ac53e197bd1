from pathlib import Path
import json, os, subprocess, tarfile, stat
W = Path('/workspace')

def test_file_exists():
    assert (W / 'sorted.txt').is_file()

def test_content():
    assert (W / 'sorted.txt').read_text().split() == ['adam', 'bob', 'carl', 'mia', 'zoe']
